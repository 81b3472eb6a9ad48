//go:build linux && privileged

package sampler

import (
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/cputime"
)

// BenchmarkDrain measures one Drain of a realistic interval: a 64-thread
// burner (8 stack shapes) sampled at 2999 Hz for 100 ms per iteration gives
// a few hundred distinct keys (reported as keys/op). Only Drain is timed;
// it includes the RCU grace period that waits out running BPF programs.
func BenchmarkDrain(b *testing.B) {
	s := openSampler(b, Config{FrequencyHz: 2999, Interval: 100 * time.Millisecond})
	startBurner(b, 10*time.Minute, 64) // killed by cleanup
	time.Sleep(100 * time.Millisecond)
	drain(b, s)

	var keys, frames int
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(100 * time.Millisecond)
		b.StartTimer()
		batch, err := s.Drain()
		if err != nil {
			b.Fatalf("Drain: %v", err)
		}
		keys += len(batch.Samples)
		for _, smp := range batch.Samples {
			frames += len(smp.UserStack) + len(smp.KernelStack)
		}
	}
	b.ReportMetric(float64(keys)/float64(b.N), "keys/op")
	b.ReportMetric(float64(frames)/float64(b.N), "frames/op")
}

// BenchmarkWaitForRunningPrograms is the part of Drain spent waiting for an
// RCU grace period (membarrier), for comparison with BenchmarkDrain.
func BenchmarkWaitForRunningPrograms(b *testing.B) {
	for range b.N {
		waitForRunningPrograms()
	}
}

// BenchmarkLoadUnwindTable loads a table the size of a large C++
// binary's (667,409 rows: the agent's own, with DuckDB linked in) and
// deletes it. cpu-ms/op is the calling thread's CPU time, which is what a
// load costs the agent: the wall time also waits out RCU grace periods when
// the table is installed and deleted.
func BenchmarkLoadUnwindTable(b *testing.B) {
	s := openSampler(b, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	rows := syntheticRows(667_409)
	var cpu time.Duration
	b.ResetTimer()
	for range b.N {
		var tab UnwindTable
		var err error
		cpu += cputime.Measure(func() { tab, err = s.LoadUnwindTable(rows) })
		if err != nil {
			b.Fatal(err)
		}
		if err := s.DeleteUnwindTable(tab.ID); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
