package duckdbprofileexporter

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// exporterMetrics are the exporter's own telemetry, exported through the
// collector's metrics. A nil *exporterMetrics records nothing.
type exporterMetrics struct {
	rows       metric.Int64Counter
	malformed  metric.Int64Counter
	duplicates metric.Int64Counter
}

func newExporterMetrics(mp metric.MeterProvider) (*exporterMetrics, error) {
	m := mp.Meter("github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter")
	var em exporterMetrics
	var errs [3]error
	em.rows, errs[0] = m.Int64Counter("otelcol_exporter_duckdbprofile_rows_written",
		metric.WithDescription("Stack rows committed to the DuckDB file."), metric.WithUnit("{row}"))
	em.malformed, errs[1] = m.Int64Counter("otelcol_exporter_duckdbprofile_malformed_samples",
		metric.WithDescription("Samples dropped or stored repaired because the input was malformed, by reason."), metric.WithUnit("{sample}"))
	em.duplicates, errs[2] = m.Int64Counter("otelcol_exporter_duckdbprofile_duplicate_batches",
		metric.WithDescription("Requests acknowledged without writing because their hotpath.batch.id was stored before (a resend)."), metric.WithUnit("{batch}"))
	return &em, errors.Join(errs[:]...)
}

func (m *exporterMetrics) recordMalformed(ctx context.Context, byReason map[string]int) {
	if m == nil {
		return
	}
	for reason, n := range byReason {
		m.malformed.Add(ctx, int64(n), metric.WithAttributes(attribute.String("reason", reason)))
	}
}

func (m *exporterMetrics) recordRows(ctx context.Context, n int) {
	if m != nil {
		m.rows.Add(ctx, int64(n))
	}
}

func (m *exporterMetrics) recordDuplicate(ctx context.Context) {
	if m != nil {
		m.duplicates.Add(ctx, 1)
	}
}
