package profilebuilder

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

func TestBuilderLayout(t *testing.T) {
	start := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	b := New(start, 15*time.Second, time.Second/19)
	libc := &Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000, Offset: 0x1000, File: "/lib/libc.so.6"}
	host := &Host{Name: "h1", ID: "4c4c4544004e", Arch: "amd64", OSType: "linux"}
	proc := Process{PID: 42, ServiceName: "api", ExeName: "api", ExePath: "/srv/api", Host: host}
	stack := []Frame{
		{Address: 0xffffffff81000000, Function: "do_syscall_64", Kind: Kernel, Mapping: &Mapping{File: "[kernel.kallsyms]"}},
		{Address: 0x401000, Function: "main.work", File: "main.go", Line: 12, Kind: Go},
		{Address: 0x7f0000002000, Mapping: libc}, // unresolved: file offset 0x2000+0x1000
	}
	var trace [16]byte
	trace[0] = 1
	b.Add(proc, stack, [16]byte{}, [8]byte{}, 3)
	b.Add(proc, stack, [16]byte{}, [8]byte{}, 2) // same key: merged
	b.Add(proc, stack, trace, [8]byte{2}, 4)     // other trace: kept apart
	b.Add(proc, nil, [16]byte{}, [8]byte{}, 1)   // no stack at all
	pd := b.Profiles()

	if pd.ResourceProfiles().Len() != 1 {
		t.Fatalf("%d resources, want 1", pd.ResourceProfiles().Len())
	}
	res := pd.ResourceProfiles().At(0).Resource()
	if profileschema.ServiceName(res) != "api" {
		t.Errorf("service = %q", profileschema.ServiceName(res))
	}
	if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); v.Int() != 42 {
		t.Errorf("pid = %v", v.AsRaw())
	}
	for k, want := range map[string]string{
		profileschema.AttrHostName: "h1", profileschema.AttrHostID: "4c4c4544004e",
		profileschema.AttrHostArch: "amd64", profileschema.AttrOSType: "linux",
	} {
		if v, ok := res.Attributes().Get(k); !ok || v.Str() != want {
			t.Errorf("%s = %q (set: %v), want %q", k, v.Str(), ok, want)
		}
	}
	profiles := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles()
	if profiles.Len() != 2 {
		t.Fatalf("%d profiles, want samples and cpu", profiles.Len())
	}
	dict := pd.Dictionary()
	got := map[string]int64{}
	var cpu int64
	profileschema.ForEachSample(pd, func(_ pcommon.Resource, p pprofile.Profile, s pprofile.Sample) {
		if p.Time().AsTime() != start || p.Period() != int64(time.Second/19) {
			t.Errorf("profile time %v period %d", p.Time().AsTime(), p.Period())
		}
		key := profileschema.FoldedStack(dict, s)
		if s.LinkIndex() != 0 {
			key += " (traced)"
		}
		got[key] += profileschema.SampleCount(s)
	})
	for i := 0; i < profiles.Len(); i++ {
		if p := profiles.At(i); !profileschema.IsSampleCount(dict, p) {
			for j := 0; j < p.Samples().Len(); j++ {
				cpu += profileschema.SampleCount(p.Samples().At(j))
			}
		}
	}
	want := map[string]int64{
		"libc.so.6+0x3000;main.work;do_syscall_64_[k]":          5,
		"libc.so.6+0x3000;main.work;do_syscall_64_[k] (traced)": 4,
		"[unknown]": 1,
	}
	if len(got) != len(want) {
		t.Fatalf("stacks = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q: %d samples, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if wantCPU := int64(10) * int64(time.Second/19); cpu != wantCPU {
		t.Errorf("cpu nanoseconds = %d, want %d (count × period)", cpu, wantCPU)
	}
}

// A containerized process's resource names its container, pod and runtime
// with the semantic-convention keys, and carries their schema URL; a host
// process's resource has none of those keys.
func TestBuilderContainerAttributes(t *testing.T) {
	b := New(time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC), 15*time.Second, time.Second/19)
	inPod := Process{PID: 7, ServiceName: "web", Container: cgroupattr.Container{
		ID: "bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba", PodUID: "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9", Runtime: cgroupattr.RuntimeContainerd,
	}}
	onHost := Process{PID: 8, ServiceName: "sshd"}
	b.Add(inPod, []Frame{{Address: 1, Function: "f"}}, [16]byte{}, [8]byte{}, 1)
	b.Add(onHost, []Frame{{Address: 1, Function: "f"}}, [16]byte{}, [8]byte{}, 1)
	pd := b.Profiles()
	want := map[int64]map[string]string{
		7: {"container.id": inPod.Container.ID, "k8s.pod.uid": inPod.Container.PodUID, "container.runtime.name": "containerd"},
		8: {},
	}
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		if rp.SchemaUrl() != profileschema.SchemaURL || rp.ScopeProfiles().At(0).SchemaUrl() != profileschema.SchemaURL {
			t.Errorf("schema URLs %q, %q; want %q", rp.SchemaUrl(), rp.ScopeProfiles().At(0).SchemaUrl(), profileschema.SchemaURL)
		}
		attrs := rp.Resource().Attributes()
		pid, _ := attrs.Get(profileschema.AttrProcessPID)
		for _, k := range []string{"container.id", "k8s.pod.uid", "container.runtime.name"} {
			v, ok := attrs.Get(k)
			if w, should := want[pid.Int()][k]; should != ok || (ok && v.Str() != w) {
				t.Errorf("pid %d: %s = %v (present %v), want %q (present %v)", pid.Int(), k, v.AsRaw(), ok, w, should)
			}
		}
	}
}

// TestMappingBuildIDs: a mapping whose file's build is known carries it the
// way the profiles conventions say, each kind under its own key, and a
// mapping without one carries none.
func TestMappingBuildIDs(t *testing.T) {
	b := New(time.Unix(1_700_000_000, 0), 15*time.Second, time.Second/19)
	exe := &Mapping{Start: 0x400000, Limit: 0x500000, File: "/srv/api", Build: buildid.Info{GNU: "abc123", Go: "go/id", IsELF: true}}
	lib := &Mapping{Start: 0x7f0000000000, Limit: 0x7f0000100000, File: "/lib/libc.so.6"}
	b.Add(Process{PID: 1, ServiceName: "api"}, []Frame{{Address: 0x401000, Function: "main.work", Mapping: exe}, {Address: 0x7f0000001000, Mapping: lib}}, [16]byte{}, [8]byte{}, 1)
	pd := b.Profiles()
	dict := pd.Dictionary()
	attrs := map[string]map[string]string{}
	for i := 1; i < dict.MappingTable().Len(); i++ {
		m := dict.MappingTable().At(i)
		file := profileschema.Str(dict, m.FilenameStrindex())
		attrs[file] = map[string]string{}
		for _, ai := range m.AttributeIndices().All() {
			a := dict.AttributeTable().At(int(ai))
			attrs[file][profileschema.Str(dict, a.KeyStrindex())] = a.Value().Str()
		}
	}
	want := map[string]string{profileschema.AttrBuildIDGNU: "abc123", profileschema.AttrBuildIDGo: "go/id", profileschema.AttrBuildID: "abc123"}
	if len(attrs["/srv/api"]) != len(want) {
		t.Errorf("executable mapping attributes %v, want %v", attrs["/srv/api"], want)
	}
	for k, v := range want {
		if attrs["/srv/api"][k] != v {
			t.Errorf("executable mapping %s = %q, want %q", k, attrs["/srv/api"][k], v)
		}
	}
	if len(attrs["/lib/libc.so.6"]) != 0 {
		t.Errorf("library mapping without a known build carries %v", attrs["/lib/libc.so.6"])
	}
}

// TestMappingIdentity: a mapping is resolved once per Builder however many
// frames point at it, and mappings are still told apart by content: an equal
// copy (a process read again) shares the entry, the same file with another
// build (a replaced binary) gets its own.
func TestMappingIdentity(t *testing.T) {
	b := New(time.Unix(1_700_000_000, 0), 15*time.Second, time.Second/19)
	exe := &Mapping{Start: 0x400000, Limit: 0x500000, File: "/srv/api", Build: buildid.Info{GNU: "abc123"}}
	reread := &Mapping{Start: 0x400000, Limit: 0x500000, File: "/srv/api", Build: buildid.Info{GNU: "abc123"}}
	replaced := &Mapping{Start: 0x400000, Limit: 0x500000, File: "/srv/api", Build: buildid.Info{GNU: "def456"}}
	for i, m := range []*Mapping{exe, exe, reread, replaced, exe} {
		frames := []Frame{{Address: 0x401000 + uint64(i)<<4, Function: "main.work", Mapping: m}, {Address: 0x402000 + uint64(i)<<4, Function: "main.main", Mapping: m}}
		b.Add(Process{PID: uint32(1 + i/3), ServiceName: "api"}, frames, [16]byte{}, [8]byte{}, 1)
	}
	dict := b.Profiles().Dictionary()
	builds := map[string]int32{} // build ID -> mapping index
	for i := 1; i < dict.MappingTable().Len(); i++ {
		for _, ai := range dict.MappingTable().At(i).AttributeIndices().All() {
			a := dict.AttributeTable().At(int(ai))
			if profileschema.Str(dict, a.KeyStrindex()) == profileschema.AttrBuildIDGNU {
				builds[a.Value().Str()] = int32(i)
			}
		}
	}
	if dict.MappingTable().Len() != 3 || len(builds) != 2 {
		t.Fatalf("%d mapping entries (with the zero one), builds %v: want one per build", dict.MappingTable().Len(), builds)
	}
	for i := 1; i < dict.LocationTable().Len(); i++ {
		loc := dict.LocationTable().At(i)
		want := builds["abc123"]
		if loc.Address()&0xff == 0x30 { // the frames of the replaced binary (i == 3)
			want = builds["def456"]
		}
		if loc.MappingIndex() != want {
			t.Errorf("location %#x in mapping %d, want %d", loc.Address(), loc.MappingIndex(), want)
		}
	}
}

// One pid can be two processes in an interval (the image it left at an
// exec and the new one, or a pid reused): each keeps its own resource.
func TestOnePIDTwoProcesses(t *testing.T) {
	b := New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), 15*time.Second, time.Second/19)
	host := &Host{Name: "h1"}
	shell := Process{PID: 7, ServiceName: "bash", ExeName: "bash", ExePath: "/usr/bin/bash", Host: host}
	ls := Process{PID: 7, ServiceName: "ls", ExeName: "ls", ExePath: "/usr/bin/ls", Host: host}
	other := Process{PID: 8, ServiceName: "api", ExeName: "api", ExePath: "/srv/api", Host: host}
	b.Add(ls, []Frame{{Address: 0x1000, Function: "main"}}, [16]byte{}, [8]byte{}, 2)
	b.Add(other, []Frame{{Address: 0x2000, Function: "serve"}}, [16]byte{}, [8]byte{}, 5)
	b.Add(shell, []Frame{{Address: 0x3000, Function: "execute_command"}}, [16]byte{}, [8]byte{}, 3)
	b.Add(ls, []Frame{{Address: 0x1000, Function: "main"}}, [16]byte{}, [8]byte{}, 1)
	if b.Len() != 2 {
		t.Errorf("Len() = %d, want 2 pids", b.Len())
	}
	pd := b.Profiles()
	dict := pd.Dictionary()
	var got []string
	profileschema.ForEachSample(pd, func(res pcommon.Resource, _ pprofile.Profile, s pprofile.Sample) {
		pid, _ := res.Attributes().Get(profileschema.AttrProcessPID)
		got = append(got, fmt.Sprintf("%d %s %s %d", pid.Int(), profileschema.ServiceName(res),
			profileschema.FoldedStack(dict, s), profileschema.SampleCount(s)))
	})
	// By pid, then in the order each process's first sample came.
	want := []string{"7 ls main 3", "7 bash execute_command 3", "8 api serve 5"}
	if !slices.Equal(got, want) {
		t.Errorf("samples by resource:\n got %q\nwant %q", got, want)
	}
}
