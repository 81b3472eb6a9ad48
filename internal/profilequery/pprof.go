package profilequery

import (
	"fmt"
	"sort"
	"time"

	"github.com/google/pprof/profile"
)

// mainPeriod is the period most samples were taken at (pprof has one).
func (p *Profile) mainPeriod() time.Duration {
	best, most := time.Duration(0), int64(-1)
	for period, n := range p.Periods {
		if period == 0 {
			period = p.Fallback
		}
		if n > most || (n == most && period < best) {
			best, most = period, n
		}
	}
	if most < 0 {
		return p.Fallback
	}
	return best
}

// Pprof converts the profile to pprof's model: one mapping per build ID
// (with the build ID and binary path), one function per frame name (with
// the frame's source file and line when the file recorded them), one
// location per build and frame, and a "build_id" label on every sample when
// the range spans several builds (pprof -tagfocus can split them).
func (p *Profile) Pprof() (*profile.Profile, error) {
	out := &profile.Profile{
		// Samples and their CPU time, as Go's CPU profiles: each stored
		// row's count times its own period, so nodes sampling at
		// different frequencies add up to the right CPU time.
		SampleType:        []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		DefaultSampleType: "samples", // what hotpath top and folded count
		PeriodType:        &profile.ValueType{Type: "cpu", Unit: "nanoseconds"},
		Period:            p.mainPeriod().Nanoseconds(),
		TimeNanos:         p.Range.Since.UnixNano(),
		DurationNanos:     p.Range.Duration().Nanoseconds(),
		Comments:          []string{fmt.Sprintf("hotpath: service %s, %s, %s tier", p.Service, p.Range, p.Tier)},
	}
	builds := p.BuildIDs()
	annotate := len(builds) > 1
	mappings := map[string]*profile.Mapping{}
	for _, id := range builds {
		m := &profile.Mapping{
			ID: uint64(len(out.Mapping) + 1), BuildID: id, File: p.Binaries[id],
			HasFunctions: true, // names are resolved; pprof must not re-symbolize
		}
		if m.File == "" {
			m.File = p.Service
		}
		mappings[id] = m
		out.Mapping = append(out.Mapping, m)
	}
	funcs := map[string]*profile.Function{}
	type locKey struct{ build, name string }
	locs := map[locKey]*profile.Location{}
	for _, s := range p.Stacks {
		frames := p.DisplayFrames(s)
		sample := &profile.Sample{Value: []int64{s.Count, s.CPU.Nanoseconds()}}
		// pprof lists locations leaf first.
		for i := len(frames) - 1; i >= 0; i-- {
			name := frames[i]
			info := p.Frame(s.Frames[i])
			k := locKey{s.BuildID, name}
			loc, ok := locs[k]
			if !ok {
				fn, ok := funcs[name]
				if !ok {
					fn = &profile.Function{ID: uint64(len(out.Function) + 1), Name: name, SystemName: name, Filename: info.File}
					funcs[name] = fn
					out.Function = append(out.Function, fn)
				}
				loc = &profile.Location{ID: uint64(len(out.Location) + 1), Mapping: mappings[s.BuildID], Line: []profile.Line{{Function: fn, Line: info.Line}}}
				locs[k] = loc
				out.Location = append(out.Location, loc)
			}
			sample.Location = append(sample.Location, loc)
		}
		if annotate {
			sample.Label = map[string][]string{"build_id": {s.BuildID}}
		}
		out.Sample = append(out.Sample, sample)
	}
	sort.SliceStable(out.Sample, func(i, j int) bool { return out.Sample[i].Value[0] > out.Sample[j].Value[0] })
	if len(p.Frequencies()) > 1 {
		out.Comments = append(out.Comments, fmt.Sprintf("sampled at %v Hz: the period is the most common one; cpu values use each sample's own", p.Frequencies()))
	}
	if err := out.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return out, nil
}
