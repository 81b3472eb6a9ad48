package profilequery

import "sort"

// FunctionShare is a function's samples in a profile, with what the frame
// is (type, file, line; JSON "type", "file", "line" when known): Self where it is the
// leaf (pprof's "flat"), Cum where it is anywhere on the stack, counted once
// per stack even when recursive (pprof's "cum").
type FunctionShare struct {
	Name string `json:"function"`
	FrameInfo
	Self      int64   `json:"self_samples"`
	Cum       int64   `json:"cum_samples"`
	SelfShare float64 `json:"self_share"` // fraction of all samples, 0..1
	CumShare  float64 `json:"cum_share"`
}

// Functions returns every function's self and cumulative samples, sorted
// as `go tool pprof -top` sorts: self, then cum, then name.
func (p *Profile) Functions() []FunctionShare {
	idx := map[string]int{}
	var out []FunctionShare
	get := func(name string, info FrameInfo) *FunctionShare {
		i, ok := idx[name]
		if !ok {
			i = len(out)
			idx[name] = i
			out = append(out, FunctionShare{Name: name, FrameInfo: info})
		}
		return &out[i]
	}
	seen := map[string]bool{}
	for _, s := range p.Stacks {
		frames := p.DisplayFrames(s)
		if len(frames) == 0 {
			continue
		}
		leaf := len(frames) - 1
		get(frames[leaf], p.Frame(s.Frames[leaf])).Self += s.Count
		clear(seen)
		for i, f := range frames {
			if !seen[f] {
				seen[f] = true
				get(f, p.Frame(s.Frames[i])).Cum += s.Count
			}
		}
	}
	if total := p.Total(); total > 0 {
		for i := range out {
			out[i].SelfShare = float64(out[i].Self) / float64(total)
			out[i].CumShare = float64(out[i].Cum) / float64(total)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Self != b.Self {
			return a.Self > b.Self
		}
		if a.Cum != b.Cum {
			return a.Cum > b.Cum
		}
		return a.Name < b.Name
	})
	return out
}

// SortByCum orders functions by cumulative samples (pprof -top -cum).
func SortByCum(fs []FunctionShare) {
	sort.SliceStable(fs, func(i, j int) bool {
		if fs[i].Cum != fs[j].Cum {
			return fs[i].Cum > fs[j].Cum
		}
		return fs[i].Name < fs[j].Name
	})
}
