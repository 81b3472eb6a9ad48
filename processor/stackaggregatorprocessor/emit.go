package stackaggregatorprocessor

import (
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// dictBuilder writes one output ProfilesDictionary. Only what the emitted
// samples reference is written, so pruned and truncated stacks leave no
// trace in it. Lookups use its own maps: the pprofile.Set* helpers scan.
type dictBuilder struct {
	src   *frameDict
	dict  pprofile.ProfilesDictionary
	strs  map[string]int32
	funcs map[function]int32
	maps  map[string]int32
	attrs map[string]int32

	locOf   []int32 // window frame id → output location index; 0 = not yet
	stackOf []int32 // window stack id → output stack index; 0 = not yet
	linkOf  []int32
	setOf   [][]int32 // window attribute set id → output attribute indices
	key     []byte
}

func newDictBuilder(src *frameDict, dict pprofile.ProfilesDictionary) *dictBuilder {
	b := &dictBuilder{
		src: src, dict: dict,
		strs:    map[string]int32{},
		funcs:   map[function]int32{},
		maps:    map[string]int32{},
		attrs:   map[string]int32{},
		locOf:   make([]int32, len(src.frames)),
		stackOf: make([]int32, len(src.stackOff)),
		linkOf:  make([]int32, len(src.links)),
		setOf:   make([][]int32, len(src.attrSets)),
	}
	// Index 0 of every table is the zero entry.
	b.str("")
	dict.MappingTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.FunctionTable().AppendEmpty()
	dict.LinkTable().AppendEmpty()
	dict.AttributeTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	return b
}

func (b *dictBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

func (b *dictBuilder) attr(a attr) int32 {
	b.key = appendAttrs(b.key[:0], []attr{a})
	if i, ok := b.attrs[string(b.key)]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(b.str(a.key))
	kv.SetUnitStrindex(b.str(a.unit))
	a.value.CopyTo(kv.Value())
	b.attrs[string(b.key)] = i
	return i
}

func (b *dictBuilder) putAttrs(dst pcommon.Int32Slice, as []attr) {
	for _, a := range as {
		dst.Append(b.attr(a))
	}
}

func (b *dictBuilder) function(f function) int32 {
	if i, ok := b.funcs[f]; ok {
		return i
	}
	i := int32(b.dict.FunctionTable().Len())
	fn := b.dict.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.str(f.name))
	fn.SetSystemNameStrindex(b.str(f.systemName))
	fn.SetFilenameStrindex(b.str(f.file))
	fn.SetStartLine(f.startLine)
	b.funcs[f] = i
	return i
}

func (b *dictBuilder) mapping(m *mapping) int32 {
	// A frame holding only the mapping keys the mapping's content.
	fr := frame{mapping: m}
	b.key = appendFrameKey(b.key[:0], &fr)
	if i, ok := b.maps[string(b.key)]; ok {
		return i
	}
	i := int32(b.dict.MappingTable().Len())
	om := b.dict.MappingTable().AppendEmpty()
	om.SetFilenameStrindex(b.str(m.file))
	om.SetMemoryStart(m.start)
	om.SetMemoryLimit(m.limit)
	om.SetFileOffset(m.offset)
	b.putAttrs(om.AttributeIndices(), m.attrs)
	b.maps[string(b.key)] = i
	return i
}

func (b *dictBuilder) location(id int32) int32 {
	if i := b.locOf[id]; i != 0 {
		return i
	}
	fr := &b.src.frames[id]
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetAddress(fr.address)
	if fr.mapping != nil {
		loc.SetMappingIndex(b.mapping(fr.mapping))
	}
	for _, l := range fr.lines {
		ol := loc.Lines().AppendEmpty()
		if l.hasFn {
			ol.SetFunctionIndex(b.function(l.fn))
		}
		ol.SetLine(l.line)
		ol.SetColumn(l.column)
	}
	b.putAttrs(loc.AttributeIndices(), fr.attrs)
	b.locOf[id] = i
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
	i := int32(b.dict.StackTable().Len())
	st := b.dict.StackTable().AppendEmpty()
	li := st.LocationIndices()
	li.EnsureCapacity(len(frames))
	for _, f := range frames {
		li.Append(b.location(f))
	}
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
	i := int32(b.dict.LinkTable().Len())
	l := b.dict.LinkTable().AppendEmpty()
	l.SetTraceID(pcommon.TraceID(k[:16]))
	l.SetSpanID(pcommon.SpanID(k[16:]))
	b.linkOf[id] = i
	return i
}

func (b *dictBuilder) sampleAttrs(dst pcommon.Int32Slice, id int32) {
	if id == 0 {
		return
	}
	if b.setOf[id] == nil {
		as := b.src.attrSets[id]
		idx := make([]int32, len(as))
		for j, a := range as {
			idx[j] = b.attr(a)
		}
		b.setOf[id] = idx
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
