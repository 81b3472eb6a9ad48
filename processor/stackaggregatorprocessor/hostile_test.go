package stackaggregatorprocessor

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seeds from internal/hostileotlp")

// The committed seeds under testdata/fuzz/FuzzAdd include every hostile
// case (FuzzAdd also adds random well-formed inputs).
func TestFuzzSeeds(t *testing.T) {
	if err := hostileotlp.SyncCorpus("testdata/fuzz/FuzzAdd", *updateSeeds); err != nil {
		t.Fatal(err)
	}
}

// serviceSamples sums service's samples/count values across emitted output.
func serviceSamples(out []pprofile.Profiles, service string) int64 {
	var n int64
	for _, pd := range out {
		dict := pd.Dictionary()
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			rp := pd.ResourceProfiles().At(i)
			if profileschema.ServiceName(rp.Resource()) != service {
				continue
			}
			for j := 0; j < rp.ScopeProfiles().Len(); j++ {
				ps := rp.ScopeProfiles().At(j).Profiles()
				for k := 0; k < ps.Len(); k++ {
					if p := ps.At(k); profileschema.IsSampleCount(dict, p) {
						for s := 0; s < p.Samples().Len(); s++ {
							n += profileschema.SampleCount(p.Samples().At(s))
						}
					}
				}
			}
		}
	}
	return n
}

// Each hostile request: the good process comes out whole, and the hostile
// samples are skipped and counted as listed (negative and overflowing values
// are malformed; times before 2020 or far ahead are out of range).
func TestHostileInputKeepsGoodData(t *testing.T) {
	want := map[string]addStats{
		"stack-index-out-of-range":                   {Malformed: 3},
		"location-index-out-of-range":                {Malformed: 3},
		"function-string-mapping-index-out-of-range": {Malformed: 2},
		"link-and-attribute-index-out-of-range":      {Malformed: 2},
		"sample-type-index-out-of-range":             {Malformed: 1},
		"recursive-stack":                            {},
		"empty-stack":                                {},
		"deep-stack":                                 {},
		"invalid-utf8":                               {},
		"negative-and-overflowing-values":            {Malformed: 2},
		"missing-resource-attributes":                {},
		"time-far-past":                              {OutOfRange: 2},
		"time-far-future":                            {OutOfRange: 2},
		"timestamps-values-mismatch":                 {},
	}
	for _, c := range hostileotlp.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			w, ok := want[c.Name]
			if !ok {
				t.Fatalf("no expectation for case %s", c.Name)
			}
			now := time.Now()
			cfg := testConfig(15 * time.Second)
			a := newAggregator(cfg)
			st := a.Add(c.Build(now.Add(-time.Second)), now, nil)
			out := emitAll(a, cfg.Window)
			if got := serviceSamples(out, hostileotlp.GoodService); got != hostileotlp.GoodSamples {
				t.Errorf("good service: %d samples out, want %d", got, hostileotlp.GoodSamples)
			}
			if st.Malformed != w.Malformed || st.OutOfRange != w.OutOfRange {
				t.Errorf("malformed %d, out of range %d; want %d, %d", st.Malformed, st.OutOfRange, w.Malformed, w.OutOfRange)
			}
			// What comes out is valid input for the next hop.
			var m pprofile.ProtoMarshaler
			for _, pd := range out {
				if _, err := m.MarshalProfiles(pd); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A million unique stacks in one window: memory stays bounded because
// max_unique_stacks folds every stack past the limit into [truncated]
// without adding its frames to the window's dictionary, and no sample is
// lost.
func TestMillionUniqueStacksTruncateWithBoundedMemory(t *testing.T) {
	const (
		batches   = 100
		perBatch  = 10_000
		maxStacks = 10_000
	)
	cfg := testConfig(time.Minute)
	cfg.MaxUniqueStacks = maxStacks
	a := newAggregator(cfg)
	now := t0.Add(30 * time.Second)
	var st addStats
	var before runtime.MemStats
	for i := 0; i < batches; i++ {
		b := hostileotlp.NewBuilder()
		p := b.Process(map[string]any{profileschema.AttrServiceName: "many"}, t0.Add(time.Second))
		for j := 0; j < perBatch; j++ {
			hostileotlp.Sample(p, b.FrameStack(fmt.Sprintf("f%d_%d", i, j), "main"), 1)
		}
		s := a.Add(b.PD, now, nil)
		st.Samples += s.Samples
		st.Truncated += s.Truncated
		st.Malformed += s.Malformed
		if i == 1 {
			runtime.GC()
			runtime.ReadMemStats(&before)
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)

	if st.Samples != batches*perBatch || st.Malformed != 0 {
		t.Fatalf("stats %+v", st)
	}
	if want := int64(batches*perBatch - maxStacks); st.Truncated != want {
		t.Errorf("truncated %d samples, want %d", st.Truncated, want)
	}
	if len(a.windows) != 1 {
		t.Fatalf("%d windows", len(a.windows))
	}
	for _, w := range a.windows {
		// maxStacks stacks of 2 frames ("main" shared) plus [truncated].
		if n := len(w.dict.frames) - 1; n > maxStacks+2 {
			t.Errorf("window dictionary holds %d frames after truncation began; want at most %d", n, maxStacks+2)
		}
	}
	// After the window filled (batch 1), 98 more batches of new stacks must
	// not grow the heap by more than a batch's worth of garbage.
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Errorf("heap grew %d MiB while every new stack was truncated", grew>>20)
	}
	out := emitAll(a, cfg.Window)
	if got := serviceSamples(out, "many"); got != batches*perBatch {
		t.Errorf("%d samples out, want %d (truncation folds, never drops)", got, batches*perBatch)
	}
}
