package stackaggregatorprocessor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// benchBatch is a typical agent interval: procs processes with stacks
// unique 15-frame stacks each, drawn from a pool of 300 functions, in both
// sample types, all in one executable's mapping that carries its build IDs
// (GNU, Go and the canonical one) as the receiver's mappings do.
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
	in := input(t0, 15*time.Second, rng, pool, ps...)
	dict := in.Dictionary()
	exe := dict.MappingTable().At(1)
	for _, kv := range [][2]string{
		{profileschema.AttrBuildIDGNU, "3f2a9c0d5e7b1a4c6d8e0f1a2b3c4d5e6f708192"},
		{profileschema.AttrBuildIDGo, "Xk3j9_aPq2LmN8vRt5Yw/fG7hJ2kL9mN4pQ6rS8tU0v/aB1cD3eF5gH7iJ9kL0mN/pQ2rS4tU6vW8xY0zA1bC3d"},
		{profileschema.AttrBuildID, "3f2a9c0d5e7b1a4c6d8e0f1a2b3c4d5e6f708192"},
	} {
		exe.AttributeIndices().Append(int32(dict.AttributeTable().Len()))
		a := dict.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(int32(dict.StringTable().Len()))
		dict.StringTable().Append(kv[0])
		a.Value().SetStr(kv[1])
	}
	return in
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
