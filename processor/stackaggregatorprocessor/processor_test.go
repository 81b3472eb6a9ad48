package stackaggregatorprocessor

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestProcessorBuffersAndFlushesOnShutdown(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	set := processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}
	sink := new(consumertest.ProfilesSink)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.Window = time.Hour // nothing closes by itself during the test
	p, err := NewFactory().CreateProfiles(context.Background(), set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if p.Capabilities().MutatesData {
		t.Errorf("stackaggregator only reads its input")
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Hour)
	s := procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{{stack: []string{"f", "main"}, n: 2}, {stack: []string{"g", "main"}, n: 1}}}
	in1 := input(now, 15*time.Second, nil, nil, s)
	in2 := input(now.Add(15*time.Second), 15*time.Second, nil, nil, s)
	want := totals(in1, in2)
	for _, in := range []pprofile.Profiles{in1, in2} {
		if err := p.ConsumeProfiles(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(sink.AllProfiles()); n != 0 {
		t.Fatalf("%d batches passed through before the window closed", n)
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := sink.AllProfiles()
	if len(out) != 1 {
		t.Fatalf("shutdown emitted %d windows, want 1", len(out))
	}
	if got := totals(out...); !maps.Equal(got, want) {
		t.Errorf("totals %v, want %v", got, want)
	}
	checkCounter(t, tel, "stacks_in", 8)
	checkCounter(t, tel, "stacks_out", 4)
	checkCounter(t, tel, "windows_emitted", 1)
}

func checkCounter(t *testing.T, tel *componenttest.Telemetry, name string, want int64) {
	t.Helper()
	m, err := tel.GetMetric("otelcol_processor_stackaggregator_" + name)
	if err != nil {
		t.Errorf("metric %s: %v", name, err)
		return
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok || len(sum.DataPoints) != 1 {
		t.Errorf("metric %s: unexpected data %T", name, m.Data)
		return
	}
	if got := sum.DataPoints[0].Value; got != want {
		t.Errorf("metric %s = %d, want %d", name, got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := createDefaultConfig()
	if err := ok.Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Window = 0 }, "window must be at least 1ms"},
		{func(c *Config) { c.Window = 1500 * time.Microsecond }, "whole number of milliseconds"},
		{func(c *Config) { c.MaxDelay = -time.Second }, "max_delay must not be negative"},
		{func(c *Config) { c.MaxUniqueStacks = 0 }, "max_unique_stacks must be at least 1"},
		{func(c *Config) { c.MinShare = 1 }, "min_share must be a fraction"},
		{func(c *Config) { c.MinShare = -0.1 }, "min_share must be a fraction"},
		{func(c *Config) { c.TopN = -1 }, "top_n must not be negative"},
	} {
		c := createDefaultConfig()
		tc.mutate(c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
		}
	}
}

// TestTickerFlushEmitsClosedWindowsOnly drives the processor's flush with a
// fixed clock (the ticker only decides when flush runs).
func TestTickerFlushEmitsClosedWindowsOnly(t *testing.T) {
	tel := componenttest.NewTelemetry()
	defer func() { _ = tel.Shutdown(context.Background()) }()
	sink := new(consumertest.ProfilesSink)
	cfg := createDefaultConfig()
	p, err := newProcessor(cfg, processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}, sink)
	if err != nil {
		t.Fatal(err)
	}
	clock := t0.Add(16 * time.Second)
	p.now = func() time.Time { return clock }
	s := procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{{stack: []string{"f"}, n: 1}}}
	for _, start := range []time.Time{t0, t0.Add(15 * time.Second)} {
		if _, err := p.process(context.Background(), input(start, 15*time.Second, nil, nil, s)); err == nil {
			t.Fatal("process must return ErrSkipProcessingData: data is buffered, not passed on")
		}
	}
	ctx := context.Background()
	if err := p.flush(ctx, false); err != nil || len(sink.AllProfiles()) != 0 {
		t.Fatalf("emitted %d windows before max_delay passed (err %v)", len(sink.AllProfiles()), err)
	}
	clock = t0.Add(20 * time.Second)
	if err := p.flush(ctx, false); err != nil || len(sink.AllProfiles()) != 1 {
		t.Fatalf("emitted %d windows once the first closed, want 1 (err %v)", len(sink.AllProfiles()), err)
	}
	// A late batch for the emitted window is counted and emitted on its own.
	if _, err := p.process(ctx, input(t0, 15*time.Second, nil, nil, s)); err == nil {
		t.Fatal("expected ErrSkipProcessingData")
	}
	checkCounter(t, tel, "late_samples", 2)
	clock = t0.Add(35 * time.Second)
	if err := p.flush(ctx, false); err != nil || len(sink.AllProfiles()) != 3 {
		t.Fatalf("emitted %d windows in all, want 3 (first, late first, second)", len(sink.AllProfiles()))
	}
	checkCounter(t, tel, "windows_emitted", 3)
}
