// Package duckdbprofileexporter writes CPU profiles to a DuckDB file in the
// tiered layout of RFD 072 (agent "local" tier, gateway "summary" tier), with
// views and macros for people to query it and a read-only SQL endpoint while
// the collector holds the file.
package duckdbprofileexporter

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/metadata"
)

// NewFactory returns the exporter factory.
func NewFactory() xexporter.Factory {
	return xexporter.NewFactory(metadata.Type,
		func() component.Config { return createDefaultConfig() },
		xexporter.WithProfiles(createProfiles, metadata.ProfilesStability))
}

func createProfiles(ctx context.Context, set exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	c, ok := cfg.(*Config)
	if !ok {
		return nil, fmt.Errorf("duckdbprofile: config is %T, want *Config", cfg)
	}
	e := newProfilesExporter(c, set.TelemetrySettings)
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("duckdbprofile: create metrics: %w", err)
	}
	e.metrics = &exporterMetrics{tb: tb}
	return xexporterhelper.NewProfiles(ctx, set, cfg, e.push,
		exporterhelper.WithStart(e.start),
		exporterhelper.WithShutdown(e.shutdown),
		exporterhelper.WithTimeout(c.TimeoutConfig),
		exporterhelper.WithRetry(c.RetryConfig),
		exporterhelper.WithQueue(c.QueueConfig),
	)
}
