package ebpfprofilereceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/metadatatest"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// The process events the kernel dropped in each drain add up in the
// collector's own telemetry, beside the lost samples.
func TestLostProcessEventsAreCounted(t *testing.T) {
	m, tt := testSelfMetrics(t)
	ctx := context.Background()
	m.record(ctx, sampler.Stats{LostEvents: 3, LostMapFull: 1}, 10, 0, 0, 1, 0)
	m.record(ctx, sampler.Stats{LostEvents: 4}, 10, 0, 0, 1, 0)
	metadatatest.AssertEqualReceiverEbpfprofileProcessEventsLost(t, tt,
		[]metricdata.DataPoint[int64]{{Value: 7}}, metricdatatest.IgnoreTimestamp())
}

// The kernel's finds of frames outside the mappings a process was given
// add up by outcome: in the files the process mapped, or looked up in its
// memory map with a loaded table, or with none.
func TestMemoryMapLookupsAreCounted(t *testing.T) {
	m, tt := testSelfMetrics(t)
	ctx := context.Background()
	m.recordUnwind(ctx, sampler.Stats{VMALookups: 5, VMATables: 2, MappedFiles: 7}, endedEarlyStats{}, nil)
	m.recordUnwind(ctx, sampler.Stats{VMALookups: 3, VMATables: 3, MappedFiles: 4}, endedEarlyStats{}, nil)
	metadatatest.AssertEqualReceiverEbpfprofileMemoryMapLookups(t, tt, []metricdata.DataPoint[int64]{
		{Value: 5, Attributes: attribute.NewSet(attribute.String("outcome", "table"))},
		{Value: 3, Attributes: attribute.NewSet(attribute.String("outcome", "no_table"))},
		{Value: 11, Attributes: attribute.NewSet(attribute.String("outcome", "recorded"))},
	}, metricdatatest.IgnoreTimestamp())
}

// Processes gone before they could be read add up by outcome: named from
// the files the kernel saw them map, or not.
func TestProcessesGoneBeforeReadAreCounted(t *testing.T) {
	m, tt := testSelfMetrics(t)
	m.recordGoneBeforeRead(true)
	m.recordGoneBeforeRead(false)
	m.recordGoneBeforeRead(true)
	metadatatest.AssertEqualReceiverEbpfprofileProcessesGoneBeforeRead(t, tt, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("outcome", "named"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("outcome", "unnamed"))},
	}, metricdatatest.IgnoreTimestamp())
}

// testSelfMetrics is the receiver's self-metrics on a test telemetry.
func testSelfMetrics(t *testing.T) (*selfMetrics, *componenttest.Telemetry) {
	t.Helper()
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tt.Shutdown(context.Background()) })
	m, err := newSelfMetrics(tt.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	return m, tt
}
