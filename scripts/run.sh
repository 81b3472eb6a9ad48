#!/usr/bin/env bash
# Starts the gateway and the agent on this machine with the shipped configs
# (make run). Both log to $HOTPATH_STATE_DIR/*.log; Ctrl-C (or make stop,
# from another shell) stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "make run must run as root: the agent loads eBPF programs (CAP_BPF, CAP_PERFMON)"; exit 1; }

export HOTPATH_STATE_DIR=${HOTPATH_STATE_DIR:-$PWD/var}
mkdir -p "$HOTPATH_STATE_DIR"
runpid="$HOTPATH_STATE_DIR/run.pid"
if [ -f "$runpid" ] && kill -0 "$(cat "$runpid")" 2>/dev/null; then
	echo "make run is already running (pid $(cat "$runpid")); make stop ends it" >&2
	exit 1
fi
echo $$ >"$runpid"
collector=./bin/otelcol-hotpath
pids=()
stop() {
	trap - INT TERM EXIT
	# The agent first, then the gateway: stopped together, the gateway
	# went first and the agent's last batch failed to send ("connection
	# refused", kept in its queue for the next start but logged as errors).
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[i]}" 2>/dev/null || true
		wait "${pids[i]}" 2>/dev/null || true
	done
	rm -f "$runpid"
}
trap stop INT TERM EXIT

start() { # role
	local role=$1 log="$HOTPATH_STATE_DIR/$1.log"
	# The agent profiles every process, the collectors too: one binary,
	# so without a service of their own their profiles were one service,
	# otelcol-hotpath, the sum of both.
	OTEL_SERVICE_NAME="hotpath-$role" "$collector" --config "distributions/$role/config.yaml" >"$log" 2>&1 &
	pids+=($!)
	echo "started $role (pid $!), log: $log"
}

start gateway
# The agent's queue would retry, but starting it once the gateway listens
# keeps the first minute's log free of connection errors.
for _ in $(seq 50); do
	grep -q "Everything is ready" "$HOTPATH_STATE_DIR/gateway.log" 2>/dev/null && break
	sleep 0.2
done
start agent
echo "state in $HOTPATH_STATE_DIR; press Ctrl-C to stop"
# Exit (and stop the other) as soon as either collector dies.
wait -n "${pids[@]}"
echo "a collector exited; see the logs above" >&2
exit 1
