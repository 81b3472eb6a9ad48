package stackaggregatorprocessor

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Test inputs are built the way the receiver lays them out: one
// ResourceProfiles per process, two profiles (samples/count and
// cpu/nanoseconds) sharing one dictionary, stacks leaf first.

type sampleSpec struct {
	stack []string // frame function names, leaf first
	n     int64
	trace byte     // 0: no link; else trace ID filled with this byte
	ts    []uint64 // optional per-value timestamps (n each)
}

type procSpec struct {
	service, host, buildID string
	podUID, containerID    string
	pid                    int64
	period                 int64 // sampling period in ns; 0 = testPeriod (19 Hz)
	samples                []sampleSpec
}

const testPeriod = int64(1e9) / 19

// inputBuilder writes one Profiles; rng (when set) shuffles the order frames
// enter the dictionary, so equal frames get different indices per batch.
type inputBuilder struct {
	pd     pprofile.Profiles
	dict   pprofile.ProfilesDictionary
	strs   map[string]int32
	locs   map[string]int32
	stacks map[string]int32
	links  map[byte]int32
	kind   int32 // attribute index of profile.frame.type=native
}

func newInputBuilder(rng *rand.Rand, frames []string) *inputBuilder {
	b := &inputBuilder{pd: pprofile.NewProfiles(), strs: map[string]int32{}, locs: map[string]int32{}, stacks: map[string]int32{}, links: map[byte]int32{}}
	b.dict = b.pd.Dictionary()
	b.str("")
	b.dict.MappingTable().AppendEmpty()
	b.dict.LocationTable().AppendEmpty()
	b.dict.FunctionTable().AppendEmpty()
	b.dict.LinkTable().AppendEmpty()
	b.dict.AttributeTable().AppendEmpty()
	b.dict.StackTable().AppendEmpty()
	m := b.dict.MappingTable().AppendEmpty()
	m.SetFilenameStrindex(b.str("/usr/bin/app"))
	kv := b.dict.AttributeTable().AppendEmpty()
	kv.SetKeyStrindex(b.str(profileschema.AttrFrameType))
	kv.Value().SetStr(profileschema.FrameTypeNative)
	b.kind = 1
	if rng != nil {
		fr := append([]string(nil), frames...)
		rng.Shuffle(len(fr), func(i, j int) { fr[i], fr[j] = fr[j], fr[i] })
		for _, f := range fr {
			b.loc(f)
		}
	}
	return b
}

func (b *inputBuilder) str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

func addrOf(name string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return uint64(h.Sum32())
}

func (b *inputBuilder) loc(name string) int32 {
	if i, ok := b.locs[name]; ok {
		return i
	}
	fn := b.dict.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.str(name))
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(1)
	loc.SetAddress(addrOf(name))
	loc.Lines().AppendEmpty().SetFunctionIndex(int32(b.dict.FunctionTable().Len() - 1))
	loc.AttributeIndices().Append(b.kind)
	b.locs[name] = i
	return i
}

func (b *inputBuilder) stack(frames []string) int32 {
	key := strings.Join(frames, ";")
	if i, ok := b.stacks[key]; ok {
		return i
	}
	i := int32(b.dict.StackTable().Len())
	st := b.dict.StackTable().AppendEmpty()
	for _, f := range frames {
		st.LocationIndices().Append(b.loc(f))
	}
	b.stacks[key] = i
	return i
}

func (b *inputBuilder) link(trace byte) int32 {
	if trace == 0 {
		return 0
	}
	if i, ok := b.links[trace]; ok {
		return i
	}
	i := int32(b.dict.LinkTable().Len())
	l := b.dict.LinkTable().AppendEmpty()
	var tid pcommon.TraceID
	for j := range tid {
		tid[j] = trace
	}
	l.SetTraceID(tid)
	l.SetSpanID(pcommon.SpanID{trace, 1, 2, 3, 4, 5, 6, 7})
	b.links[trace] = i
	return i
}

func (b *inputBuilder) add(start time.Time, interval time.Duration, p procSpec) {
	rp := b.pd.ResourceProfiles().AppendEmpty()
	attrs := rp.Resource().Attributes()
	attrs.PutStr(profileschema.AttrServiceName, p.service)
	attrs.PutStr(profileschema.AttrHostName, p.host)
	attrs.PutInt(profileschema.AttrProcessPID, p.pid)
	attrs.PutStr(profileschema.AttrProcessExeName, "app")
	attrs.PutStr(profileschema.AttrProcessExePath, "/usr/bin/app")
	if p.buildID != "" {
		attrs.PutStr(profileschema.AttrBuildID, p.buildID)
	}
	if p.containerID != "" {
		attrs.PutStr(profileschema.AttrContainerID, p.containerID)
		attrs.PutStr(profileschema.AttrK8sPodUID, p.podUID)
	}
	period := p.period
	if period == 0 {
		period = testPeriod
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(profileschema.ScopeName)
	for k, typ := range [][2]string{{profileschema.SampleTypeSamples, profileschema.UnitCount}, {profileschema.SampleTypeCPU, profileschema.UnitNanoseconds}} {
		prof := sp.Profiles().AppendEmpty()
		prof.SampleType().SetTypeStrindex(b.str(typ[0]))
		prof.SampleType().SetUnitStrindex(b.str(typ[1]))
		prof.PeriodType().SetTypeStrindex(b.str(profileschema.SampleTypeCPU))
		prof.PeriodType().SetUnitStrindex(b.str(profileschema.UnitNanoseconds))
		prof.SetPeriod(period)
		prof.SetTime(pcommon.NewTimestampFromTime(start))
		prof.SetDurationNano(uint64(interval))
		for _, s := range p.samples {
			smp := prof.Samples().AppendEmpty()
			smp.SetStackIndex(b.stack(s.stack))
			smp.SetLinkIndex(b.link(s.trace))
			mul := int64(1)
			if k == 1 {
				mul = period
			}
			if len(s.ts) > 0 {
				for _, t := range s.ts {
					smp.TimestampsUnixNano().Append(t)
					smp.Values().Append(s.n * mul)
				}
			} else {
				smp.Values().Append(s.n * mul)
			}
		}
	}
}

func input(start time.Time, interval time.Duration, rng *rand.Rand, frames []string, procs ...procSpec) pprofile.Profiles {
	b := newInputBuilder(rng, frames)
	for _, p := range procs {
		b.add(start, interval, p)
	}
	return b.pd
}

// canonical flattens Profiles into "what was measured" → value, independent
// of dictionary layout and sample order: window start, resource attributes,
// sample type, trace link and the stack's frames root first.
func canonical(t testing.TB, pds ...pprofile.Profiles) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, pd := range pds {
		dict := pd.Dictionary()
		for r := 0; r < pd.ResourceProfiles().Len(); r++ {
			rp := pd.ResourceProfiles().At(r)
			var attrs []string
			for k, v := range rp.Resource().Attributes().All() {
				if k == profileschema.AttrBatchID {
					continue // random per run; tested on its own
				}
				attrs = append(attrs, k+"="+v.AsString())
			}
			sort.Strings(attrs)
			for s := 0; s < rp.ScopeProfiles().Len(); s++ {
				profs := rp.ScopeProfiles().At(s).Profiles()
				for p := 0; p < profs.Len(); p++ {
					prof := profs.At(p)
					typ := profileschema.Str(dict, prof.SampleType().TypeStrindex())
					for i := 0; i < prof.Samples().Len(); i++ {
						smp := prof.Samples().At(i)
						st := dict.StackTable().At(int(smp.StackIndex()))
						var frames []string
						for j := st.LocationIndices().Len() - 1; j >= 0; j-- {
							loc := dict.LocationTable().At(int(st.LocationIndices().At(j)))
							frames = append(frames, fmt.Sprintf("%s@%x", profileschema.FrameName(dict, loc), loc.Address()))
						}
						lnk := ""
						if li := smp.LinkIndex(); li != 0 {
							l := dict.LinkTable().At(int(li))
							lnk = l.TraceID().String() + "/" + l.SpanID().String()
						}
						key := fmt.Sprintf("%d|%s|%s|%s|%s", prof.Time().AsTime().Unix(), strings.Join(attrs, ","), typ, lnk, strings.Join(frames, ";"))
						out[key] += profileschema.SampleCount(smp)
					}
				}
			}
		}
	}
	return out
}

// totals sums values per service and sample type.
func totals(pds ...pprofile.Profiles) map[string]int64 {
	out := map[string]int64{}
	for _, pd := range pds {
		dict := pd.Dictionary()
		for r := 0; r < pd.ResourceProfiles().Len(); r++ {
			rp := pd.ResourceProfiles().At(r)
			svc := profileschema.ServiceName(rp.Resource())
			for s := 0; s < rp.ScopeProfiles().Len(); s++ {
				profs := rp.ScopeProfiles().At(s).Profiles()
				for p := 0; p < profs.Len(); p++ {
					prof := profs.At(p)
					typ := profileschema.Str(dict, prof.SampleType().TypeStrindex())
					for i := 0; i < prof.Samples().Len(); i++ {
						out[svc+"/"+typ] += profileschema.SampleCount(prof.Samples().At(i))
					}
				}
			}
		}
	}
	return out
}

// emitAll flushes every window of a and returns them as emitted Profiles.
func emitAll(a *aggregator, window time.Duration) []pprofile.Profiles {
	var out []pprofile.Profiles
	for _, w := range a.Flush(time.Time{}, true) {
		pd, _ := emit(w, window)
		out = append(out, pd)
	}
	return out
}

func testConfig(window time.Duration) *Config {
	c := createDefaultConfig()
	c.Window = window
	return c
}
