package ebpfprofilereceiver

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

// selfMetrics are the receiver's own telemetry, exported through the
// collector's metrics so operators can alert on lost samples.
type selfMetrics struct {
	samples     metric.Int64Counter
	lost        metric.Int64Counter
	symbolize   metric.Float64Histogram
	processes   metric.Int64Gauge
	mapMemBytes metric.Int64Gauge
	frequency   metric.Int64Gauge
	overhead    metric.Float64Gauge
	leafCaller  metric.Int64Counter
	tables      metric.Int64Gauge
	tableBytes  metric.Int64Gauge
	endedEarly  metric.Int64Counter
	dwarf       metric.Int64Counter
	unwTables   metric.Int64Gauge
	unwBytes    metric.Int64Gauge
	unwProcs    metric.Int64Gauge
	unwOver     metric.Int64Gauge
	sampleCost  metric.Float64Gauge
	work        metric.Int64Counter
	workCPU     metric.Float64Counter
}

func newSelfMetrics(mp metric.MeterProvider) (*selfMetrics, error) {
	m := mp.Meter("github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver")
	var s selfMetrics
	var errs [19]error
	s.samples, errs[0] = m.Int64Counter("hotpath_receiver_samples",
		metric.WithDescription("CPU samples taken, by outcome (kept, filtered, idle)."), metric.WithUnit("{sample}"))
	s.lost, errs[1] = m.Int64Counter("hotpath_receiver_samples_lost",
		metric.WithDescription("CPU samples or stacks lost, by reason."), metric.WithUnit("{sample}"))
	s.symbolize, errs[2] = m.Float64Histogram("hotpath_receiver_symbolize_duration",
		metric.WithDescription("Time to symbolize one interval's stacks."), metric.WithUnit("s"),
		// The budget is 50 ms: the SDK's default buckets (0, 5, 10 ... s)
		// would put every interval in the first one.
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
	s.processes, errs[3] = m.Int64Gauge("hotpath_receiver_processes",
		metric.WithDescription("Processes tracked."), metric.WithUnit("{process}"))
	s.mapMemBytes, errs[4] = m.Int64Gauge("hotpath_receiver_bpf_map_bytes",
		metric.WithDescription("Memory of the BPF maps."), metric.WithUnit("By"))
	s.frequency, errs[5] = m.Int64Gauge("hotpath_receiver_frequency",
		metric.WithDescription("Sampling frequency in force; 0 while sampling is off, below the configured rate while the overhead guard holds it down."), metric.WithUnit("Hz"))
	s.overhead, errs[6] = m.Float64Gauge("hotpath_receiver_cpu_percent",
		metric.WithDescription("CPU used by this collector over the last interval, as a percentage of the machine (what max_cpu_percent bounds)."), metric.WithUnit("%"))
	s.leafCaller, errs[7] = m.Int64Counter("hotpath_receiver_leaf_caller",
		metric.WithDescription("User stacks (weighted by samples) by leaf-caller recovery outcome (unwinding: auto): recovered, no_unwind_info (the leaf's binary has no unwind info at its PC), bad_return (the word at SP points into no executable mapping)."), metric.WithUnit("{sample}"))
	s.tables, errs[8] = m.Int64Gauge("hotpath_receiver_symbol_tables",
		metric.WithDescription("Per-binary symbol tables cached; a steady climb means binaries keep changing (each costs a load)."), metric.WithUnit("{table}"))
	s.tableBytes, errs[9] = m.Int64Gauge("hotpath_receiver_symbol_table_bytes",
		metric.WithDescription("Heap held by cached symbol tables and kernel symbols."), metric.WithUnit("By"))
	s.endedEarly, errs[10] = m.Int64Counter("hotpath_receiver_stacks_ended_early",
		metric.WithDescription("User stacks (weighted by samples) that ended before the outermost frame, by reason: truncated (127 frames), unreadable_memory, no_unwind_rule. Per process: GET /v1/targets on the control endpoint."), metric.WithUnit("{sample}"))
	s.dwarf, errs[11] = m.Int64Counter("hotpath_receiver_dwarf_unwound",
		metric.WithDescription("User stacks the kernel unwound with unwind tables (unwinding: auto; processes with binaries built without frame pointers)."), metric.WithUnit("{sample}"))
	s.unwTables, errs[12] = m.Int64Gauge("hotpath_receiver_unwind_tables",
		metric.WithDescription("Unwind tables loaded in the kernel (one per binary built without frame pointers)."), metric.WithUnit("{table}"))
	s.unwBytes, errs[13] = m.Int64Gauge("hotpath_receiver_unwind_table_bytes",
		metric.WithDescription("Kernel memory of the loaded unwind tables (bounded by max_unwind_table_mib)."), metric.WithUnit("By"))
	s.unwProcs, errs[14] = m.Int64Gauge("hotpath_receiver_unwind_processes",
		metric.WithDescription("Processes the kernel unwinds with tables."), metric.WithUnit("{process}"))
	s.unwOver, errs[15] = m.Int64Gauge("hotpath_receiver_unwind_tables_over_budget",
		metric.WithDescription("Times since start a binary's unwind table did not fit in max_unwind_table_mib (it unwinds with frame pointers)."), metric.WithUnit("{table}"))
	s.sampleCost, errs[16] = m.Float64Gauge("hotpath_receiver_sample_cpu_percent",
		metric.WithDescription("CPU the receiver spends per interval on its samples (drain, symbolize, build), smoothed, as % of the machine: what the overhead guard holds under max_cpu_percent by lowering the rate."), metric.WithUnit("%"))
	s.work, errs[17] = m.Int64Counter("hotpath_receiver_binary_work",
		metric.WithDescription("One-time work per process or binary, by kind (process_read, symbol_table, unwind_table) and outcome: done, or deferred because the interval's budget for it was spent and the process had few samples."), metric.WithUnit("{item}"))
	s.workCPU, errs[18] = m.Float64Counter("hotpath_receiver_binary_work_cpu",
		metric.WithDescription("CPU time spent on one-time work per process or binary."), metric.WithUnit("s"))
	return &s, errors.Join(errs[:]...)
}

func (m *selfMetrics) recordSampleCost(ctx context.Context, percent float64) {
	m.sampleCost.Record(ctx, percent)
}

func (m *selfMetrics) recordWork(ctx context.Context, counts map[workCount]uint64, cpu time.Duration) {
	for k, n := range counts {
		m.work.Add(ctx, int64(n), metric.WithAttributes(attribute.String("kind", string(k.kind)), attribute.String("outcome", string(k.outcome))))
	}
	m.workCPU.Add(ctx, cpu.Seconds())
}

func (m *selfMetrics) recordSymbolizer(ctx context.Context, st symbolize.Stats) {
	m.tables.Record(ctx, int64(st.Tables))
	m.tableBytes.Record(ctx, int64(st.HeapBytes+st.KernelBytes))
}

func (m *selfMetrics) record(ctx context.Context, st sampler.Stats, kept, filtered uint64, symbolize time.Duration, processes int, mapBytes uint64) {
	outcome := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	reason := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("reason", v)) }
	m.samples.Add(ctx, int64(kept), outcome("kept"))
	m.samples.Add(ctx, int64(filtered), outcome("filtered"))
	m.samples.Add(ctx, int64(st.Idle), outcome("idle"))
	m.lost.Add(ctx, int64(st.LostMapFull), reason("map_full"))
	m.lost.Add(ctx, int64(st.UserStackLost), reason("user_stack_map_full"))
	m.lost.Add(ctx, int64(st.KernelStackLost), reason("kernel_stack_map_full"))
	m.symbolize.Record(ctx, symbolize.Seconds())
	m.processes.Record(ctx, int64(processes))
	m.mapMemBytes.Record(ctx, int64(mapBytes))
}

func (m *selfMetrics) recordUnwind(ctx context.Context, st sampler.Stats, e endedEarlyStats, u *unwinder.Unwinder) {
	reason := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("reason", v)) }
	m.endedEarly.Add(ctx, int64(e.Truncated), reason(sampler.StackTruncated.String()))
	m.endedEarly.Add(ctx, int64(e.Unreadable), reason(sampler.StackUnreadable.String()))
	m.endedEarly.Add(ctx, int64(e.NoRule), reason(sampler.StackInvalidRule.String()))
	m.dwarf.Add(ctx, int64(st.DWARF))
	if u == nil {
		return
	}
	us := u.Stats()
	m.unwTables.Record(ctx, int64(us.Tables))
	m.unwBytes.Record(ctx, int64(us.TableBytes))
	m.unwProcs.Record(ctx, int64(us.Processes))
	m.unwOver.Record(ctx, int64(us.OverBudget))
}

func (m *selfMetrics) recordFrequency(ctx context.Context, hz int) {
	m.frequency.Record(ctx, int64(hz))
}

func (m *selfMetrics) recordOverhead(ctx context.Context, percent float64) {
	m.overhead.Record(ctx, percent)
}

func (m *selfMetrics) recordLeaf(ctx context.Context, l leafStats) {
	outcome := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	m.leafCaller.Add(ctx, int64(l.Recovered), outcome("recovered"))
	m.leafCaller.Add(ctx, int64(l.NoUnwindInfo), outcome("no_unwind_info"))
	m.leafCaller.Add(ctx, int64(l.BadReturn), outcome("bad_return"))
	m.leafCaller.Add(ctx, int64(l.Table), outcome("unwind_table"))
}
