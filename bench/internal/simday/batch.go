package simday

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// periodNanos is one sample's CPU time at hz.
func periodNanos(hz int) int64 { return int64(1e9) / int64(hz) }

// Profiles lays intervals out as the agent's pipeline emits them: one
// shared dictionary (index 0 of every table empty), per interval and
// service one ResourceProfiles carrying a samples/count profile and its
// cpu/nanoseconds twin, identical (stack, trace, span) samples merged with
// their count.
func (h *Host) Profiles(ivs ...Interval) pprofile.Profiles {
	b := newBuilder()
	for _, iv := range ivs {
		for si, samples := range iv.Samples {
			if len(samples) == 0 {
				continue
			}
			b.service(h.Services[si], si, iv, samples, h.P.Hz)
		}
	}
	return b.pd
}

type stackKey struct{ service, stack int }

type sampleKey struct {
	stack int32
	link  int32
}

type builder struct {
	pd     pprofile.Profiles
	dict   pprofile.ProfilesDictionary
	strs   map[string]int32
	locs   map[string]int32
	stacks map[stackKey]int32
	links  map[[24]byte]int32
}

func newBuilder() *builder {
	b := &builder{pd: pprofile.NewProfiles(), strs: map[string]int32{}, locs: map[string]int32{},
		stacks: map[stackKey]int32{}, links: map[[24]byte]int32{}}
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

func (b *builder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

func (b *builder) location(fn string) int32 {
	if i, ok := b.locs[fn]; ok {
		return i
	}
	f := b.dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(b.str(fn))
	l := b.dict.LocationTable().AppendEmpty()
	l.Lines().AppendEmpty().SetFunctionIndex(int32(b.dict.FunctionTable().Len() - 1))
	i := int32(b.dict.LocationTable().Len() - 1)
	b.locs[fn] = i
	return i
}

// stack returns the stack table index of a service's stack (stored leaf
// first, as OTLP wants).
func (b *builder) stack(svc *Service, si, st int) int32 {
	k := stackKey{si, st}
	if i, ok := b.stacks[k]; ok {
		return i
	}
	frames := svc.Stacks[st]
	t := b.dict.StackTable().AppendEmpty()
	for j := len(frames) - 1; j >= 0; j-- {
		t.LocationIndices().Append(b.location(frames[j]))
	}
	i := int32(b.dict.StackTable().Len() - 1)
	b.stacks[k] = i
	return i
}

func (b *builder) link(traceID, spanID []byte) int32 {
	if traceID == nil {
		return 0
	}
	var k [24]byte
	copy(k[:16], traceID)
	copy(k[16:], spanID)
	if i, ok := b.links[k]; ok {
		return i
	}
	l := b.dict.LinkTable().AppendEmpty()
	l.SetTraceID(pcommon.TraceID(k[:16]))
	l.SetSpanID(pcommon.SpanID(k[16:]))
	i := int32(b.dict.LinkTable().Len() - 1)
	b.links[k] = i
	return i
}

func (b *builder) service(svc *Service, si int, iv Interval, samples []Sample, hz int) {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	attrs := rp.Resource().Attributes()
	attrs.PutStr(profileschema.AttrServiceName, svc.Name)
	attrs.PutStr(profileschema.AttrK8sPodName, svc.Pod)
	attrs.PutStr(profileschema.AttrBuildID, svc.BuildID)
	attrs.PutStr(profileschema.AttrBuildIDGNU, svc.BuildID)
	attrs.PutStr(profileschema.AttrProcessExePath, svc.ExePath)
	attrs.PutBool(profileschema.AttrBinaryHasDebugInfo, false)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(profileschema.ScopeName)
	at := pcommon.NewTimestampFromTime(iv.Start)

	counted := sp.Profiles().AppendEmpty()
	counted.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeSamples))
	counted.SampleType().SetUnitStrindex(b.str(profileschema.UnitCount))
	counted.SetTime(at)
	cpu := sp.Profiles().AppendEmpty()
	cpu.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
	cpu.SampleType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
	cpu.SetTime(at)

	// Merge identical samples first, keeping first-seen order.
	counts := map[sampleKey]int64{}
	var order []sampleKey
	for _, s := range samples {
		k := sampleKey{b.stack(svc, si, s.Stack), b.link(s.TraceID, s.SpanID)}
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	period := periodNanos(hz)
	for _, k := range order {
		s := counted.Samples().AppendEmpty()
		s.SetStackIndex(k.stack)
		s.SetLinkIndex(k.link)
		s.Values().Append(counts[k])
		c := cpu.Samples().AppendEmpty()
		c.SetStackIndex(k.stack)
		c.SetLinkIndex(k.link)
		c.Values().Append(counts[k] * period)
	}
}
