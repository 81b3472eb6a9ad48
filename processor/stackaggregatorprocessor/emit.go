package stackaggregatorprocessor

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/pdict"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// dictBuilder writes one output ProfilesDictionary through a pdict.Builder.
// Only what the emitted samples reference is written, so pruned and
// truncated stacks leave no trace in it. Beside the builder it remembers
// what each of the window's ids became, so a frame, stack, link or
// attribute set shared by many samples is translated once.
type dictBuilder struct {
	src *frameDict
	out *pdict.Builder

	locOf   []int32 // window frame id → output location index; 0 = not yet
	stackOf []int32 // window stack id → output stack index; 0 = not yet
	linkOf  []int32
	setOf   [][]int32 // window attribute set id → output attribute indices
	// mapOf is each mapping's output index: frames of one batch share a
	// mapping (inputDict.mapping), and each resolution copies its
	// attributes and encodes its key.
	mapOf map[*mapping]int32
	lines []pdict.Line
	idx   []int32
}

func newDictBuilder(src *frameDict, dict pprofile.ProfilesDictionary) *dictBuilder {
	return &dictBuilder{
		src: src, out: pdict.New(dict),
		locOf:   make([]int32, len(src.frames)),
		stackOf: make([]int32, len(src.stackOff)),
		linkOf:  make([]int32, len(src.links)),
		setOf:   make([][]int32, len(src.attrSets)),
		mapOf:   map[*mapping]int32{},
	}
}

func (b *dictBuilder) str(s string) int32 { return b.out.String(s) }

func (b *dictBuilder) attrs(as []attr) []int32 {
	if len(as) == 0 {
		return nil
	}
	idx := make([]int32, len(as))
	for j, a := range as {
		idx[j] = b.out.AttributeOf(a.key, a.unit, a.value)
	}
	return idx
}

func (b *dictBuilder) location(id int32) int32 {
	if i := b.locOf[id]; i != 0 {
		return i
	}
	fr := &b.src.frames[id]
	var mi int32
	if m := fr.mapping; m != nil {
		mi = b.mapping(m)
	}
	b.lines = b.lines[:0]
	for _, l := range fr.lines {
		var fn int32
		if l.hasFn {
			fn = b.out.FunctionOf(pdict.Func{Name: l.fn.name, SystemName: l.fn.systemName, File: l.fn.file, StartLine: l.fn.startLine})
		}
		b.lines = append(b.lines, pdict.Line{Function: fn, Line: l.line, Column: l.column})
	}
	i := b.out.LocationOf(mi, fr.address, b.lines, b.attrs(fr.attrs))
	b.locOf[id] = i
	return i
}

func (b *dictBuilder) mapping(m *mapping) int32 {
	if i, ok := b.mapOf[m]; ok {
		return i
	}
	i := b.out.MappingOf(m.start, m.limit, m.offset, m.file, b.attrs(m.attrs))
	b.mapOf[m] = i
	return i
}

func (b *dictBuilder) stack(id int32) int32 {
	if i := b.stackOf[id]; i != 0 {
		return i
	}
	frames := b.src.stack(id)
	if len(frames) == 0 {
		return 0 // the zero entry is the empty stack
	}
	b.idx = b.idx[:0]
	for _, f := range frames {
		b.idx = append(b.idx, b.location(f))
	}
	i := b.out.Stack(b.idx)
	b.stackOf[id] = i
	return i
}

func (b *dictBuilder) link(id int32) int32 {
	if id == 0 {
		return 0
	}
	if i := b.linkOf[id]; i != 0 {
		return i
	}
	k := b.src.links[id]
	i := b.out.Link([16]byte(k[:16]), [8]byte(k[16:]))
	b.linkOf[id] = i
	return i
}

func (b *dictBuilder) sampleAttrs(dst pcommon.Int32Slice, id int32) {
	if id == 0 {
		return
	}
	if b.setOf[id] == nil {
		b.setOf[id] = b.attrs(b.src.attrSets[id])
	}
	dst.FromRaw(b.setOf[id])
}

// emit writes window w as one Profiles, laid out like the receiver's
// output: one ResourceProfiles per series, one ScopeProfiles, one Profile per
// sample type. samplesOut counts the sample records written.
func emit(w *window, length time.Duration) (pd pprofile.Profiles, samplesOut int64) {
	pd = pprofile.NewProfiles()
	b := newDictBuilder(w.dict, pd.Dictionary())
	for _, sr := range w.series {
		if len(sr.entries) == 0 {
			continue // every sample it got was malformed
		}
		rp := pd.ResourceProfiles().AppendEmpty()
		rp.SetSchemaUrl(sr.schemaURL)
		sr.resource.CopyTo(rp.Resource().Attributes())
		// Every resource carries the window's identity: downstream stores
		// a window once however often it is sent (retries, replays).
		rp.Resource().Attributes().PutStr(profileschema.AttrBatchID, w.id)
		sp := rp.ScopeProfiles().AppendEmpty()
		sp.Scope().SetName(sr.scopeName)
		sp.Scope().SetVersion(sr.scopeVer)
		for si, sl := range sr.slots {
			p := sp.Profiles().AppendEmpty()
			p.SampleType().SetTypeStrindex(b.str(sl.sampleType))
			p.SampleType().SetUnitStrindex(b.str(sl.sampleUnit))
			p.PeriodType().SetTypeStrindex(b.str(sl.periodType))
			p.PeriodType().SetUnitStrindex(b.str(sl.periodUnit))
			p.SetPeriod(sl.period)
			p.SetTime(pcommon.Timestamp(w.start))
			p.SetDurationNano(uint64(length))
			samples := p.Samples()
			samples.EnsureCapacity(len(sr.entries))
			for _, e := range sr.entries {
				if si >= len(e.values) || e.values[si] == 0 {
					continue
				}
				s := samples.AppendEmpty()
				s.SetStackIndex(b.stack(e.key.stack))
				s.SetLinkIndex(b.link(e.key.link))
				b.sampleAttrs(s.AttributeIndices(), e.key.attrs)
				s.Values().Append(e.values[si])
				samplesOut++
			}
		}
	}
	return pd, samplesOut
}
