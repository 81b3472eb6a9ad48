// Package profileschema is the one place that says how hotpath lays out CPU
// profiles in OTLP: which attribute keys, sample types and frame names every
// component (receiver, processors, exporter, CLI) agrees on.
package profileschema

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// Scope identifies profiles produced by hotpath's receiver.
const ScopeName = "github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver"

// SchemaURL is the semantic-conventions version the keys below come from;
// resources and scopes hotpath emits carry it.
const SchemaURL = semconv.SchemaURL

// Resource and mapping attribute keys: the OpenTelemetry semantic
// conventions' (semconv package of the pinned OTel version) where one
// exists, hotpath.* where none does.
const (
	AttrServiceName        = string(semconv.ServiceNameKey)
	AttrServiceVersion     = string(semconv.ServiceVersionKey)
	AttrServiceNamespace   = string(semconv.ServiceNamespaceKey)
	AttrServiceInstanceID  = string(semconv.ServiceInstanceIDKey)
	AttrHostName           = string(semconv.HostNameKey)
	AttrHostID             = string(semconv.HostIDKey)
	AttrHostArch           = string(semconv.HostArchKey)
	AttrOSType             = string(semconv.OSTypeKey)
	AttrContainerID        = string(semconv.ContainerIDKey)
	AttrContainerRuntime   = string(semconv.ContainerRuntimeNameKey)
	AttrK8sPodName         = string(semconv.K8SPodNameKey)
	AttrK8sPodUID          = string(semconv.K8SPodUIDKey)
	AttrK8sNamespaceName   = string(semconv.K8SNamespaceNameKey)
	AttrDeploymentEnv      = string(semconv.DeploymentEnvironmentNameKey)
	AttrProcessPID         = string(semconv.ProcessPIDKey)
	AttrProcessExeName     = string(semconv.ProcessExecutableNameKey)
	AttrProcessExePath     = string(semconv.ProcessExecutablePathKey)
	AttrThreadName         = string(semconv.ThreadNameKey)
	AttrBuildIDGNU         = string(semconv.ProcessExecutableBuildIDGNUKey)
	AttrBuildIDGo          = string(semconv.ProcessExecutableBuildIDGoKey)
	AttrBuildIDHTLHash     = string(semconv.ProcessExecutableBuildIDHtlhashKey)
	AttrBuildIDSHA256      = "hotpath.build_id.sha256"
	AttrBuildID            = "hotpath.build_id" // canonical: see buildid.Info.Canonical
	AttrBinaryHasDebugInfo = "hotpath.binary.has_debug_info"
)

// AttrBatchID is a resource attribute naming the batch a request belongs to
// (the emitting stackaggregator's window): the same on every resource of one
// request and on every retry of it, so a receiver that stored it once drops
// the repeat. It is an identity, not a label: never stored as one.
const AttrBatchID = "hotpath.batch.id"

// MaxBatchIDLen bounds a batch id a sender may set; longer ones are ignored.
const MaxBatchIDLen = 128

// BatchID returns the request's batch id: the first resource's
// AttrBatchID, "" when absent or too long.
func BatchID(pd pprofile.Profiles) string {
	rps := pd.ResourceProfiles()
	if rps.Len() == 0 {
		return ""
	}
	v, ok := rps.At(0).Resource().Attributes().Get(AttrBatchID)
	if !ok || v.Type() != pcommon.ValueTypeStr {
		return ""
	}
	if s := v.Str(); len(s) <= MaxBatchIDLen {
		return s
	}
	return ""
}

// Binary metadata the buildid processor records on a resource (next to the
// build-ID keys above) so the exporter can fill binary_metadata_local /
// binary_metadata_registry. Times are Int attributes in Unix nanoseconds:
// when this collector first and last saw the build. The binary's path is
// AttrProcessExePath.
const (
	AttrBinaryFirstSeen = "hotpath.binary.first_seen"
	AttrBinaryLastSeen  = "hotpath.binary.last_seen"
)

// Location attribute: what kind of code a frame is (semantic convention
// profile.frame.type). FrameTypeJIT is code a runtime generated at run time
// (V8, HotSpot, .NET, CPython's perf trampolines), named from its perf map;
// FrameTypePython a CPython interpreter frame (function, file, line), named
// like any other function.
const (
	AttrFrameType   = string(semconv.ProfileFrameTypeKey)
	FrameTypeKernel = "kernel"
	FrameTypeNative = "native"
	FrameTypeGo     = "go"
	FrameTypeJIT    = "jit"
	FrameTypePython = "python"
)

// Suffixes FrameName gives a frame's name by its type, flamegraph.pl's
// convention (its java palette colours "_[k]" kernel and "_[j]" JIT
// frames). They keep the type in folded stacks and in stored frame names.
const (
	KernelSuffix = "_[k]"
	JITSuffix    = "_[j]"
)

// KernelMappingFile is the file of the kernel's mapping (perf's name for
// it). A kernel frame the agent could not symbolize (no CAP_SYSLOG) is named
// by it: "[kernel.kallsyms]+0xffffffff81000e06".
const KernelMappingFile = "[kernel.kallsyms]"

// Sample and period types. A receiver emits, per process, one profile of
// SampleTypeSamples/UnitCount (the number of samples, what storage keeps) and
// one of SampleTypeCPU/UnitNanoseconds (count × period). Consumers that want
// sample counts pick the first with IsSampleCount.
const (
	SampleTypeSamples = "samples"
	SampleTypeCPU     = "cpu"
	UnitCount         = "count"
	UnitNanoseconds   = "nanoseconds"
)

// IsSampleCount reports whether p's sample type is samples/count.
func IsSampleCount(dict pprofile.ProfilesDictionary, p pprofile.Profile) bool {
	st := p.SampleType()
	return str(dict, st.TypeStrindex()) == SampleTypeSamples && str(dict, st.UnitStrindex()) == UnitCount
}

// Bounds of a sampling period PeriodNanos accepts: 1 MHz to one sample a
// minute. Anything outside is a unit mix-up or forged, and would overflow
// CPU-time sums (count × period) in storage.
const (
	MinPeriodNanos = int64(time.Microsecond)
	MaxPeriodNanos = int64(time.Minute)
)

// PeriodNanos is the CPU time one sample of p stands for, in nanoseconds:
// its period when the period type is cpu/nanoseconds (the receiver sets
// 1e9/frequency_hz), else 0 (unknown). ok is false for a cpu/nanoseconds
// period outside [MinPeriodNanos, MaxPeriodNanos], which is also unknown.
func PeriodNanos(dict pprofile.ProfilesDictionary, p pprofile.Profile) (period int64, ok bool) {
	pt := p.PeriodType()
	if str(dict, pt.TypeStrindex()) != SampleTypeCPU || str(dict, pt.UnitStrindex()) != UnitNanoseconds || p.Period() == 0 {
		return 0, true
	}
	if p.Period() < MinPeriodNanos || p.Period() > MaxPeriodNanos {
		return 0, false
	}
	return p.Period(), true
}

// SampleTime is the time a sample belongs to: its first timestamp when it has
// one, else the start of its profile. The receiver aggregates in the kernel and
// so emits samples without timestamps.
func SampleTime(p pprofile.Profile, s pprofile.Sample) pcommon.Timestamp {
	if ts := s.TimestampsUnixNano(); ts.Len() > 0 {
		return pcommon.Timestamp(ts.At(0))
	}
	return p.Time()
}

// SampleCount sums a sample's values (aggregated samples carry one value;
// timestamped samples one per timestamp).
func SampleCount(s pprofile.Sample) int64 {
	var n int64
	vs := s.Values()
	for i := 0; i < vs.Len(); i++ {
		n += vs.At(i)
	}
	return n
}

// FrameName is the display name of a location: its innermost function when it
// has one (kernel frames get flamegraph.pl's "_[k]" suffix, JIT frames "_[j]");
// else the mapping's file base name and the file offset, so an unresolved
// frame stays distinguishable and can be symbolized later ("libfoo.so+0x1a2b",
// the same in every process whatever the load address); with no mapping file,
// UnknownFrame. Out-of-range indices give UnknownFrame rather than a panic:
// input may come from another host.
func FrameName(dict pprofile.ProfilesDictionary, loc pprofile.Location) string {
	lines := loc.Lines()
	if lines.Len() > 0 {
		// Lines are innermost first; the innermost is the frame's own function.
		fi := lines.At(0).FunctionIndex()
		if fi > 0 && int(fi) < dict.FunctionTable().Len() {
			if name := str(dict, dict.FunctionTable().At(int(fi)).NameStrindex()); name != "" {
				switch FrameType(dict, loc) {
				case FrameTypeKernel:
					return name + KernelSuffix
				case FrameTypeJIT:
					return name + JITSuffix
				}
				return name
			}
		}
	}
	mi := loc.MappingIndex()
	if mi > 0 && int(mi) < dict.MappingTable().Len() {
		m := dict.MappingTable().At(int(mi))
		if file := str(dict, m.FilenameStrindex()); file != "" {
			return fmt.Sprintf("%s%x", RawFramePrefix(file), FileOffset(m, loc.Address()))
		}
	}
	return UnknownFrame
}

// UnknownFrame names a frame whose code nothing describes: an address in
// anonymous memory (a JIT runtime's code that no perf map names) or in no
// mapping the agent read (a process that exited before it was read, a
// library mapped after), or a sample without a stack; perf's name for
// them. Its address would name nothing later either (it is where that
// process happened to have the code, and no file or build says what was
// there), and as a name of its own each sampled instruction was a frame and
// a stack of its own: a flame graph of many thin columns, and a frame
// dictionary that grew with every sample.
const UnknownFrame = "[unknown]"

// RawFramePrefix is how FrameName begins the name of a frame of file it
// could not symbolize: the file's base name and "+0x" (the file offset in hex
// follows). Readers that pick such frames out by their file use it too.
func RawFramePrefix(file string) string { return filepath.Base(file) + "+0x" }

// Str returns the string at index i of the dictionary, or "" when out of range.
func Str(dict pprofile.ProfilesDictionary, i int32) string { return str(dict, i) }

func str(dict pprofile.ProfilesDictionary, i int32) string {
	st := dict.StringTable()
	if i < 0 || int(i) >= st.Len() {
		return ""
	}
	return st.At(int(i))
}

// IsKernelFrame reports whether loc carries profile.frame.type=kernel.
func IsKernelFrame(dict pprofile.ProfilesDictionary, loc pprofile.Location) bool {
	return FrameType(dict, loc) == FrameTypeKernel
}

// FrameType is loc's profile.frame.type, "" when it has none.
func FrameType(dict pprofile.ProfilesDictionary, loc pprofile.Location) string {
	attrs := dict.AttributeTable()
	idx := loc.AttributeIndices()
	for i := 0; i < idx.Len(); i++ {
		ai := idx.At(i)
		if ai <= 0 || int(ai) >= attrs.Len() {
			continue
		}
		kv := attrs.At(int(ai))
		if str(dict, kv.KeyStrindex()) == AttrFrameType {
			return kv.Value().Str()
		}
	}
	return ""
}

// UnknownService is the service of a resource without service.name, as the
// OpenTelemetry SDKs name it.
const UnknownService = "unknown_service"

// ServiceName is the resource's service.name; for a producer that sends
// none (the OpenTelemetry eBPF profiler), the service ProcessService
// derives from the resource's process attributes, so that each program
// keeps its own service rather than one bucket for the whole host.
func ServiceName(res pcommon.Resource) string {
	attrs := res.Attributes()
	if v, ok := attrs.Get(AttrServiceName); ok && v.Str() != "" {
		return v.Str()
	}
	var exeName, exePath string
	if v, ok := attrs.Get(AttrProcessExeName); ok {
		exeName = v.Str()
	}
	if v, ok := attrs.Get(AttrProcessExePath); ok {
		exePath = v.Str()
	}
	return ProcessService(exeName, exePath, "")
}

// ProcessService is the service of a process that names none itself (no
// OTEL_SERVICE_NAME, no service.name): its executable's name, else the base
// name of its executable's path, else its command name (a kernel thread has
// no executable), else UnknownService. The receiver names the processes it
// samples this way and the gateway the resources of other producers.
func ProcessService(exeName, exePath, comm string) string {
	switch {
	case exeName != "":
		return exeName
	case exePath != "":
		return filepath.Base(exePath)
	case comm != "":
		return comm
	}
	return UnknownService
}

// PodName is where a profile came from at the granularity the summary tier
// keeps: the Kubernetes pod when known, else the host.
func PodName(res pcommon.Resource) string {
	for _, k := range []string{AttrK8sPodName, AttrHostName} {
		if v, ok := res.Attributes().Get(k); ok && v.Str() != "" {
			return v.Str()
		}
	}
	return ""
}

// PodUID is the resource's k8s.pod.uid, or "".
func PodUID(res pcommon.Resource) string { return strAttr(res, AttrK8sPodUID) }

// ContainerID is the resource's container.id, or "".
func ContainerID(res pcommon.Resource) string { return strAttr(res, AttrContainerID) }

func strAttr(res pcommon.Resource, key string) string {
	if v, ok := res.Attributes().Get(key); ok && v.Type() == pcommon.ValueTypeStr {
		return v.Str()
	}
	return ""
}

// BuildID is the resource's canonical build ID, or "" when none is known.
func BuildID(res pcommon.Resource) string {
	if v, ok := res.Attributes().Get(AttrBuildID); ok {
		return v.Str()
	}
	return ""
}

// FileOffset converts a runtime address inside mapping m to an offset in the
// mapped file.
func FileOffset(m pprofile.Mapping, addr uint64) uint64 {
	if addr < m.MemoryStart() {
		return addr
	}
	return addr - m.MemoryStart() + m.FileOffset()
}

// Accepted sample times. Nothing this system profiled predates
// MinSampleTime (an earlier time is a unit mix-up or forged), and nothing may
// be more than MaxFutureSkew ahead of the receiving host's clock (a bad clock
// or a forged time: an aggregation window for it would stay open, and
// retention would never delete its rows). Components that read profiles from
// other hosts drop samples outside this range and count them.
var MinSampleTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxFutureSkew: see MinSampleTime.
const MaxFutureSkew = 10 * time.Minute

// SampleTimeAccepted reports whether a sample at t (Unix nanoseconds) is in
// the accepted range as seen at now.
func SampleTimeAccepted(t uint64, now time.Time) bool {
	return t <= math.MaxInt64 && int64(t) >= MinSampleTime.UnixNano() && int64(t) <= now.Add(MaxFutureSkew).UnixNano()
}

// FoldedStack is a sample's stack as flamegraph.pl reads it: frame names
// (FrameName) root first, joined by ";". Out-of-range indices yield "".
func FoldedStack(dict pprofile.ProfilesDictionary, s pprofile.Sample) string {
	si := s.StackIndex()
	if si < 0 || int(si) >= dict.StackTable().Len() {
		return ""
	}
	idx := dict.StackTable().At(int(si)).LocationIndices()
	names := make([]string, idx.Len())
	locs := dict.LocationTable()
	for i := 0; i < idx.Len(); i++ {
		name := UnknownFrame
		if li := idx.At(i); li >= 0 && int(li) < locs.Len() {
			name = FrameName(dict, locs.At(int(li)))
		}
		names[idx.Len()-1-i] = name // OTLP stacks are leaf first
	}
	return strings.Join(names, ";")
}

// ForEachSample calls fn for every sample of every samples/count profile in
// pd, with its resource.
func ForEachSample(pd pprofile.Profiles, fn func(res pcommon.Resource, p pprofile.Profile, s pprofile.Sample)) {
	dict := pd.Dictionary()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			profiles := rp.ScopeProfiles().At(j).Profiles()
			for k := 0; k < profiles.Len(); k++ {
				p := profiles.At(k)
				if !IsSampleCount(dict, p) {
					continue
				}
				for x := 0; x < p.Samples().Len(); x++ {
					fn(rp.Resource(), p, p.Samples().At(x))
				}
			}
		}
	}
}

// FrameSource is where a location's innermost function lives: the
// function's file name and the line (the location's own line, else the
// function's start line). "" and 0 when the sender did not say.
func FrameSource(dict pprofile.ProfilesDictionary, loc pprofile.Location) (file string, line int64) {
	lines := loc.Lines()
	if lines.Len() == 0 {
		return "", 0
	}
	ln := lines.At(0)
	line = ln.Line()
	if fi := ln.FunctionIndex(); fi > 0 && int(fi) < dict.FunctionTable().Len() {
		fn := dict.FunctionTable().At(int(fi))
		file = str(dict, fn.FilenameStrindex())
		if line == 0 {
			line = fn.StartLine()
		}
	}
	return file, line
}

// TypeFromName is the frame type a name's suffix says (FrameName's "_[k]"
// kernel, "_[j]" JIT), "" otherwise: what is known of frames stored before
// types were.
func TypeFromName(name string) string {
	switch {
	case strings.HasSuffix(name, KernelSuffix):
		return FrameTypeKernel
	case strings.HasSuffix(name, JITSuffix):
		return FrameTypeJIT
	}
	return ""
}
