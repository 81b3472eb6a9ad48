package stackaggregatorprocessor

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC) // a multiple of 60 s

func oneWindow(t *testing.T, out []pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	if len(out) != 1 {
		t.Fatalf("got %d windows, want 1", len(out))
	}
	return out[0]
}

func TestMergesIdenticalStacksAcrossDictionaries(t *testing.T) {
	frames := []string{"main", "serve", "parse", "alloc"}
	rng := rand.New(rand.NewPCG(1, 2))
	a := newAggregator(testConfig(15 * time.Second))
	proc := procSpec{service: "api", host: "h1", buildID: "b1", pid: 10, samples: []sampleSpec{
		{stack: []string{"parse", "serve", "main"}, n: 3},
		{stack: []string{"alloc", "parse", "serve", "main"}, n: 2},
	}}
	for i := 0; i < 3; i++ {
		// Each batch enters frames in another order: indices differ.
		st := a.Add(input(t0.Add(time.Duration(i)*time.Second), 15*time.Second, rng, frames, proc), t0, nil)
		if st.Samples != 4 || st.Malformed != 0 || st.Late != 0 || st.Truncated != 0 {
			t.Fatalf("batch %d stats %+v", i, st)
		}
	}
	pd := oneWindow(t, emitAll(a, 15*time.Second))
	if got := pd.ResourceProfiles().Len(); got != 1 {
		t.Fatalf("series = %d, want 1", got)
	}
	profs := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	if profs.Len() != 2 {
		t.Fatalf("profiles = %d, want 2 (one per sample type)", profs.Len())
	}
	for p := 0; p < profs.Len(); p++ {
		prof := profs.At(p)
		if prof.Samples().Len() != 2 {
			t.Errorf("profile %d has %d samples, want 2 merged stacks", p, prof.Samples().Len())
		}
		if prof.Time().AsTime() != t0 || prof.DurationNano() != uint64(15*time.Second) {
			t.Errorf("profile %d time %v duration %d", p, prof.Time().AsTime(), prof.DurationNano())
		}
	}
	want := map[string]int64{
		"api/samples": 15,
		"api/cpu":     15 * testPeriod,
	}
	if got := totals(pd); !maps.Equal(got, want) {
		t.Errorf("totals %v, want %v", got, want)
	}
	c := canonical(t, pd)
	var parse int64
	for k, v := range c {
		if hasSuffixFrame(k, "parse") && hasType(k, "samples") {
			parse = v
		}
	}
	if parse != 9 {
		t.Errorf("main;serve;parse samples = %d, want 9 (%v)", parse, c)
	}
	// Compact output dictionary: 4 distinct frames, 2 stacks, one function each.
	dict := pd.Dictionary()
	if n := dict.LocationTable().Len(); n != 5 {
		t.Errorf("location table has %d entries, want 4 + zero entry", n)
	}
	if n := dict.StackTable().Len(); n != 3 {
		t.Errorf("stack table has %d entries, want 2 + zero entry", n)
	}
	if n := dict.MappingTable().Len(); n != 2 {
		t.Errorf("mapping table has %d entries, want 1 + zero entry", n)
	}
	// Frame attributes survive the merge.
	loc := dict.LocationTable().At(1)
	if loc.AttributeIndices().Len() != 1 || profileschema.IsKernelFrame(dict, loc) {
		t.Errorf("frame attributes not carried: %v", loc.AttributeIndices().AsRaw())
	}
}

// hasSuffixFrame reports whether the leaf of a canonical key is fn.
func hasSuffixFrame(key, fn string) bool {
	suffix := ";" + fn + "@"
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == ';' {
			return len(key)-i >= len(suffix) && key[i:i+len(suffix)] == suffix
		}
	}
	return false
}

// hasType reports whether a canonical key has sample type typ.
func hasType(key, f string) bool {
	start := 0
	for i := 0; i <= len(key); i++ {
		if i == len(key) || key[i] == '|' {
			if key[start:i] == f {
				return true
			}
			start = i + 1
		}
	}
	return false
}

func TestDifferentTraceLinksAreNotMerged(t *testing.T) {
	a := newAggregator(testConfig(15 * time.Second))
	stack := []string{"work", "main"}
	a.Add(input(t0, 15*time.Second, nil, nil, procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{
		{stack: stack, n: 1, trace: 1},
		{stack: stack, n: 2, trace: 2},
		{stack: stack, n: 4},
		{stack: stack, n: 8, trace: 1},
	}}), t0, nil)

	pd := oneWindow(t, emitAll(a, 15*time.Second))
	prof := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	got := map[int32]int64{}
	for i := 0; i < prof.Samples().Len(); i++ {
		s := prof.Samples().At(i)
		got[s.LinkIndex()] += s.Values().At(0)
	}
	if len(got) != 3 || got[0] != 4 {
		t.Fatalf("samples by link %v, want three samples (trace 1: 9, trace 2: 2, none: 4)", got)
	}
	dict := pd.Dictionary()
	for li, v := range got {
		if li == 0 {
			continue
		}
		tid := dict.LinkTable().At(int(li)).TraceID()
		if (tid[0] == 1 && v != 9) || (tid[0] == 2 && v != 2) {
			t.Errorf("trace %x has %d samples", tid[0], v)
		}
	}
}

func TestSeriesMergeProcessesAndKeepSharedAttributes(t *testing.T) {
	a := newAggregator(testConfig(15 * time.Second))
	s := []sampleSpec{{stack: []string{"f", "main"}, n: 1}}
	a.Add(input(t0, 15*time.Second, nil, nil,
		procSpec{service: "api", host: "h", buildID: "b1", pid: 1, samples: s},
		procSpec{service: "api", host: "h", buildID: "b1", pid: 2, samples: s},
		procSpec{service: "api", host: "h", buildID: "b2", pid: 3, samples: s},
		procSpec{service: "db", host: "h", buildID: "b1", pid: 4, samples: s},
	), t0, nil)

	pd := oneWindow(t, emitAll(a, 15*time.Second))
	if n := pd.ResourceProfiles().Len(); n != 3 {
		t.Fatalf("series = %d, want 3 (api/b1, api/b2, db/b1)", n)
	}
	res := pd.ResourceProfiles().At(0).Resource()
	if _, ok := res.Attributes().Get(profileschema.AttrProcessPID); ok {
		t.Errorf("merged series of pids 1 and 2 kept process.pid")
	}
	for _, k := range []string{profileschema.AttrServiceName, profileschema.AttrHostName, profileschema.AttrBuildID, profileschema.AttrProcessExeName, profileschema.AttrProcessExePath} {
		if _, ok := res.Attributes().Get(k); !ok {
			t.Errorf("merged series lost %s", k)
		}
	}
	if v, ok := pd.ResourceProfiles().At(1).Resource().Attributes().Get(profileschema.AttrProcessPID); !ok || v.Int() != 3 {
		t.Errorf("single-process series should keep its pid, got %v", v.AsRaw())
	}
	if got := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).Values().At(0); got != 2 {
		t.Errorf("api/b1 merged value = %d, want 2", got)
	}
}

func TestTimestampedSamplesLandInTheirOwnWindows(t *testing.T) {
	a := newAggregator(testConfig(15 * time.Second))
	ts := []uint64{uint64(t0.Add(2 * time.Second).UnixNano()), uint64(t0.Add(16 * time.Second).UnixNano()), uint64(t0.Add(44 * time.Second).UnixNano())}
	a.Add(input(t0, 15*time.Second, nil, nil, procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{
		{stack: []string{"f"}, n: 1, ts: ts},
	}}), t0, nil)

	out := emitAll(a, 15*time.Second)
	if len(out) != 3 {
		t.Fatalf("got %d windows, want 3", len(out))
	}
	for i, want := range []time.Time{t0, t0.Add(15 * time.Second), t0.Add(30 * time.Second)} {
		prof := out[i].ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
		if prof.Time().AsTime() != want {
			t.Errorf("window %d starts %v, want %v", i, prof.Time().AsTime(), want)
		}
		if n := profileschema.SampleCount(prof.Samples().At(0)); n != 1 {
			t.Errorf("window %d has %d samples, want 1", i, n)
		}
	}
}

func TestWindowsCloseAfterMaxDelayAndLateDataIsKept(t *testing.T) {
	cfg := testConfig(15 * time.Second)
	cfg.MaxDelay = 5 * time.Second
	a := newAggregator(cfg)
	s := procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{{stack: []string{"f"}, n: 1}}}
	a.Add(input(t0, 15*time.Second, nil, nil, s), t0.Add(15*time.Second), nil)
	if due := a.Flush(t0.Add(19*time.Second), false); len(due) != 0 {
		t.Fatalf("window emitted %d before max_delay passed", len(due))
	}
	due := a.Flush(t0.Add(20*time.Second), false)
	if len(due) != 1 || due[0].start != t0.UnixNano() {
		t.Fatalf("window not emitted once closed: %d", len(due))
	}
	// Same window again, after it was emitted: late, but kept.
	st := a.Add(input(t0, 15*time.Second, nil, nil, s), t0.Add(21*time.Second), nil)
	if st.Late != 2 {
		t.Errorf("late = %d, want 2 (one record per sample type)", st.Late)
	}
	due = a.Flush(t0.Add(21*time.Second), false)
	if len(due) != 1 {
		t.Fatalf("late data not emitted in its own window")
	}
	pd, n := emit(due[0], 15*time.Second)
	if n != 2 || pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Time().AsTime() != t0 {
		t.Errorf("late window: %d samples at %v", n, pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0).Time().AsTime())
	}
}

func TestMaxUniqueStacksFoldsIntoTruncated(t *testing.T) {
	cfg := testConfig(15 * time.Second)
	cfg.MaxUniqueStacks = 3
	a := newAggregator(cfg)
	var samples []sampleSpec
	for i := 0; i < 10; i++ {
		samples = append(samples, sampleSpec{stack: []string{string(rune('a' + i)), "main"}, n: int64(i + 1)})
	}
	in := input(t0, 15*time.Second, nil, nil, procSpec{service: "api", host: "h", pid: 1, samples: samples})
	st := a.Add(in, t0, nil)
	if st.Truncated != 14 {
		t.Errorf("truncated records = %d, want 7 per sample type", st.Truncated)
	}
	pd := oneWindow(t, emitAll(a, 15*time.Second))
	if got, want := totals(pd), totals(in); !maps.Equal(got, want) {
		t.Errorf("totals %v, want %v", got, want)
	}
	prof := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	if prof.Samples().Len() != 4 {
		t.Fatalf("samples = %d, want 3 + [truncated]", prof.Samples().Len())
	}
	c := canonical(t, pd)
	var trunc int64
	for k, v := range c {
		if hasType(k, "samples") && k[len(k)-len(TruncatedFrame+"@0"):] == TruncatedFrame+"@0" {
			trunc = v
		}
	}
	if trunc != 4+5+6+7+8+9+10 {
		t.Errorf("[truncated] holds %d samples, want 49 (%v)", trunc, c)
	}
	// The dictionary holds nothing of the dropped stacks.
	if n := pd.Dictionary().LocationTable().Len(); n != 1+4+1 {
		t.Errorf("location table %d, want zero + main,a,b,c + [truncated]", n)
	}
}

func TestTopNAndMinSharePruneIntoOther(t *testing.T) {
	samples := []sampleSpec{
		{stack: []string{"hot"}, n: 50},
		{stack: []string{"warm"}, n: 30},
		{stack: []string{"cool"}, n: 15},
		{stack: []string{"cold"}, n: 4},
		{stack: []string{"frozen"}, n: 1},
	}
	for _, tc := range []struct {
		name     string
		topN     int
		minShare float64
		kept     int
		other    int64
	}{
		{name: "top_n", topN: 2, kept: 2, other: 20},
		{name: "min_share", minShare: 0.10, kept: 3, other: 5},
		{name: "both", topN: 1, minShare: 0.10, kept: 1, other: 50},
		{name: "off", kept: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(15 * time.Second)
			cfg.TopN, cfg.MinShare = tc.topN, tc.minShare
			a := newAggregator(cfg)
			in := input(t0, 15*time.Second, nil, nil, procSpec{service: "api", host: "h", pid: 1, samples: samples})
			a.Add(in, t0, nil)
			pd := oneWindow(t, emitAll(a, 15*time.Second))
			if got, want := totals(pd), totals(in); !maps.Equal(got, want) {
				t.Errorf("totals %v, want %v", got, want)
			}
			var other int64
			n := 0
			for k, v := range canonical(t, pd) {
				if !hasType(k, "samples") {
					continue
				}
				n++
				if k[len(k)-len(OtherFrame+"@0"):] == OtherFrame+"@0" {
					other = v
					n--
				}
			}
			if n != tc.kept || other != tc.other {
				t.Errorf("kept %d stacks and [other]=%d, want %d and %d", n, other, tc.kept, tc.other)
			}
		})
	}
}

func TestMalformedSamplesAreSkippedAndCounted(t *testing.T) {
	good := procSpec{service: "api", host: "h", pid: 1, samples: []sampleSpec{{stack: []string{"f", "main"}, n: 1}}}
	cases := map[string]func(pd pprofile.Profiles){
		"stack index": func(pd pprofile.Profiles) {
			prof(pd).Samples().AppendEmpty().SetStackIndex(999)
		},
		"negative stack index": func(pd pprofile.Profiles) {
			prof(pd).Samples().AppendEmpty().SetStackIndex(-1)
		},
		"location index": func(pd pprofile.Profiles) {
			st := pd.Dictionary().StackTable().AppendEmpty()
			st.LocationIndices().Append(1, 77)
			prof(pd).Samples().AppendEmpty().SetStackIndex(int32(pd.Dictionary().StackTable().Len() - 1))
		},
		"function index": func(pd pprofile.Profiles) {
			loc := pd.Dictionary().LocationTable().AppendEmpty()
			loc.Lines().AppendEmpty().SetFunctionIndex(55)
			st := pd.Dictionary().StackTable().AppendEmpty()
			st.LocationIndices().Append(int32(pd.Dictionary().LocationTable().Len() - 1))
			prof(pd).Samples().AppendEmpty().SetStackIndex(int32(pd.Dictionary().StackTable().Len() - 1))
		},
		"mapping index": func(pd pprofile.Profiles) {
			loc := pd.Dictionary().LocationTable().AppendEmpty()
			loc.SetMappingIndex(9)
			st := pd.Dictionary().StackTable().AppendEmpty()
			st.LocationIndices().Append(int32(pd.Dictionary().LocationTable().Len() - 1))
			prof(pd).Samples().AppendEmpty().SetStackIndex(int32(pd.Dictionary().StackTable().Len() - 1))
		},
		"string index": func(pd pprofile.Profiles) {
			pd.Dictionary().FunctionTable().AppendEmpty().SetNameStrindex(12345)
			loc := pd.Dictionary().LocationTable().AppendEmpty()
			loc.Lines().AppendEmpty().SetFunctionIndex(int32(pd.Dictionary().FunctionTable().Len() - 1))
			st := pd.Dictionary().StackTable().AppendEmpty()
			st.LocationIndices().Append(int32(pd.Dictionary().LocationTable().Len() - 1))
			prof(pd).Samples().AppendEmpty().SetStackIndex(int32(pd.Dictionary().StackTable().Len() - 1))
		},
		"link index": func(pd pprofile.Profiles) {
			s := prof(pd).Samples().AppendEmpty()
			s.SetStackIndex(1)
			s.SetLinkIndex(40)
		},
		"attribute index": func(pd pprofile.Profiles) {
			s := prof(pd).Samples().AppendEmpty()
			s.SetStackIndex(1)
			s.AttributeIndices().Append(-3)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			a := newAggregator(testConfig(15 * time.Second))
			in := input(t0, 15*time.Second, nil, nil, good)
			corrupt(in)
			prof(in).Samples().At(prof(in).Samples().Len() - 1).Values().Append(100)
			st := a.Add(in, t0, nil)
			if st.Malformed != 1 {
				t.Errorf("malformed = %d, want 1", st.Malformed)
			}
			pd := oneWindow(t, emitAll(a, 15*time.Second))
			if got := totals(pd)["api/samples"]; got != 1 {
				t.Errorf("good samples = %d, want 1", got)
			}
		})
	}
	t.Run("sample type string", func(t *testing.T) {
		a := newAggregator(testConfig(15 * time.Second))
		in := input(t0, 15*time.Second, nil, nil, good)
		prof(in).SampleType().SetTypeStrindex(4242)
		if st := a.Add(in, t0, nil); st.Malformed != 1 {
			t.Errorf("malformed = %d, want the profile's 1 sample", st.Malformed)
		}
		pd := oneWindow(t, emitAll(a, 15*time.Second))
		if got := totals(pd); got["api/samples"] != 0 || got["api/cpu"] != testPeriod {
			t.Errorf("totals %v: want only the intact cpu profile", got)
		}
	})
}

func prof(pd pprofile.Profiles) pprofile.Profile {
	return pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
}

// TestRandomCorruptionNeverPanics flips random dictionary indices of valid
// input: whatever is broken, Add must neither panic nor lose good samples'
// accounting (every record is either merged or counted malformed).
func TestRandomCorruptionNeverPanics(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	frames := []string{"a", "b", "c", "d", "e"}
	for iter := 0; iter < 300; iter++ {
		in := randomInput(rng, frames, t0, 15*time.Second, 3)
		dict := in.Dictionary()
		for k := 0; k < 1+rng.IntN(4); k++ {
			bad := int32(rng.IntN(40) - 10)
			switch rng.IntN(6) {
			case 0:
				st := dict.StackTable().At(1 + rng.IntN(dict.StackTable().Len()-1))
				if st.LocationIndices().Len() > 0 {
					st.LocationIndices().SetAt(0, bad)
				}
			case 1:
				dict.LocationTable().At(1 + rng.IntN(dict.LocationTable().Len()-1)).SetMappingIndex(bad)
			case 2:
				dict.FunctionTable().At(1 + rng.IntN(dict.FunctionTable().Len()-1)).SetNameStrindex(bad)
			case 3:
				dict.LocationTable().At(1 + rng.IntN(dict.LocationTable().Len()-1)).Lines().At(0).SetFunctionIndex(bad)
			case 4:
				if in.ResourceProfiles().Len() > 0 {
					p := prof(in)
					if p.Samples().Len() > 0 {
						p.Samples().At(0).SetStackIndex(bad)
					}
				}
			case 5:
				dict.MappingTable().At(1).SetFilenameStrindex(bad)
			}
		}
		a := newAggregator(testConfig(15 * time.Second))
		st := a.Add(in, t0, nil)
		out := emitAll(a, 15*time.Second)
		var emitted int64
		for _, pd := range out {
			emitted += int64(pd.SampleCount())
		}
		if st.Malformed > st.Samples || emitted > st.Samples-st.Malformed {
			t.Fatalf("iteration %d: stats %+v, emitted %d", iter, st, emitted)
		}
	}
}

// Series beyond max_series in a window merge into the [overflow] series:
// memory stays bounded whatever service names a sender invents, and the
// sample total stays exact.
func TestMaxSeriesFoldsIntoOverflow(t *testing.T) {
	cfg := testConfig(15 * time.Second)
	cfg.MaxSeries = 2
	a := newAggregator(cfg)
	var procs []procSpec
	for i := 0; i < 5; i++ {
		procs = append(procs, procSpec{service: fmt.Sprintf("svc%d", i), host: "h", pid: int64(i + 1),
			samples: []sampleSpec{{stack: []string{"work", "main"}, n: int64(i + 1)}}})
	}
	in := input(t0, 15*time.Second, nil, nil, procs...)
	st := a.Add(in, t0, nil)
	if st.Overflow != 3*2 { // svc2..svc4, both sample types
		t.Errorf("overflow records = %d, want 6", st.Overflow)
	}
	pd := oneWindow(t, emitAll(a, 15*time.Second))
	got := totals(pd)
	if pd.ResourceProfiles().Len() != 3 {
		t.Errorf("%d series emitted, want 2 + [overflow]", pd.ResourceProfiles().Len())
	}
	if got["svc0/samples"] != 1 || got["svc1/samples"] != 2 || got[OverflowService+"/samples"] != 3+4+5 {
		t.Errorf("totals %v", got)
	}
	var sum, want int64
	for k, v := range got {
		if hasType(k, "samples") {
			sum += v
		}
	}
	for k, v := range totals(in) {
		if hasType(k, "samples") {
			want += v
		}
	}
	if sum != want {
		t.Errorf("emitted %d samples, sent %d", sum, want)
	}
}

// Two replicas of one service on one node run the same build in different
// pods: they stay two series, each with its pod UID and container ID.
func TestSeriesKeepContainerAttribution(t *testing.T) {
	a := newAggregator(testConfig(15 * time.Second))
	s := []sampleSpec{{stack: []string{"f", "main"}, n: 1}}
	a.Add(input(t0, 15*time.Second, nil, nil,
		procSpec{service: "api", host: "h", buildID: "b1", pid: 1, podUID: "pod-a", containerID: "c-a", samples: s},
		procSpec{service: "api", host: "h", buildID: "b1", pid: 2, podUID: "pod-b", containerID: "c-b", samples: s},
		procSpec{service: "api", host: "h", buildID: "b1", pid: 3, podUID: "pod-b", containerID: "c-b", samples: s},
	), t0, nil)
	pd := oneWindow(t, emitAll(a, 15*time.Second))
	got := map[string]int64{}
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		res := rp.Resource()
		got[profileschema.PodUID(res)+"/"+profileschema.ContainerID(res)] += rp.ScopeProfiles().At(0).Profiles().At(0).Samples().At(0).Values().At(0)
	}
	if len(got) != 2 || got["pod-a/c-a"] != 1 || got["pod-b/c-b"] != 2 {
		t.Errorf("series by pod/container = %v, want pod-a/c-a:1 pod-b/c-b:2", got)
	}
}

// TestSamplesAtDifferentFrequenciesStayApart merges one service's samples
// taken at 19, 49 and 99 Hz within one window (a node reconfigured, a
// capture beside the continuous profile): each frequency is emitted as its
// own profile at its own period, with its own counts and CPU time, never
// counted at the first period seen.
func TestSamplesAtDifferentFrequenciesStayApart(t *testing.T) {
	a := newAggregator(testConfig(15 * time.Second))
	s := func(n int64) []sampleSpec { return []sampleSpec{{stack: []string{"f", "main"}, n: n}} }
	periods := map[int64]int64{int64(1e9) / 19: 3, int64(1e9) / 49: 5, int64(1e9) / 99: 7} // period → samples
	var procs []procSpec
	pid := int64(1)
	for period, n := range periods {
		// Two batches per frequency: equal periods still merge.
		for range 2 {
			procs = append(procs, procSpec{service: "api", host: "h", buildID: "b1", pid: pid, period: period, samples: s(n)})
			pid++
		}
	}
	for _, p := range procs {
		a.Add(input(t0, 15*time.Second, nil, nil, p), t0, nil)
	}
	pd := oneWindow(t, emitAll(a, 15*time.Second))
	type got struct{ samples, cpu int64 }
	byPeriod := map[int64]got{}
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		profs := pd.ResourceProfiles().At(i).ScopeProfiles().At(0).Profiles()
		for j := 0; j < profs.Len(); j++ {
			prof := profs.At(j)
			g := byPeriod[prof.Period()]
			for k := 0; k < prof.Samples().Len(); k++ {
				v := prof.Samples().At(k).Values().At(0)
				switch profileschema.Str(pd.Dictionary(), prof.SampleType().TypeStrindex()) {
				case profileschema.SampleTypeSamples:
					g.samples += v
				case profileschema.SampleTypeCPU:
					g.cpu += v
				}
			}
			byPeriod[prof.Period()] = g
		}
	}
	if len(byPeriod) != len(periods) {
		t.Fatalf("emitted periods %v, want one profile set per period of %v", byPeriod, periods)
	}
	for period, n := range periods {
		if g := byPeriod[period]; g.samples != 2*n || g.cpu != 2*n*period {
			t.Errorf("period %d ns: %d samples, %d ns CPU; want %d, %d", period, g.samples, g.cpu, 2*n, 2*n*period)
		}
	}
}
