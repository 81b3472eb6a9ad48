//go:build linux

package sampler

import (
	"testing"
	"time"
)

func TestSizeMaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ncpu int
		want mapSizes
	}{
		// 2 CPUs × 19 Hz × 15 s × 1.25 = 712.5, + 256 slack → 969.
		{"defaults on 2 CPUs", Config{}, 2, mapSizes{keys: 969, stacks: 1938}},
		// 64 × 19 × 15 × 1.25 = 22800: capped by MaxUniqueStacks, stack
		// map by the automatic cap.
		{"defaults on 64 CPUs", Config{}, 64, mapSizes{keys: 10_000, stacks: maxAutoStackEntries}},
		{"tiny limit", Config{MaxUniqueStacks: 4}, 2, mapSizes{keys: 4, stacks: minStackEntries}},
		{"explicit stack entries", Config{StackMapEntries: 3000}, 2, mapSizes{keys: 969, stacks: 3000}},
		{"short interval", Config{FrequencyHz: 99, Interval: time.Second}, 4, mapSizes{keys: 751, stacks: 1502}},
	} {
		got := sizeMaps(tc.cfg.withDefaults(), tc.ncpu)
		if got != tc.want {
			t.Errorf("%s: sizeMaps = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).validate(); err != nil {
		t.Errorf("zero config (defaults): %v", err)
	}
	if err := (Config{FrequencyHz: -1, MaxUniqueStacks: -1}).validate(); err == nil {
		t.Error("negative fields accepted")
	}
}

func TestEventKindString(t *testing.T) {
	for k, want := range map[EventKind]string{EventSeen: "seen", EventExec: "exec", EventExit: "exit", EventMapsChanged: "maps_changed", EventPythonCode: "python_code", 9: "EventKind(9)"} {
		if got := k.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", k, got, want)
		}
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{FrequencyHz: -1},
		{MaxUniqueStacks: -3},
		{Interval: -time.Second},
		{StackMapEntries: -1},
		{StackMapEntries: maxEntries + 1},
		{FrequencyHz: 1 << 30},
	} {
		if s, err := Open(cfg); err == nil {
			s.Close()
			t.Errorf("Open(%+v) succeeded", cfg)
		}
	}
}
