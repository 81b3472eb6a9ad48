package cputime

import (
	"testing"
	"time"
)

// A busy loop is charged; sleeping (waiting, not running) is not.
func TestMeasureCountsRunningNotWaiting(t *testing.T) {
	var sink uint64
	busy := Measure(func() {
		deadline := Thread() + 20*time.Millisecond
		for Thread() < deadline {
			for i := range 1000 {
				sink += uint64(i)
			}
		}
	})
	if busy < 20*time.Millisecond {
		t.Fatalf("busy loop measured %v of CPU, want at least 20ms", busy)
	}
	idle := Measure(func() { time.Sleep(50 * time.Millisecond) })
	if idle >= 25*time.Millisecond {
		t.Fatalf("a 50 ms sleep measured %v of CPU; waiting must not count", idle)
	}
	_ = sink
}
