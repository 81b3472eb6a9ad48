package simday

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/pdict"
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

// builder writes one Profiles through pdict (constant-time dedup, zero
// entries in place), remembering each service's stacks by their index.
type builder struct {
	pd     pprofile.Profiles
	d      *pdict.Builder
	stacks map[stackKey]int32
	locs   []int32
}

func newBuilder() *builder {
	pd := pprofile.NewProfiles()
	return &builder{pd: pd, d: pdict.New(pd.Dictionary()), stacks: map[stackKey]int32{}}
}

func (b *builder) str(s string) int32 { return b.d.String(s) }

// stack returns the stack table index of a service's stack (stored leaf
// first, as OTLP wants).
func (b *builder) stack(svc *Service, si, st int) int32 {
	k := stackKey{si, st}
	if i, ok := b.stacks[k]; ok {
		return i
	}
	frames := svc.Stacks[st]
	b.locs = b.locs[:0]
	for j := len(frames) - 1; j >= 0; j-- {
		b.locs = append(b.locs, b.d.Location(0, 0, b.d.Function(frames[j], ""), 0, 0))
	}
	i := b.d.Stack(b.locs)
	b.stacks[k] = i
	return i
}

func (b *builder) link(traceID, spanID []byte) int32 {
	if traceID == nil {
		return 0
	}
	var trace [16]byte
	var span [8]byte
	copy(trace[:], traceID)
	copy(span[:], spanID)
	return b.d.Link(trace, span)
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

	period := periodNanos(hz)
	// Both profiles carry the sampling period, as the receiver's do.
	counted := sp.Profiles().AppendEmpty()
	counted.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeSamples))
	counted.SampleType().SetUnitStrindex(b.str(profileschema.UnitCount))
	cpu := sp.Profiles().AppendEmpty()
	cpu.SampleType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
	cpu.SampleType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
	for _, p := range []pprofile.Profile{counted, cpu} {
		p.PeriodType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
		p.PeriodType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
		p.SetPeriod(period)
		p.SetTime(at)
	}

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
