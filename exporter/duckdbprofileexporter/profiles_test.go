package duckdbprofileexporter

import (
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// profileBuilder makes OTLP profiles the way the receiver lays them out: one
// shared dictionary (index 0 of every table empty), one ResourceProfiles per
// process, a samples/count profile and its cpu/nanoseconds twin.
type profileBuilder struct {
	pd      pprofile.Profiles
	dict    pprofile.ProfilesDictionary
	strs    map[string]int32
	locs    map[string]int32
	stacks  map[string]int32
	links   map[[24]byte]int32
	counted pprofile.Profile
	cpu     pprofile.Profile
	// periodNs is the sampling period the next process records
	// (default 19 Hz, the receiver's; 0 records none).
	periodNs int64
}

func newProfileBuilder() *profileBuilder {
	b := &profileBuilder{periodNs: 52631578, pd: pprofile.NewProfiles(), strs: map[string]int32{}, locs: map[string]int32{}, stacks: map[string]int32{}, links: map[[24]byte]int32{}}
	b.dict = b.pd.Dictionary()
	b.str("")
	b.dict.MappingTable().AppendEmpty()
	b.dict.LocationTable().AppendEmpty()
	b.dict.FunctionTable().AppendEmpty()
	b.dict.LinkTable().AppendEmpty()
	b.dict.StackTable().AppendEmpty()
	b.dict.AttributeTable().AppendEmpty()
	return b
}

func (b *profileBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

// process starts a ResourceProfiles with the given resource attributes.
func (b *profileBuilder) process(at time.Time, attrs map[string]any) *profileBuilder {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	_ = rp.Resource().Attributes().FromRaw(attrs)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(profileschema.ScopeName)
	b.counted = sp.Profiles().AppendEmpty()
	b.counted.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeSamples))
	b.counted.SampleType().SetUnitStrindex(b.str(profileschema.UnitCount))
	b.counted.SetTime(pcommon.NewTimestampFromTime(at))
	if b.periodNs != 0 {
		b.counted.PeriodType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
		b.counted.PeriodType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
		b.counted.SetPeriod(b.periodNs)
	}
	b.cpu = sp.Profiles().AppendEmpty()
	b.cpu.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
	b.cpu.SampleType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
	b.cpu.SetTime(pcommon.NewTimestampFromTime(at))
	return b
}

// location returns the location of function fn; a name ending in "_[k]" is
// a kernel function (marked with profile.frame.type=kernel, the suffix
// itself comes back from profileschema.FrameName). "anon:0x7f…" is an
// address and nothing else (code in anonymous memory, or in no mapping),
// "anonmap:0x7f…" the same in a mapping without a file.
func (b *profileBuilder) location(fn string) int32 {
	if i, ok := b.locs[fn]; ok {
		return i
	}
	if kind, hex, ok := strings.Cut(fn, ":0x"); ok && (kind == "anon" || kind == "anonmap") {
		addr, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			panic(err)
		}
		l := b.dict.LocationTable().AppendEmpty()
		l.SetAddress(addr)
		if kind == "anonmap" {
			m := b.dict.MappingTable().AppendEmpty()
			m.SetMemoryStart(addr &^ 0xfff)
			m.SetMemoryLimit(addr&^0xfff + 0x1000)
			l.SetMappingIndex(int32(b.dict.MappingTable().Len() - 1))
		}
		i := int32(b.dict.LocationTable().Len() - 1)
		b.locs[fn] = i
		return i
	}
	name, kernel := strings.CutSuffix(fn, "_[k]")
	f := b.dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(b.str(name))
	l := b.dict.LocationTable().AppendEmpty()
	if kernel {
		a := b.dict.AttributeTable().AppendEmpty()
		a.SetKeyStrindex(b.str(profileschema.AttrFrameType))
		a.Value().SetStr(profileschema.FrameTypeKernel)
		l.AttributeIndices().Append(int32(b.dict.AttributeTable().Len() - 1))
	}
	l.Lines().AppendEmpty().SetFunctionIndex(int32(b.dict.FunctionTable().Len() - 1))
	i := int32(b.dict.LocationTable().Len() - 1)
	b.locs[fn] = i
	return i
}

// sample adds a sample whose stack is given LEAF FIRST, as OTLP stores it.
func (b *profileBuilder) sample(count int64, leafFirst []string, traceID, spanID []byte) pprofile.Sample {
	key := ""
	for _, f := range leafFirst {
		key += f + ";"
	}
	si, ok := b.stacks[key]
	if !ok {
		st := b.dict.StackTable().AppendEmpty()
		for _, f := range leafFirst {
			st.LocationIndices().Append(b.location(f))
		}
		si = int32(b.dict.StackTable().Len() - 1)
		b.stacks[key] = si
	}
	s := b.counted.Samples().AppendEmpty()
	s.SetStackIndex(si)
	s.Values().Append(count)
	if traceID != nil {
		var k [24]byte
		copy(k[:16], traceID)
		copy(k[16:], spanID)
		li, ok := b.links[k]
		if !ok {
			l := b.dict.LinkTable().AppendEmpty()
			l.SetTraceID(pcommon.TraceID(k[:16]))
			l.SetSpanID(pcommon.SpanID(k[16:]))
			li = int32(b.dict.LinkTable().Len() - 1)
			b.links[k] = li
		}
		s.SetLinkIndex(li)
	}
	// The derived twin: same stack, count × period.
	c := b.cpu.Samples().AppendEmpty()
	c.SetStackIndex(si)
	c.Values().Append(count * b.periodNs)
	return s
}
