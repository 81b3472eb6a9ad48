package ebpfprofilereceiver

import (
	"runtime"
	"time"
)

// overheadGuard keeps what sampling costs under the agent's CPU budget. It
// watches the per-sample cost alone — the CPU time of draining, symbolizing
// and building an interval's profiles, which a lower rate reduces — smoothed
// over intervals. One-time work (a new process read, a new binary's tables)
// is not answered with a lower rate: it does not shrink with the rate, and is
// kept in check by deferring it (binaryWork). When the smoothed per-sample
// cost is over the budget the rate halves (down to 1 Hz); after calmIntervals
// in a row under a quarter of the budget it doubles again, up to the
// configured rate. The wide gap between the two thresholds keeps it from
// oscillating.
type overheadGuard struct {
	maxPercent   float64 // of the whole machine; 0 turns the guard off
	configuredHz int
	ncpu         int
	calm         int
	smoothed     float64 // per-sample cost, % of the machine; < 0 until the first judged interval
	warmup       int     // intervals still to ignore
}

const (
	calmIntervals = 3
	// warmupIntervals are not judged: the first symbolizes every running
	// process's first stacks (DWARF line tables, the kernel's symbols),
	// which says nothing about the steady state.
	warmupIntervals = 1
	// smoothing is the weight of the newest interval: one expensive
	// interval (a burst of unique stacks) does not halve the rate alone.
	smoothing = 0.5
)

func newOverheadGuard(maxPercent float64, configuredHz int) *overheadGuard {
	return &overheadGuard{maxPercent: maxPercent, configuredHz: configuredHz, ncpu: runtime.NumCPU(), smoothed: -1, warmup: warmupIntervals}
}

// machinePercent is cpu used over wall as a percentage of the whole machine.
func machinePercent(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / (wall.Seconds() * float64(runtime.NumCPU()))
}

// next takes one interval's per-sample CPU time over its wall time and
// returns the smoothed per-sample cost (% of the machine) and the rate to
// sample at next.
func (g *overheadGuard) next(hz int, perSample, wall time.Duration) (smoothed float64, nextHz int) {
	if wall <= 0 {
		return max(g.smoothed, 0), hz
	}
	percent := 100 * perSample.Seconds() / (wall.Seconds() * float64(g.ncpu))
	if g.warmup > 0 {
		g.warmup--
		return percent, hz
	}
	if g.smoothed < 0 {
		g.smoothed = percent
	} else {
		g.smoothed = smoothing*percent + (1-smoothing)*g.smoothed
	}
	if g.maxPercent <= 0 {
		return g.smoothed, hz
	}
	switch {
	case g.smoothed > g.maxPercent:
		g.calm = 0
		return g.smoothed, max(1, hz/2)
	case g.smoothed < g.maxPercent/4 && hz < g.configuredHz:
		g.calm++
		if g.calm >= calmIntervals {
			g.calm = 0
			return g.smoothed, min(g.configuredHz, hz*2)
		}
	default:
		g.calm = 0
	}
	return g.smoothed, hz
}
