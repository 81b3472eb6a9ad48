package duckdbprofileexporter

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Rows written and malformed samples reach the collector's own metrics.
func TestSelfMetrics(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer tel.Shutdown(context.Background())
	set := exportertest.NewNopSettings(NewFactory().Type())
	set.TelemetrySettings = tel.NewTelemetrySettings()
	cfg := testConfig(t, "local")
	exp, err := NewFactory().CreateProfiles(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	b := newProfileBuilder().process(t0, map[string]any{profileschema.AttrServiceName: "api"})
	b.sample(3, []string{"leaf", "main"}, nil, nil)
	b.sample(1, []string{"other", "main"}, nil, nil)
	bad := b.sample(1, []string{"x"}, nil, nil)
	bad.SetStackIndex(999)
	if err := exp.ConsumeProfiles(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	rows, err := tel.GetMetric("otelcol_exporter_duckdbprofile_rows_written")
	if err != nil {
		t.Fatal(err)
	}
	if got := rows.Data.(metricdata.Sum[int64]).DataPoints[0].Value; got != 2 {
		t.Errorf("rows_written = %d, want 2", got)
	}
	mal, err := tel.GetMetric("otelcol_exporter_duckdbprofile_malformed_samples")
	if err != nil {
		t.Fatal(err)
	}
	dps := mal.Data.(metricdata.Sum[int64]).DataPoints
	if len(dps) != 1 || dps[0].Value != 1 {
		t.Fatalf("malformed_samples = %+v, want one reason with 1", dps)
	}
	if reason, _ := dps[0].Attributes.Value("reason"); reason.AsString() != reasonBadStack {
		t.Errorf("reason = %q, want %q", reason.AsString(), reasonBadStack)
	}
}
