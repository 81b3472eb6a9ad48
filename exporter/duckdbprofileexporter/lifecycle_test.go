package duckdbprofileexporter

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
)

// The profiles lifecycle that mdatagen's generated test leaves out at this
// version (it covers logs, metrics and traces): shutdown without start, and
// two collectors one after the other on the same file, for both tiers.
func TestComponentLifecycleProfiles(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier+"-shutdown", func(t *testing.T) {
			exp, err := NewFactory().CreateProfiles(context.Background(), exportertest.NewNopSettings(NewFactory().Type()), testConfig(t, tier))
			if err != nil {
				t.Fatal(err)
			}
			if err := exp.Shutdown(context.Background()); err != nil {
				t.Fatalf("shutdown without start: %v", err)
			}
		})
		t.Run(tier+"-lifecycle", func(t *testing.T) {
			cfg := testConfig(t, tier)
			for range 2 {
				exp, err := NewFactory().CreateProfiles(context.Background(), exportertest.NewNopSettings(NewFactory().Type()), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
					t.Fatal(err)
				}
				if err := exp.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
