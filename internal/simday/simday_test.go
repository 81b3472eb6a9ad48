package simday

import (
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

func TestValidate(t *testing.T) {
	p := Default()
	p.MaxDepth = p.MinDepth - 1
	if _, err := NewHost(p); err == nil {
		t.Fatal("empty depth range: want an error")
	}
	p = Default()
	p.HotShare = 2
	if _, err := NewHost(p); err == nil {
		t.Fatal("share 2: want an error")
	}
}

// TestMinuteLooksLikeTheBrief checks the simulated host against what the
// brief asks for: all samples accounted for, ~200 distinct stacks per
// service-minute, depth 10..20 averaging ~15, about TraceShare tagged.
func TestMinuteLooksLikeTheBrief(t *testing.T) {
	p := Default()
	h, err := NewHost(p)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var total, traced, depthSum int
	distinct := make([]map[int]bool, p.Services)
	for i := range distinct {
		distinct[i] = map[int]bool{}
	}
	for k := 0; k < 4; k++ {
		iv := h.Next(t0.Add(time.Duration(k) * p.Interval))
		for si, ss := range iv.Samples {
			for _, s := range ss {
				total++
				if s.TraceID != nil {
					traced++
				}
				d := len(h.Services[si].Stacks[s.Stack])
				if d < p.MinDepth || d > p.MaxDepth {
					t.Fatalf("depth %d outside [%d, %d]", d, p.MinDepth, p.MaxDepth)
				}
				depthSum += d
				distinct[si][s.Stack] = true
			}
		}
	}
	if want := 4 * p.SamplesPerInterval(); total != want {
		t.Fatalf("samples = %d, want %d", total, want)
	}
	var uniq int
	for _, m := range distinct {
		uniq += len(m)
	}
	perService := float64(uniq) / float64(p.Services)
	if perService < 150 || perService > 230 {
		t.Fatalf("distinct stacks per service-minute = %.0f, want about 200", perService)
	}
	if mean := float64(depthSum) / float64(total); mean < 14 || mean > 16 {
		t.Fatalf("mean depth %.1f, want about 15", mean)
	}
	if share := float64(traced) / float64(total); share < p.TraceShare-0.06 || share > p.TraceShare+0.06 {
		t.Fatalf("traced share %.2f, want about %.2f", share, p.TraceShare)
	}
}

// TestProfilesCarryEverySample checks the OTLP layout: counts sum to the
// samples drawn, frames come back root first through profileschema.
func TestProfilesCarryEverySample(t *testing.T) {
	p := Default()
	p.Services = 3
	h, err := NewHost(p)
	if err != nil {
		t.Fatal(err)
	}
	iv := h.Next(time.Unix(1_800_000_000, 0))
	pd := h.Profiles(iv)
	dict := pd.Dictionary()
	if got := pd.ResourceProfiles().Len(); got != p.Services {
		t.Fatalf("resource profiles = %d, want %d", got, p.Services)
	}
	var sum int64
	for ri := 0; ri < pd.ResourceProfiles().Len(); ri++ {
		rp := pd.ResourceProfiles().At(ri)
		svc := h.Services[ri]
		if got := profileschema.ServiceName(rp.Resource()); got != svc.Name {
			t.Fatalf("service %d named %q, want %q", ri, got, svc.Name)
		}
		prof := rp.ScopeProfiles().At(0).Profiles()
		if !profileschema.IsSampleCount(dict, prof.At(0)) || profileschema.IsSampleCount(dict, prof.At(1)) {
			t.Fatal("first profile must be samples/count, the second its cpu twin")
		}
		ss := prof.At(0).Samples()
		for i := 0; i < ss.Len(); i++ {
			s := ss.At(i)
			sum += profileschema.SampleCount(s)
			li := dict.StackTable().At(int(s.StackIndex())).LocationIndices()
			leaf := profileschema.FrameName(dict, dict.LocationTable().At(int(li.At(0))))
			root := profileschema.FrameName(dict, dict.LocationTable().At(int(li.At(li.Len()-1))))
			if root != "runtime.goexit" {
				t.Fatalf("root frame %q, want runtime.goexit", root)
			}
			if leaf == root {
				t.Fatalf("stack of depth %d has the root as its leaf", li.Len())
			}
		}
	}
	if sum != int64(p.SamplesPerInterval()) {
		t.Fatalf("sample counts sum to %d, want %d", sum, p.SamplesPerInterval())
	}
}

// BenchmarkInterval is the generator's own cost per 15 s interval (draw +
// OTLP layout), to keep it small next to the exporter it feeds.
func BenchmarkInterval(b *testing.B) {
	h, err := NewHost(Default())
	if err != nil {
		b.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	for b.Loop() {
		at = at.Add(15 * time.Second)
		_ = h.Profiles(h.Next(at))
	}
}
