package ebpfprofilereceiver

import (
	"testing"
	"time"
)

func TestOverheadGuardStepsDownAndBackUp(t *testing.T) {
	g := newOverheadGuard(1, 19)
	g.ncpu, g.warmup = 2, 0
	wall := 15 * time.Second
	over := 400 * time.Millisecond // 0.4 s of 30 CPU-seconds: 1.33 % of the machine
	under := 30 * time.Millisecond // 0.1 %

	hz := 19
	var percent float64
	for _, want := range []int{9, 4, 2, 1, 1} {
		percent, hz = g.next(hz, over, wall)
		if hz != want {
			t.Fatalf("over budget (%.2f %%): hz = %d, want %d", percent, hz, want)
		}
	}
	if percent < 1.3 || percent > 1.4 {
		t.Errorf("percent = %.3f, want 1.33 (0.4 s of 2 CPUs × 15 s)", percent)
	}
	// The smoothed cost falls 1.33 → 0.72 → 0.41 → 0.25 → 0.18 …: calm
	// (under a quarter of the budget) from the fourth interval on, and the
	// rate doubles after three calm intervals in a row, never above the
	// configured rate.
	for i, want := range []int{1, 1, 1, 1, 1, 2, 2, 2, 4, 4, 4, 8, 8, 8, 16, 16, 16, 19, 19, 19} {
		if _, hz = g.next(hz, under, wall); hz != want {
			t.Fatalf("calm interval %d: hz = %d, want %d", i+1, hz, want)
		}
	}
	// A busy interval in between resets the count.
	hz = 4
	g.calm = 0
	_, hz = g.next(hz, under, wall)
	_, hz = g.next(hz, 200*time.Millisecond, wall) // smoothed 0.39 %: neither over nor calm
	_, hz = g.next(hz, under, wall)
	_, hz = g.next(hz, under, wall)
	if hz != 4 {
		t.Errorf("hz = %d after an interrupted calm streak, want 4", hz)
	}
}

// One expensive interval (a burst of new stacks) does not halve the rate on
// its own: the guard judges the smoothed cost.
func TestOverheadGuardSmoothsOneSpike(t *testing.T) {
	g := newOverheadGuard(1, 19)
	g.ncpu, g.warmup = 2, 0
	wall := 15 * time.Second
	for range 5 {
		if _, hz := g.next(19, 30*time.Millisecond, wall); hz != 19 {
			t.Fatalf("calm: hz = %d, want 19", hz)
		}
	}
	spike := 450 * time.Millisecond // 1.5 % of the machine for one interval
	if s, hz := g.next(19, spike, wall); hz != 19 {
		t.Fatalf("one spike (smoothed %.2f %%) lowered the rate to %d Hz", s, hz)
	}
	if s, hz := g.next(19, spike, wall); hz != 9 {
		t.Fatalf("a second spike in a row (smoothed %.2f %%): hz = %d, want 9", s, hz)
	}
}

// The first interval (start-up) is not judged.
func TestOverheadGuardWarmup(t *testing.T) {
	g := newOverheadGuard(1, 19)
	g.ncpu = 2
	if _, hz := g.next(19, 30*time.Second, 15*time.Second); hz != 19 {
		t.Fatalf("warm-up interval: hz = %d, want 19", hz)
	}
	if _, hz := g.next(19, 30*time.Second, 15*time.Second); hz != 9 {
		t.Errorf("after warm-up: hz = %d, want 9", hz)
	}
}

func TestOverheadGuardOff(t *testing.T) {
	g := newOverheadGuard(0, 19)
	g.ncpu, g.warmup = 2, 0
	if p, hz := g.next(19, 30*time.Second, 15*time.Second); hz != 19 || p != 100 {
		t.Errorf("guard off: (%.1f %%, %d Hz), want (100 %%, 19 Hz)", p, hz)
	}
}
