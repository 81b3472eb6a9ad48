#!/usr/bin/env bash
# Soak (make soak; not part of make test): first runs the real agent for
# SOAK_DURATION (default 10m) under process, binary and thread churn and
# prints its footprint at start and end (test/soak). Needs root and a built
# bin/otelcol-hotpath. Exits non-zero when RSS, fds, threads or BPF map
# occupancy grow, or a sample is attributed to the wrong process.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "the soak must run as root: the agent loads eBPF programs (CAP_BPF, CAP_PERFMON)"; exit 1; }
export PATH=/usr/local/go/bin:$PATH
collector=${HOTPATH_COLLECTOR:-bin/otelcol-hotpath}
[ -x "$collector" ] || { echo "$collector is missing: run make build first"; exit 1; }
command -v bpftool >/dev/null || { echo "bpftool is needed to count BPF map entries"; exit 1; }
driver=$(mktemp -d)/soak
trap 'rm -rf "$(dirname "$driver")"' EXIT
go build -o "$driver" ./test/soak
"$driver" -collector "$collector" -duration "${SOAK_DURATION:-10m}" -rate "${SOAK_RATE:-6}" -warmup "${SOAK_WARMUP:-30s}" "$@"

# Then the long crash run (issue 15): the shipped agent and gateway killed
# with kill -9 fifteen times while a program is profiled; per minute the
# gateway must hold exactly what the agent stored.
mkdir -p var
HOTPATH_COLLECTOR=$PWD/$collector HOTPATH_CRASH_REPORT=${HOTPATH_CRASH_REPORT:-$PWD/var/crash-soak.txt} \
	go test -tags privileged,soak -count=1 -timeout 60m -run 'TestCrashSoak$' -v ./test/e2e/
