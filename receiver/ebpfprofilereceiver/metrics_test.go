package ebpfprofilereceiver

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/metadatatest"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// The process events the kernel dropped in each drain add up in the
// collector's own telemetry, beside the lost samples.
func TestLostProcessEventsAreCounted(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { tt.Shutdown(context.Background()) })
	m, err := newSelfMetrics(tt.NewTelemetrySettings())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m.record(ctx, sampler.Stats{LostEvents: 3, LostMapFull: 1}, 10, 0, 0, 1, 0)
	m.record(ctx, sampler.Stats{LostEvents: 4}, 10, 0, 0, 1, 0)
	metadatatest.AssertEqualReceiverEbpfprofileProcessEventsLost(t, tt,
		[]metricdata.DataPoint[int64]{{Value: 7}}, metricdatatest.IgnoreTimestamp())
}
