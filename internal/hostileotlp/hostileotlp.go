// Package hostileotlp builds OTLP profiles a broken or hostile sender could
// send to a gateway: every component that reads a pprofile.Profiles it did
// not produce is tested (and fuzzed, with these as seeds) against them.
//
// Each case is one request holding a well-formed process, service GoodService
// with GoodSamples samples of the stack main → work, next to the hostile
// part: whatever a component does with the hostile part, the good process
// must come through whole.
package hostileotlp

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// The well-formed process every case carries.
const (
	GoodService = "good-service"
	GoodSamples = 7
)

// DeepStackFrames is the depth of the deep-stack case.
const DeepStackFrames = 10_000

// Case is one hostile request.
type Case struct {
	Name string
	// Hostile is how many samples/count samples the hostile part holds
	// (0 when the hostile part is in the dictionary or resource only).
	Hostile int
	// Build returns the request; at is the time of the good samples.
	Build func(at time.Time) pprofile.Profiles
}

// Builder writes one request the way the receiver lays it out: index 0 of
// every dictionary table is the zero entry, stacks are leaf first, each
// process has a samples/count profile.
type Builder struct {
	PD   pprofile.Profiles
	Dict pprofile.ProfilesDictionary
	strs map[string]int32
	fns  map[string]int32
}

// NewBuilder returns a Builder with the zero entries in place.
func NewBuilder() *Builder {
	b := &Builder{PD: pprofile.NewProfiles(), strs: map[string]int32{}, fns: map[string]int32{}}
	b.Dict = b.PD.Dictionary()
	b.Str("")
	b.Dict.MappingTable().AppendEmpty()
	b.Dict.LocationTable().AppendEmpty()
	b.Dict.FunctionTable().AppendEmpty()
	b.Dict.LinkTable().AppendEmpty()
	b.Dict.AttributeTable().AppendEmpty()
	b.Dict.StackTable().AppendEmpty()
	return b
}

// Str interns s in the string table.
func (b *Builder) Str(s string) int32 {
	if i, ok := b.strs[s]; ok {
		return i
	}
	i := int32(b.Dict.StringTable().Len())
	b.Dict.StringTable().Append(s)
	b.strs[s] = i
	return i
}

// Location appends a location in function fn (one line).
func (b *Builder) Location(fn string) int32 {
	fi, ok := b.fns[fn]
	if !ok {
		f := b.Dict.FunctionTable().AppendEmpty()
		f.SetNameStrindex(b.Str(fn))
		fi = int32(b.Dict.FunctionTable().Len() - 1)
		b.fns[fn] = fi
	}
	l := b.Dict.LocationTable().AppendEmpty()
	l.Lines().AppendEmpty().SetFunctionIndex(fi)
	return int32(b.Dict.LocationTable().Len() - 1)
}

// Stack appends a stack of the given location indices (leaf first).
func (b *Builder) Stack(locs ...int32) int32 {
	st := b.Dict.StackTable().AppendEmpty()
	st.LocationIndices().FromRaw(locs)
	return int32(b.Dict.StackTable().Len() - 1)
}

// FrameStack appends a stack of new locations in the named functions.
func (b *Builder) FrameStack(leafFirst ...string) int32 {
	locs := make([]int32, len(leafFirst))
	for i, f := range leafFirst {
		locs[i] = b.Location(f)
	}
	return b.Stack(locs...)
}

// Process appends a resource with attrs and its samples/count profile at at.
func (b *Builder) Process(attrs map[string]any, at time.Time) pprofile.Profile {
	rp := b.PD.ResourceProfiles().AppendEmpty()
	// Sorted, so the encoding (and the committed seeds) is deterministic.
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		_ = rp.Resource().Attributes().PutEmpty(k).FromRaw(attrs[k])
	}
	sp := rp.ScopeProfiles().AppendEmpty()
	sp.Scope().SetName(profileschema.ScopeName)
	p := sp.Profiles().AppendEmpty()
	p.SampleType().SetTypeStrindex(b.Str(profileschema.SampleTypeSamples))
	p.SampleType().SetUnitStrindex(b.Str(profileschema.UnitCount))
	p.SetTime(pcommon.NewTimestampFromTime(at))
	p.SetDurationNano(uint64(15 * time.Second))
	return p
}

// Sample appends a sample of stack with values.
func Sample(p pprofile.Profile, stack int32, values ...int64) pprofile.Sample {
	s := p.Samples().AppendEmpty()
	s.SetStackIndex(stack)
	s.Values().FromRaw(values)
	return s
}

// Good adds the well-formed process.
func (b *Builder) Good(at time.Time) {
	p := b.Process(map[string]any{
		profileschema.AttrServiceName: GoodService,
		profileschema.AttrHostName:    "good-host",
		profileschema.AttrProcessPID:  int64(4242),
	}, at)
	Sample(p, b.FrameStack("work", "main"), GoodSamples)
}

// hostile starts a case: the good process, then a process for the hostile
// samples.
func hostile(at time.Time, service string) (*Builder, pprofile.Profile) {
	b := NewBuilder()
	b.Good(at)
	p := b.Process(map[string]any{profileschema.AttrServiceName: service, profileschema.AttrProcessPID: int64(666)}, at)
	return b, p
}

// Cases returns every hostile case.
func Cases() []Case {
	return []Case{
		{Name: "stack-index-out-of-range", Hostile: 3, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-stack")
			Sample(p, 9999, 1)
			Sample(p, -3, 1)
			Sample(p, math.MaxInt32, 1)
			return b.PD
		}},
		{Name: "location-index-out-of-range", Hostile: 3, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-location")
			Sample(p, b.Stack(b.Location("leaf"), 12345), 1)
			Sample(p, b.Stack(-1), 1)
			// Deeper than a stack is stored (1,024 frames), with the bad
			// index at the root, among the frames a reader would drop.
			deep, leaf := make([]int32, 1100), b.Location("leaf")
			for i := range deep {
				deep[i] = leaf
			}
			deep[len(deep)-1] = 54321
			Sample(p, b.Stack(deep...), 1)
			return b.PD
		}},
		{Name: "function-string-mapping-index-out-of-range", Hostile: 3, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-function")
			l := b.Dict.LocationTable().AppendEmpty()
			l.Lines().AppendEmpty().SetFunctionIndex(999)
			l.SetMappingIndex(555)
			l.SetAddress(0xdead)
			badFn := b.Dict.LocationTable().Len() - 1
			f := b.Dict.FunctionTable().AppendEmpty()
			f.SetNameStrindex(99999)
			f.SetFilenameStrindex(-7)
			l2 := b.Dict.LocationTable().AppendEmpty()
			l2.Lines().AppendEmpty().SetFunctionIndex(int32(b.Dict.FunctionTable().Len() - 1))
			l2.SetMappingIndex(-2)
			l2.AttributeIndices().FromRaw([]int32{777, -1})
			m := b.Dict.MappingTable().AppendEmpty()
			m.SetFilenameStrindex(4444)
			m.SetMemoryStart(0x1000)
			m.SetMemoryLimit(0x10) // limit below start
			l3 := b.Dict.LocationTable().AppendEmpty()
			l3.SetMappingIndex(int32(b.Dict.MappingTable().Len() - 1))
			l3.SetAddress(0x20)
			Sample(p, b.Stack(int32(badFn), b.Location("main")), 1)
			Sample(p, b.Stack(int32(b.Dict.LocationTable().Len()-2)), 1)
			Sample(p, b.Stack(int32(b.Dict.LocationTable().Len()-1)), 1)
			return b.PD
		}},
		{Name: "link-and-attribute-index-out-of-range", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-link")
			s := Sample(p, b.FrameStack("x", "main"), 1)
			s.SetLinkIndex(4242)
			s = Sample(p, b.FrameStack("y", "main"), 1)
			s.AttributeIndices().FromRaw([]int32{555, -1, 0})
			p.AttributeIndices().FromRaw([]int32{31337})
			return b.PD
		}},
		{Name: "sample-type-index-out-of-range", Hostile: 1, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-sample-type")
			p.SampleType().SetTypeStrindex(-5)
			p.SampleType().SetUnitStrindex(1 << 30)
			Sample(p, b.FrameStack("z", "main"), 1)
			return b.PD
		}},
		{Name: "recursive-stack", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			// A cycle in the call graph: the same locations repeated.
			b, p := hostile(at, "recursive")
			a, c := b.Location("a"), b.Location("b")
			var locs []int32
			for i := 0; i < 100; i++ {
				locs = append(locs, a, c)
			}
			Sample(p, b.Stack(locs...), 2)
			self := b.Location("self")
			Sample(p, b.Stack(self, self, self, self), 1)
			return b.PD
		}},
		{Name: "empty-stack", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "empty-stack")
			Sample(p, b.Stack(), 1)
			Sample(p, 0, 1)
			return b.PD
		}},
		{Name: "deep-stack", Hostile: 1, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "deep-stack")
			locs := make([]int32, DeepStackFrames)
			for i := range locs {
				locs[i] = b.Location(fmt.Sprintf("f%d", i))
			}
			Sample(p, b.Stack(locs...), 1)
			return b.PD
		}},
		{Name: "invalid-utf8", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			b := NewBuilder()
			b.Good(at)
			p := b.Process(map[string]any{
				profileschema.AttrServiceName:    "bad\xffservice",
				profileschema.AttrHostName:       "host\xc3",
				profileschema.AttrBuildID:        "ab\x00cd",
				profileschema.AttrProcessExePath: "/bin/\xfe",
				"\xffkey":                        "value",
			}, at)
			Sample(p, b.FrameStack("leaf\xff\xfe", "mid\x00dle", "main"), 1)
			Sample(p, b.FrameStack("\xc0\xaf"), 1)
			return b.PD
		}},
		{Name: "negative-and-overflowing-values", Hostile: 4, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "bad-values")
			st := b.FrameStack("v", "main")
			Sample(p, st, -5)
			Sample(p, st, math.MaxInt64, 1)
			Sample(p, st, math.MaxInt64)
			Sample(p, st, math.MaxInt64) // merging the two overflows
			return b.PD
		}},
		{Name: "missing-resource-attributes", Hostile: 1, Build: func(at time.Time) pprofile.Profiles {
			b := NewBuilder()
			b.Good(at)
			p := b.Process(nil, at)
			Sample(p, b.FrameStack("anon", "main"), 1)
			// And a resource with no scope or profiles at all.
			b.PD.ResourceProfiles().AppendEmpty()
			return b.PD
		}},
		{Name: "time-far-past", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			b := NewBuilder()
			b.Good(at)
			p := b.Process(map[string]any{profileschema.AttrServiceName: "past"}, time.Unix(0, 1))
			Sample(p, b.FrameStack("old", "main"), 1)
			s := Sample(p, b.FrameStack("older", "main"), 1)
			s.TimestampsUnixNano().FromRaw([]uint64{1})
			return b.PD
		}},
		{Name: "time-far-future", Hostile: 2, Build: func(at time.Time) pprofile.Profiles {
			b := NewBuilder()
			b.Good(at)
			p := b.Process(map[string]any{profileschema.AttrServiceName: "future"}, time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC))
			Sample(p, b.FrameStack("later", "main"), 1)
			s := Sample(p, b.FrameStack("never", "main"), 1)
			s.TimestampsUnixNano().FromRaw([]uint64{math.MaxUint64})
			return b.PD
		}},
		{Name: "timestamps-values-mismatch", Hostile: 1, Build: func(at time.Time) pprofile.Profiles {
			b, p := hostile(at, "mismatch")
			s := Sample(p, b.FrameStack("m", "main"), 1)
			ts := uint64(at.UnixNano())
			s.TimestampsUnixNano().FromRaw([]uint64{ts, ts, ts})
			return b.PD
		}},
	}
}

// Marshal encodes pd as OTLP protobuf (what a sender puts on the wire).
func Marshal(pd pprofile.Profiles) []byte {
	var m pprofile.ProtoMarshaler
	b, err := m.MarshalProfiles(pd)
	if err != nil {
		panic(fmt.Sprintf("hostileotlp: marshal: %v", err)) // only our own well-typed pdata
	}
	return b
}

// CorpusTime is the time of the good samples in the committed fuzz seeds.
var CorpusTime = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// corpusFile is a `go test fuzz v1` seed file holding one []byte argument.
func corpusFile(data []byte) []byte {
	return []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", data))
}

// SyncCorpus checks that dir (a package's testdata/fuzz/<FuzzName>) holds
// one seed file per case, encoded as the fuzz target's single []byte
// argument; with update it writes them. It returns what is missing or stale.
func SyncCorpus(dir string, update bool) error {
	var stale []string
	for _, c := range Cases() {
		path := filepath.Join(dir, c.Name)
		want := corpusFile(Marshal(c.Build(CorpusTime)))
		if update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				return err
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			stale = append(stale, c.Name)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("fuzz seeds missing or stale in %s: %s (regenerate with `go test -run TestFuzzSeeds -update-seeds`)", dir, strings.Join(stale, ", "))
	}
	return nil
}
