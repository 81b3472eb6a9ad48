package ebpfprofilereceiver

import (
	"runtime"
	"time"
)

// overheadGuard keeps the agent under its CPU budget: when the whole process
// used more than maxPercent of the machine over an interval, it halves the
// sampling rate (down to 1 Hz); after calmIntervals in a row under a quarter
// of the budget it doubles it again, up to the configured rate. The wide gap
// between the two thresholds keeps it from oscillating.
type overheadGuard struct {
	maxPercent   float64 // of the whole machine; 0 turns the guard off
	configuredHz int
	ncpu         int
	calm         int
	warmup       int // intervals still to ignore
}

const (
	calmIntervals = 3
	// warmupIntervals are not judged: the first ones read every running
	// process's binaries and the kernel's symbols once, a cost that says
	// nothing about the steady state (measured: 6 % of a 2-core machine in
	// the first 15 s, which would otherwise take the rate from 19 Hz to 2 Hz
	// for minutes).
	warmupIntervals = 2
)

func newOverheadGuard(maxPercent float64, configuredHz int) *overheadGuard {
	return &overheadGuard{maxPercent: maxPercent, configuredHz: configuredHz, ncpu: runtime.NumCPU(), warmup: warmupIntervals}
}

// next returns the process's CPU use as a percentage of the machine over one
// interval (cpu seconds used in wall seconds), and the rate to sample at next.
func (g *overheadGuard) next(hz int, cpu, wall time.Duration) (percent float64, nextHz int) {
	if wall <= 0 {
		return 0, hz
	}
	percent = 100 * cpu.Seconds() / (wall.Seconds() * float64(g.ncpu))
	if g.maxPercent <= 0 {
		return percent, hz
	}
	if g.warmup > 0 {
		g.warmup--
		return percent, hz
	}
	switch {
	case percent > g.maxPercent:
		g.calm = 0
		return percent, max(1, hz/2)
	case percent < g.maxPercent/4 && hz < g.configuredHz:
		g.calm++
		if g.calm >= calmIntervals {
			g.calm = 0
			return percent, min(g.configuredHz, hz*2)
		}
	default:
		g.calm = 0
	}
	return percent, hz
}
