package duckdbprofileexporter

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/metadata"
)

// exporterMetrics records the exporter's own telemetry, declared in
// metadata.yaml (see documentation.md). A nil *exporterMetrics records
// nothing.
type exporterMetrics struct {
	tb *metadata.TelemetryBuilder
}

func (m *exporterMetrics) recordMalformed(ctx context.Context, byReason map[string]int) {
	if m == nil {
		return
	}
	for reason, n := range byReason {
		m.tb.ExporterDuckdbprofileMalformedSamples.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (m *exporterMetrics) recordRows(ctx context.Context, n int) {
	if m != nil {
		m.tb.ExporterDuckdbprofileRowsWritten.Add(ctx, int64(n))
	}
}

func (m *exporterMetrics) recordDuplicate(ctx context.Context) {
	if m != nil {
		m.tb.ExporterDuckdbprofileDuplicateBatches.Add(ctx, 1)
	}
}
