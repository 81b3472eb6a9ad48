#!/usr/bin/env bash
# make bench: measures what hotpath costs on this machine and writes
# bench/results/<date>-<host>.md (see bench/README.md). Run as root: the agent
# phase runs the real collector, which loads eBPF programs. A few minutes.
#
# Knobs (environment):
#   BENCH_COUNT=6        -count of the Go micro-benchmarks (benchstat needs 6 for a confidence interval)
#   BENCH_STEADY=60s     agent steady-state window (covers four 15 s intervals)
#   BENCH_PAIRS=4        A/B pairs for the workload slowdown
#   BENCH_ARM=15s        workload run per arm (covers one 15 s interval)
#   BENCH_UNWIND_STEADY=45s  steady window per agent run of the unwinding phase (4 runs)
#   BENCH_CHURN_SECONDS=120  window per agent run of the churn phase (2 runs: guard on, guard off) and the container phase (1 run)
#   BENCH_CHURN_AFTER=180    then the churn stops and the agent's memory is measured this long
#   BENCH_SPAN=24h       simulated time written to the gateway's summary tier
#   BENCH_LOCAL_SPAN=3h  the last part of it also written to the agent's local tier
#   BENCH_DAYS=30        days stored for the long query
#   BENCH_ONLY="agent unwinding churn container symbolize micro storage"  phases to run (a subset
#                        writes bench/results/<date>-<host>-<phases>.md)
#   BENCH_KEEP=1         keep the work directory (JSON, logs, DuckDB files)
#   BENCH_SMOKE=1        run each micro-benchmark once and nothing else (make test)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$HOME/go/bin:$PATH
[ "$(id -u)" = 0 ] || { echo "make bench must run as root: the agent phase loads eBPF programs (CAP_BPF, CAP_PERFMON)"; exit 1; }

BENCH_COUNT=${BENCH_COUNT:-6}
BENCH_STEADY=${BENCH_STEADY:-60s}
BENCH_PAIRS=${BENCH_PAIRS:-4}
BENCH_ARM=${BENCH_ARM:-15s}
BENCH_UNWIND_STEADY=${BENCH_UNWIND_STEADY:-45s}
BENCH_CHURN_SECONDS=${BENCH_CHURN_SECONDS:-120}
BENCH_CHURN_AFTER=${BENCH_CHURN_AFTER:-180}
BENCH_SPAN=${BENCH_SPAN:-24h}
BENCH_LOCAL_SPAN=${BENCH_LOCAL_SPAN:-3h}
BENCH_DAYS=${BENCH_DAYS:-30}
all_phases="agent unwinding churn container symbolize micro storage"
BENCH_ONLY=${BENCH_ONLY:-$all_phases}

# The micro phase's Go benchmarks: package, -bench regexp, -benchtime, and
# -count where BENCH_COUNT would repeat in vain.
micro_benchmarks=(
	"./internal/symbolize ^(BenchmarkSymbolizeInterval|BenchmarkSymbolizeIntervalUnseen)$ 50x"
	"./receiver/ebpfprofilereceiver/internal/profilebuilder ^BenchmarkInterval$ 0.5s"
	"./receiver/ebpfprofilereceiver/internal/sampler ^BenchmarkPythonWalk$ 20x"
	"./receiver/ebpfprofilereceiver/internal/sampler ^BenchmarkPythonResolve$ 2000x"
	# A JVM's JIT code named from its code cache: what a drain pays per
	# address it has not named in that drain (starts a JVM: java on PATH).
	"./receiver/ebpfprofilereceiver/internal/hotspot ^BenchmarkCodeCacheFrames$ 20x"
	"./processor/stackaggregatorprocessor ^(BenchmarkMerge|BenchmarkWindow)$ 0.5s"
	"./exporter/duckdbprofileexporter/internal/writer ^BenchmarkWrite$ 5x"
	# A run of BenchmarkPush is one checkpoint cycle of its tier (see its
	# comment): 20 pushes local, 80 summary; the fleet's 50,000-row pushes
	# pass the summary tier's threshold every few.
	"./exporter/duckdbprofileexporter ^BenchmarkPush/(local|local-known|summary-fleet-minute)$ 20x"
	"./exporter/duckdbprofileexporter ^BenchmarkPush/(summary|summary-known)$ 80x"
	# A day of an agent on a simulated clock: its file's bytes are the
	# same every run, so once is enough (about 2 minutes).
	"./exporter/duckdbprofileexporter ^BenchmarkLocalTierUptime$ 22x 1"
)
# go_bench runs Go benchmarks: package, -bench regexp, -benchtime, -count
# (the BPF ones are in privileged files).
go_bench() {
	echo "+ go test -tags privileged -run '^\$' -bench '$2' -benchtime $3 -count $4 $1" >&2
	go test -tags privileged -run '^$' -bench "$2" -benchtime "$3" -count "$4" "$1"
}
if [ "${BENCH_SMOKE:-0}" = 1 ]; then
	# make test runs each once: a benchmark that no longer runs (BenchmarkWrite
	# panicked for hours unseen) fails the tests, not the next make bench.
	for m in "${micro_benchmarks[@]}"; do
		# shellcheck disable=SC2086 # package, regexp and benchtime, split
		set -- $m
		go_bench "$1" "$2" 1x 1
	done
	exit 0
fi

work=$(mktemp -d /tmp/hotpath-bench.XXXXXX)
if [ "${BENCH_KEEP:-0}" = 1 ]; then
	echo "work directory (kept): $work"
else
	trap 'rm -rf "$work"' EXIT
fi
# A run of some phases only does not overwrite the day's full results:
# it gets the phases in its name (…-unwinding.md).
suffix=""
[ "$(echo $BENCH_ONLY)" = "$all_phases" ] || suffix="-$(echo $BENCH_ONLY | tr ' ' '-')"
results="bench/results/$(date -u +%Y-%m-%d)-$(hostname -s)$suffix.md"
failed=()

run() { # echo a command, then run it; a failure is recorded, not fatal
	echo "+ $*" >&2
	"$@" || { echo "FAILED: $*" >&2; failed+=("$1 $2"); return 0; }
}
wants() { [[ " $BENCH_ONLY " == *" $1 "* ]]; }

# The collector phases run the collector `make build` wrote; a missing binary
# would fail each phase with a bare "no such file" after the tools were built.
for phase in agent unwinding churn container symbolize; do
	if wants "$phase" && [ ! -x bin/otelcol-hotpath ]; then
		echo "bench.sh: the $phase phase runs bin/otelcol-hotpath, which is missing: run make build first (make bench does)" >&2
		exit 2
	fi
done

echo "== building the bench tools"
go build -o bin/hotpath-bench ./bench/cmd/hotpath-bench
go build -o bin/hotpath-burn ./bench/cmd/hotpath-burn
# benchstat is installed by `make bench` at the Makefile's BENCHSTAT_VERSION.
command -v benchstat >/dev/null || echo "no benchstat on PATH (make bench installs it): the report uses its own median/range" >&2

{
	echo "date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "host:     $(hostname) ($(nproc) CPUs, $(uname -r))"
	echo "loadavg:  $(cat /proc/loadavg)   (at start; the machine may be shared)"
	echo "commit:   $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' + uncommitted changes')"
	echo "go:       $(go version)"
	echo "settings: BENCH_COUNT=$BENCH_COUNT BENCH_STEADY=$BENCH_STEADY BENCH_PAIRS=$BENCH_PAIRS BENCH_ARM=$BENCH_ARM BENCH_UNWIND_STEADY=$BENCH_UNWIND_STEADY BENCH_CHURN_SECONDS=$BENCH_CHURN_SECONDS BENCH_CHURN_AFTER=$BENCH_CHURN_AFTER BENCH_SPAN=$BENCH_SPAN BENCH_LOCAL_SPAN=$BENCH_LOCAL_SPAN BENCH_DAYS=$BENCH_DAYS"
} >"$work/env.txt"
cat "$work/env.txt"

if wants agent; then
	echo "== agent: the real collector (distributions/agent/config.yaml → loopback gateway) under a busy workload"
	run ./bin/hotpath-bench agent -out "$work/agent.json" -dir "$work/agent" \
		-steady "$BENCH_STEADY" -pairs "$BENCH_PAIRS" -arm "$BENCH_ARM"
fi

if wants unwinding; then
	echo "== unwinding: the agent with unwinding: frame_pointer vs auto (interleaved, 6 runs) on code without frame pointers, a python3 loop and a node loop"
	run ./bin/hotpath-bench unwinding -out "$work/unwinding.json" -dir "$work/unwinding" \
		-steady "$BENCH_UNWIND_STEADY"
fi

if wants churn; then
	echo "== churn: the agent on a CI node (steady C and Go, >= 5 process starts/s, a new binary every second), guard on and off"
	run ./bin/hotpath-bench churn -out "$work/churn.json" -dir "$work/churn" \
		-window "${BENCH_CHURN_SECONDS}s" -after "${BENCH_CHURN_AFTER}s"
fi

if wants container; then
	echo "== container: the churn's workload in a container (overlay root, kubepods cgroup), guard on"
	run ./bin/hotpath-bench churn -container -out "$work/container.json" -dir "$work/container" \
		-window "${BENCH_CHURN_SECONDS}s" -after 0s
fi

if wants symbolize; then
	echo "== symbolize: per-interval symbolization time"
	run ./bin/hotpath-bench symbolize -out "$work/symbolize.json"
fi

if wants micro; then
	echo "== micro: Go benchmarks of the hot paths (-count $BENCH_COUNT)"
	: >"$work/micro.txt"
	micro() { # package, -bench regexp, -benchtime[, -count instead of BENCH_COUNT]
		go_bench "$1" "$2" "$3" "${4:-$BENCH_COUNT}" | tee -a "$work/micro.txt" | grep -E '^(Benchmark|ok|FAIL)' >&2 \
			|| { echo "FAILED: go test -bench $1" >&2; failed+=("micro $1"); }
	}
	for m in "${micro_benchmarks[@]}"; do
		# shellcheck disable=SC2086 # package, regexp, benchtime (and count), split
		micro $m
	done
	if command -v benchstat >/dev/null; then
		benchstat "$work/micro.txt" >"$work/benchstat.txt" 2>&1 || true
	fi
fi

if wants storage; then
	echo "== storage: a simulated day through the real exporter, then query latency"
	run ./bin/hotpath-bench storage -out "$work/storage.json" -dir "$work/storage" \
		-span "$BENCH_SPAN" -local-span "$BENCH_LOCAL_SPAN" -days "$BENCH_DAYS"
fi

echo "== report"
echo "loadavg at end: $(cat /proc/loadavg)" >>"$work/env.txt"
run ./bin/hotpath-bench report -dir "$work" -results "$results" -phases "$BENCH_ONLY"
if [ ${#failed[@]} -gt 0 ]; then
	echo "failed phases: ${failed[*]}" >&2
	exit 1
fi
