package stackaggregatorprocessor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// benchBatch is a typical agent interval: procs processes with stacks
// unique 15-frame stacks each, drawn from a pool of 300 functions, in both
// sample types.
func benchBatch(procs, stacks int) pprofile.Profiles {
	rng := rand.New(rand.NewPCG(1, 1))
	var pool []string
	for i := 0; i < 300; i++ {
		pool = append(pool, fmt.Sprintf("pkg%d.func%d", i%17, i))
	}
	var ps []procSpec
	for p := 0; p < procs; p++ {
		spec := procSpec{service: fmt.Sprintf("svc%d", p%3), host: "h1", buildID: "b1", pid: int64(p)}
		for s := 0; s < stacks; s++ {
			stack := make([]string, 15)
			for d := range stack {
				stack[d] = pool[rng.IntN(len(pool))]
			}
			spec.samples = append(spec.samples, sampleSpec{stack: stack, n: int64(1 + rng.IntN(20))})
		}
		ps = append(ps, spec)
	}
	return input(t0, 15*time.Second, rng, pool, ps...)
}

// BenchmarkMerge measures steady-state merging: the same interval's stacks
// arrive again and again into a window that already holds them, as happens
// every interval on an agent. Reported: merges (sample records) per second
// and heap allocations per merge.
func BenchmarkMerge(b *testing.B) {
	in := benchBatch(10, 200)
	perBatch := int64(in.SampleCount())
	a := newAggregator(testConfig(15 * time.Second))
	a.Add(in, t0, nil)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	for b.Loop() {
		a.Add(in, t0, nil)
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	merges := float64(perBatch) * float64(b.N)
	b.ReportMetric(merges/b.Elapsed().Seconds(), "merges/s")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/merges, "allocs/merge")
}

// BenchmarkWindow measures a whole agent window: four batches of fresh
// dictionaries merged, then the window emitted as pdata.
func BenchmarkWindow(b *testing.B) {
	in := benchBatch(10, 200)
	perBatch := int64(in.SampleCount())
	b.ReportAllocs()
	for b.Loop() {
		a := newAggregator(testConfig(15 * time.Second))
		for i := 0; i < 4; i++ {
			a.Add(in, t0, nil)
		}
		for _, w := range a.Flush(time.Time{}, true) {
			emit(w, 15*time.Second)
		}
	}
	b.ReportMetric(float64(4*perBatch)*float64(b.N)/b.Elapsed().Seconds(), "merges/s")
}
