package ebpfprofilereceiver

import (
	"testing"
	"time"
)

// testConfig is the receiver configuration the tests start from.
func testConfig() *Config {
	cfg := createDefaultConfig()
	// 99 Hz for a few seconds gives a few hundred samples, enough to check
	// shares to a few percentage points.
	cfg.FrequencyHz = 99
	cfg.Interval = time.Second
	cfg.Control.HTTP.NetAddr.Endpoint = "" // tests that need it pick a free port
	// The test binary builds workloads: its CPU use says nothing about the
	// receiver's, and the guard would lower the rate under the tests' feet.
	cfg.MaxCPUPercent = 0
	return cfg
}

// waitFor polls cond (every 20 ms) until it holds, failing the test with what
// it waited for after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
