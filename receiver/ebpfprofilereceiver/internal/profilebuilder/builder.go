// Package profilebuilder turns one interval of symbolized, kernel-aggregated
// samples into OTLP profiles: one ResourceProfiles per process, each holding a
// samples/count and a cpu/nanoseconds profile over one shared dictionary.
package profilebuilder

import (
	"crypto/rand"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
	"github.com/hotpath-dev/hotpath/internal/pdict"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// FrameKind says what kind of code a frame is in.
type FrameKind uint8

const (
	Native FrameKind = iota
	Go
	Kernel
	JIT    // generated at run time, named from the runtime's perf map
	Python // a CPython interpreter frame
	numFrameKinds
)

func (k FrameKind) attr() string {
	switch k {
	case Go:
		return profileschema.FrameTypeGo
	case Kernel:
		return profileschema.FrameTypeKernel
	case JIT:
		return profileschema.FrameTypeJIT
	case Python:
		return profileschema.FrameTypePython
	default:
		return profileschema.FrameTypeNative
	}
}

// Mapping is a file mapped into the sampled address space.
type Mapping struct {
	Start, Limit, Offset uint64
	File                 string
	// Build identifies the mapped file where the receiver read it (the
	// executable's, read with the process): it goes on the mapping as the
	// profiles conventions say (process.executable.build_id.gnu, .go).
	// Zero when not read; the buildid processor resolves the rest.
	Build buildid.Info
}

// Frame is one symbolized stack frame. Function is "" when the address could
// not be resolved; the frame is kept with its address and mapping.
type Frame struct {
	Address  uint64
	Function string
	File     string
	Line     int64
	Kind     FrameKind
	// Mapping is the mapping the address is in, nil for none. A Builder
	// knows a mapping by this pointer: what it points to must not change
	// while the Builder is in use.
	Mapping *Mapping
}

// unknownFrame is the frame of a sample that has no stack.
var unknownFrame = Frame{Function: profileschema.UnknownFrame}

// Process is what the resource of a process's profiles says about it.
type Process struct {
	PID         uint32
	ServiceName string
	// Published are the other service attributes the process's
	// OpenTelemetry SDK published (its process context): version,
	// namespace, instance id, deployment environment; each set only
	// when published.
	Published ServiceAttributes
	ExeName   string
	ExePath   string
	// Host is the machine the process ran on, the same for every process
	// of one receiver; nil leaves the host attributes out.
	Host      *Host
	Container cgroupattr.Container
	// Build identifies the executable, read when the process was; zero
	// when it could not be (the buildid processor then tries).
	Build buildid.Info
}

// Host is what a profile's resource says about the machine: host.name,
// host.id, host.arch and os.type, each left out when empty.
type Host struct {
	Name, ID, Arch, OSType string
}

// ServiceAttributes describe a service beyond its name.
type ServiceAttributes struct {
	Version, Namespace, InstanceID, Environment string
}

// Builder collects one interval. It is not safe for concurrent use.
type Builder struct {
	start    time.Time
	interval time.Duration
	period   int64

	profiles pprofile.Profiles
	dict     *pdict.Builder
	// procs: each pid's samples by the process they are of. One pid can
	// be two processes in an interval: the image it left at an exec and
	// the new one, or an exited process and one that reused its pid.
	procs    map[uint32][]*processSamples
	kindAttr [numFrameKinds]int32
	locs     []int32
	attrs    []int32
	// mappings are the mapping table indexes of the Mappings met so far,
	// by identity: an interval's frames share a few mappings, and resolving
	// one (its build-ID attributes, its encoded key) for every frame took
	// most of the interval's time (BenchmarkInterval: 9.1 ms, 1.6 ms with
	// each mapping resolved once).
	mappings map[*Mapping]int32
}

type processSamples struct {
	proc   Process
	counts map[sampleKey]uint64
}

type sampleKey struct{ stack, link int32 }

// New starts an interval beginning at start, sampled every period.
func New(start time.Time, interval, period time.Duration) *Builder {
	p := pprofile.NewProfiles()
	b := &Builder{
		start:    start,
		interval: interval,
		period:   period.Nanoseconds(),
		profiles: p,
		dict:     pdict.New(p.Dictionary()),
		procs:    map[uint32][]*processSamples{},
		mappings: map[*Mapping]int32{},
	}
	for k := range numFrameKinds {
		b.kindAttr[k] = b.dict.Attribute(profileschema.AttrFrameType, k.attr())
	}
	return b
}

// Add records count samples of proc with frames (leaf first) while the given
// trace/span was active (zero IDs for none).
func (b *Builder) Add(proc Process, frames []Frame, trace [16]byte, span [8]byte, count uint64) {
	var ps *processSamples
	for _, p := range b.procs[proc.PID] {
		if p.proc == proc {
			ps = p
			break
		}
	}
	if ps == nil {
		ps = &processSamples{proc: proc, counts: map[sampleKey]uint64{}}
		b.procs[proc.PID] = append(b.procs[proc.PID], ps)
	}
	b.locs = b.locs[:0]
	for i := range frames {
		b.locs = append(b.locs, b.location(&frames[i]))
	}
	if len(b.locs) == 0 {
		// The kernel could take neither stack (e.g. a task in exec): the
		// CPU time is real, so keep it under pprof's name for that.
		b.locs = append(b.locs, b.location(&unknownFrame))
	}
	k := sampleKey{stack: b.dict.Stack(b.locs), link: b.dict.Link(trace, span)}
	ps.counts[k] += count
}

func (b *Builder) location(f *Frame) int32 {
	var mapping int32
	if f.Mapping != nil {
		mapping = b.mapping(f.Mapping)
	}
	var fn int32
	if f.Function != "" {
		fn = b.dict.Function(f.Function, f.File)
	}
	return b.dict.Location(mapping, f.Address, fn, f.Line, b.kindAttr[f.Kind])
}

// mapping returns the mapping table index of m.
func (b *Builder) mapping(m *Mapping) int32 {
	if i, ok := b.mappings[m]; ok {
		return i
	}
	b.attrs = b.attrs[:0]
	for _, kv := range m.Build.Attributes() {
		b.attrs = append(b.attrs, b.dict.Attribute(kv[0], kv[1]))
	}
	i := b.dict.MappingOf(m.Start, m.Limit, m.Offset, m.File, b.attrs)
	b.mappings[m] = i
	return i
}

// Len is the number of pids with samples.
func (b *Builder) Len() int { return len(b.procs) }

// Profiles finishes the interval. The Builder must not be used afterwards.
func (b *Builder) Profiles() pprofile.Profiles {
	pids := make([]uint32, 0, len(b.procs))
	for pid := range b.procs {
		pids = append(pids, pid)
	}
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })

	samplesType := [2]int32{b.dict.String(profileschema.SampleTypeSamples), b.dict.String(profileschema.UnitCount)}
	cpuType := [2]int32{b.dict.String(profileschema.SampleTypeCPU), b.dict.String(profileschema.UnitNanoseconds)}
	ts := pcommon.NewTimestampFromTime(b.start)

	for _, pid := range pids {
		for _, ps := range b.procs[pid] {
			b.addProcess(ps, samplesType, cpuType, ts)
		}
	}
	return b.profiles
}

// addProcess adds the resource profiles of one process's samples.
func (b *Builder) addProcess(ps *processSamples, samplesType, cpuType [2]int32, ts pcommon.Timestamp) {
	rp := b.profiles.ResourceProfiles().AppendEmpty()
	rp.SetSchemaUrl(profileschema.SchemaURL)
	setResource(rp.Resource().Attributes(), ps.proc)
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.SetSchemaUrl(profileschema.SchemaURL)
	sp.Scope().SetName(profileschema.ScopeName)

	keys := make([]sampleKey, 0, len(ps.counts))
	for k := range ps.counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].stack != keys[j].stack {
			return keys[i].stack < keys[j].stack
		}
		return keys[i].link < keys[j].link
	})

	for _, t := range []struct {
		typ   [2]int32
		scale int64
	}{{samplesType, 1}, {cpuType, b.period}} {
		p := sp.Profiles().AppendEmpty()
		p.SetProfileID(newProfileID())
		p.SampleType().SetTypeStrindex(t.typ[0])
		p.SampleType().SetUnitStrindex(t.typ[1])
		p.PeriodType().SetTypeStrindex(cpuType[0])
		p.PeriodType().SetUnitStrindex(cpuType[1])
		p.SetPeriod(b.period)
		p.SetTime(ts)
		p.SetDurationNano(uint64(b.interval.Nanoseconds()))
		samples := p.Samples()
		samples.EnsureCapacity(len(keys))
		for _, k := range keys {
			s := samples.AppendEmpty()
			s.SetStackIndex(k.stack)
			s.SetLinkIndex(k.link)
			s.Values().Append(int64(ps.counts[k]) * t.scale)
		}
	}
}

func setResource(attrs pcommon.Map, p Process) {
	attrs.PutStr(profileschema.AttrServiceName, p.ServiceName)
	for _, kv := range [...][2]string{
		{profileschema.AttrServiceVersion, p.Published.Version},
		{profileschema.AttrServiceNamespace, p.Published.Namespace},
		{profileschema.AttrServiceInstanceID, p.Published.InstanceID},
		{profileschema.AttrDeploymentEnv, p.Published.Environment},
	} {
		if kv[1] != "" {
			attrs.PutStr(kv[0], kv[1])
		}
	}
	attrs.PutInt(profileschema.AttrProcessPID, int64(p.PID))
	if p.ExeName != "" {
		attrs.PutStr(profileschema.AttrProcessExeName, p.ExeName)
	}
	if p.ExePath != "" {
		attrs.PutStr(profileschema.AttrProcessExePath, p.ExePath)
	}
	if h := p.Host; h != nil {
		for _, kv := range [...][2]string{
			{profileschema.AttrHostName, h.Name},
			{profileschema.AttrHostID, h.ID},
			{profileschema.AttrHostArch, h.Arch},
			{profileschema.AttrOSType, h.OSType},
		} {
			if kv[1] != "" {
				attrs.PutStr(kv[0], kv[1])
			}
		}
	}
	for _, kv := range [...][2]string{
		{profileschema.AttrContainerID, p.Container.ID},
		{profileschema.AttrContainerRuntime, p.Container.Runtime},
		{profileschema.AttrK8sPodUID, p.Container.PodUID},
	} {
		if kv[1] != "" {
			attrs.PutStr(kv[0], kv[1])
		}
	}
	if p.Build.Canonical() != "" {
		for _, kv := range p.Build.Attributes() {
			attrs.PutStr(kv[0], kv[1])
		}
		attrs.PutBool(profileschema.AttrBinaryHasDebugInfo, p.Build.HasDebugInfo)
	}
}

func newProfileID() pprofile.ProfileID {
	var id pprofile.ProfileID
	_, _ = rand.Read(id[:])
	return id
}
