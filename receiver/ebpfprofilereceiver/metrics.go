package ebpfprofilereceiver

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/component"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/metadata"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

// selfMetrics records the receiver's own telemetry, declared in
// metadata.yaml (see documentation.md) and exported through the collector's
// metrics so operators can alert on lost samples.
type selfMetrics struct {
	tb *metadata.TelemetryBuilder
}

func newSelfMetrics(set component.TelemetrySettings) (*selfMetrics, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, fmt.Errorf("create receiver metrics: %w", err)
	}
	return &selfMetrics{tb: tb}, nil
}

func (m *selfMetrics) recordSampleCost(ctx context.Context, percent float64) {
	m.tb.ReceiverEbpfprofileSampleCPUPercent.Record(ctx, percent)
}

func (m *selfMetrics) recordWork(ctx context.Context, counts map[workCount]uint64, cpu time.Duration) {
	for k, n := range counts {
		m.tb.ReceiverEbpfprofileBinaryWork.Add(ctx, int64(n), metric.WithAttributes(attribute.String("kind", string(k.kind)), attribute.String("outcome", string(k.outcome))))
	}
	m.tb.ReceiverEbpfprofileBinaryWorkCPU.Add(ctx, cpu.Seconds())
}

// recordGoneBeforeRead counts a process that exited before it could be
// read, at its exit event: named when the files the kernel saw it map name
// its samples.
func (m *selfMetrics) recordGoneBeforeRead(named bool) {
	outcome := "unnamed"
	if named {
		outcome = "named"
	}
	m.tb.ReceiverEbpfprofileProcessesGoneBeforeRead.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

func (m *selfMetrics) recordSymbolizer(ctx context.Context, st symbolize.Stats) {
	m.tb.ReceiverEbpfprofileSymbolTables.Record(ctx, int64(st.Tables+st.Held))
	m.tb.ReceiverEbpfprofileSymbolTableBytes.Record(ctx, int64(st.HeapBytes+st.HeldBytes+st.KernelBytes+st.MemoBytes))
}

func (m *selfMetrics) record(ctx context.Context, st sampler.Stats, kept, filtered uint64, symbolize time.Duration, processes int, mapBytes uint64) {
	outcome := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	reason := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("reason", v)) }
	m.tb.ReceiverEbpfprofileSamples.Add(ctx, int64(kept), outcome("kept"))
	m.tb.ReceiverEbpfprofileSamples.Add(ctx, int64(filtered), outcome("filtered"))
	m.tb.ReceiverEbpfprofileSamples.Add(ctx, int64(st.Idle), outcome("idle"))
	m.tb.ReceiverEbpfprofileSamplesLost.Add(ctx, int64(st.LostMapFull), reason("map_full"))
	m.tb.ReceiverEbpfprofileSamplesLost.Add(ctx, int64(st.UserStackLost), reason("user_stack_map_full"))
	m.tb.ReceiverEbpfprofileSamplesLost.Add(ctx, int64(st.KernelStackLost), reason("kernel_stack_map_full"))
	m.tb.ReceiverEbpfprofileProcessEventsLost.Add(ctx, int64(st.LostEvents))
	m.tb.ReceiverEbpfprofileSymbolizeDuration.Record(ctx, symbolize.Seconds())
	m.tb.ReceiverEbpfprofileProcesses.Record(ctx, int64(processes))
	m.tb.ReceiverEbpfprofileBpfMapBytes.Record(ctx, int64(mapBytes))
}

func (m *selfMetrics) recordUnwind(ctx context.Context, st sampler.Stats, e endedEarlyStats, u *unwinder.Unwinder) {
	reason := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("reason", v)) }
	m.tb.ReceiverEbpfprofileStacksEndedEarly.Add(ctx, int64(e.Truncated), reason(sampler.StackTruncated.String()))
	m.tb.ReceiverEbpfprofileStacksEndedEarly.Add(ctx, int64(e.Unreadable), reason(sampler.StackUnreadable.String()))
	m.tb.ReceiverEbpfprofileStacksEndedEarly.Add(ctx, int64(e.NoRule), reason(sampler.StackInvalidRule.String()))
	m.tb.ReceiverEbpfprofileDwarfUnwound.Add(ctx, int64(st.DWARF))
	outcome := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	m.tb.ReceiverEbpfprofileMemoryMapLookups.Add(ctx, int64(st.VMATables), outcome("table"))
	m.tb.ReceiverEbpfprofileMemoryMapLookups.Add(ctx, int64(st.VMALookups-st.VMATables), outcome("no_table"))
	m.tb.ReceiverEbpfprofileMemoryMapLookups.Add(ctx, int64(st.MappedFiles), outcome("recorded"))
	if u == nil {
		return
	}
	us := u.Stats()
	m.tb.ReceiverEbpfprofileUnwindTables.Record(ctx, int64(us.Tables))
	m.tb.ReceiverEbpfprofileUnwindTableBytes.Record(ctx, int64(us.TableBytes))
	m.tb.ReceiverEbpfprofileUnwindProcesses.Record(ctx, int64(us.Processes))
	m.tb.ReceiverEbpfprofileUnwindTablesOverBudget.Record(ctx, int64(us.OverBudget))
}

func (m *selfMetrics) recordFrequency(ctx context.Context, hz int) {
	m.tb.ReceiverEbpfprofileFrequency.Record(ctx, int64(hz))
}

func (m *selfMetrics) recordOverhead(ctx context.Context, percent float64) {
	m.tb.ReceiverEbpfprofileCPUPercent.Record(ctx, percent)
}

func (m *selfMetrics) recordLeaf(ctx context.Context, l leafStats) {
	outcome := func(v string) metric.AddOption { return metric.WithAttributes(attribute.String("outcome", v)) }
	m.tb.ReceiverEbpfprofileLeafCaller.Add(ctx, int64(l.Recovered), outcome("recovered"))
	m.tb.ReceiverEbpfprofileLeafCaller.Add(ctx, int64(l.NoUnwindInfo), outcome("no_unwind_info"))
	m.tb.ReceiverEbpfprofileLeafCaller.Add(ctx, int64(l.BadReturn), outcome("bad_return"))
	m.tb.ReceiverEbpfprofileLeafCaller.Add(ctx, int64(l.Table), outcome("unwind_table"))
}
