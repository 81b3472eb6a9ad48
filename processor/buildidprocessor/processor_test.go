package buildidprocessor

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/xprocessor"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// The tests profile real processes on this host: a C program started for
// the test (GNU build ID, dynamically linked to libc) and the test binary
// itself (Go build ID). Expected IDs come from readelf and go tool buildid.

const testHost = "test-host"

type vma struct {
	lo, hi uint64
	path   string
}

// mapsOf reads /proc/PID/maps: the executable mappings with a file.
func mapsOf(t *testing.T, pid int) []vma {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		l, _ := strconv.ParseUint(lo, 16, 64)
		h, _ := strconv.ParseUint(hi, 16, 64)
		out = append(out, vma{l, h, strings.Join(fields[5:], " ")})
	}
	return out
}

var buildIDLine = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

func readelfGNU(t *testing.T, path string) string {
	t.Helper()
	b, err := exec.Command("readelf", "-n", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -n %s: %v\n%s", path, err, b)
	}
	m := buildIDLine.FindSubmatch(b)
	if m == nil {
		t.Fatalf("readelf found no build ID in %s", path)
	}
	return string(m[1])
}

// startC builds and starts a C program that sleeps until killed.
func startC(t *testing.T) (cmd *exec.Cmd, bin string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "sleeper.c")
	if err := os.WriteFile(src, []byte("#include <unistd.h>\nint main(void) { for (;;) pause(); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "sleeper")
	if b, err := exec.Command("cc", "-O1", "-Wl,--build-id=sha1", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, b)
	}
	cmd = exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Wait until the dynamic loader has mapped libc (a deadline, not a
	// count of polls: a loaded machine may take its time).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, v := range mapsOf(t, cmd.Process.Pid) {
			if strings.Contains(v.path, "libc") {
				return cmd, bin
			}
		}
	}
	t.Fatal("libc never mapped in the test process (30 s)")
	return nil, ""
}

// profileOf lays out one process like the receiver: a resource, one profile
// whose single stack has one frame in each given mapping.
func profileOf(pid int, exePath, host string, maps []vma) pprofile.Profiles {
	pd := pprofile.NewProfiles()
	dict := pd.Dictionary()
	dict.StringTable().Append("")
	dict.MappingTable().AppendEmpty()
	dict.LocationTable().AppendEmpty()
	dict.StackTable().AppendEmpty()
	dict.AttributeTable().AppendEmpty()
	st := dict.StackTable().AppendEmpty()
	for _, m := range maps {
		dict.StringTable().Append(m.path)
		mp := dict.MappingTable().AppendEmpty()
		mp.SetFilenameStrindex(int32(dict.StringTable().Len() - 1))
		mp.SetMemoryStart(m.lo)
		mp.SetMemoryLimit(m.hi)
		loc := dict.LocationTable().AppendEmpty()
		loc.SetMappingIndex(int32(dict.MappingTable().Len() - 1))
		loc.SetAddress(m.lo + 16)
		st.LocationIndices().Append(int32(dict.LocationTable().Len() - 1))
	}
	rp := pd.ResourceProfiles().AppendEmpty()
	attrs := rp.Resource().Attributes()
	attrs.PutStr(profileschema.AttrServiceName, "svc")
	attrs.PutInt(profileschema.AttrProcessPID, int64(pid))
	attrs.PutStr(profileschema.AttrProcessExePath, exePath)
	if host != "" {
		attrs.PutStr(profileschema.AttrHostName, host)
	}
	prof := rp.ScopeProfiles().AppendEmpty().Profiles().AppendEmpty()
	s := prof.Samples().AppendEmpty()
	s.SetStackIndex(1)
	s.Values().Append(1)
	return pd
}

type harness struct {
	p    xprocessor.Profiles
	sink *consumertest.ProfilesSink
	tel  *componenttest.Telemetry
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	cfg.HostName = testHost
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.ProfilesSink)
	p, err := NewFactory().CreateProfiles(context.Background(),
		processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Capabilities().MutatesData {
		t.Fatal("buildid mutates its input and must say so")
	}
	return &harness{p: p, sink: sink, tel: tel}
}

func (h *harness) run(t *testing.T, pd pprofile.Profiles) pprofile.Profiles {
	t.Helper()
	h.sink.Reset()
	if err := h.p.ConsumeProfiles(context.Background(), pd); err != nil {
		t.Fatal(err)
	}
	if len(h.sink.AllProfiles()) != 1 {
		t.Fatalf("got %d batches downstream, want 1", len(h.sink.AllProfiles()))
	}
	return h.sink.AllProfiles()[0]
}

func (h *harness) counter(t *testing.T, name string) int64 {
	t.Helper()
	m, err := h.tel.GetMetric("otelcol_processor_buildid_" + name)
	if err != nil {
		return 0
	}
	return m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
}

func str(attrs pcommon.Map, k string) string {
	v, _ := attrs.Get(k)
	return v.Str()
}

// mappingAttrs returns mapping i's attributes as key → value.
func mappingAttrs(pd pprofile.Profiles, i int) map[string]string {
	dict := pd.Dictionary()
	out := map[string]string{}
	idx := dict.MappingTable().At(i).AttributeIndices()
	for j := 0; j < idx.Len(); j++ {
		kv := dict.AttributeTable().At(int(idx.At(j)))
		out[profileschema.Str(dict, kv.KeyStrindex())] = kv.Value().Str()
	}
	return out
}

func TestAnnotatesNativeProcessAndItsMappings(t *testing.T) {
	cmd, bin := startC(t)
	pid := cmd.Process.Pid
	var exeMap, libcMap vma
	for _, v := range mapsOf(t, pid) {
		switch {
		case v.path == bin && exeMap.path == "":
			exeMap = v
		case strings.Contains(v.path, "libc") && libcMap.path == "":
			libcMap = v
		}
	}
	if exeMap.path == "" || libcMap.path == "" {
		t.Fatalf("maps of %d lack the executable or libc", pid)
	}
	vdso := vma{path: "[vdso]", lo: 1, hi: 2}
	h := newHarness(t)
	out := h.run(t, profileOf(pid, bin, testHost, []vma{exeMap, libcMap, vdso}))

	res := out.ResourceProfiles().At(0).Resource().Attributes()
	wantExe := readelfGNU(t, bin)
	if got := str(res, profileschema.AttrBuildIDGNU); got != wantExe {
		t.Errorf("resource GNU build ID %q, want %q", got, wantExe)
	}
	if got := str(res, profileschema.AttrBuildID); got != wantExe {
		t.Errorf("canonical build ID %q, want %q", got, wantExe)
	}
	if v, ok := res.Get(profileschema.AttrBinaryHasDebugInfo); !ok || v.Bool() {
		t.Errorf("has_debug_info = %v (%v), want false for a binary built without -g", v.AsRaw(), ok)
	}
	first, ok1 := res.Get(profileschema.AttrBinaryFirstSeen)
	last, ok2 := res.Get(profileschema.AttrBinaryLastSeen)
	if !ok1 || !ok2 || first.Int() == 0 || first.Int() > last.Int() {
		t.Errorf("first/last seen not recorded: %v %v", first.AsRaw(), last.AsRaw())
	}
	if got := mappingAttrs(out, 1)[profileschema.AttrBuildID]; got != wantExe {
		t.Errorf("executable mapping build ID %q, want %q", got, wantExe)
	}
	wantLibc := readelfGNU(t, libcMap.path)
	libc := mappingAttrs(out, 2)
	if libc[profileschema.AttrBuildID] != wantLibc || libc[profileschema.AttrBuildIDGNU] != wantLibc {
		t.Errorf("libc mapping attributes %v, want build ID %s", libc, wantLibc)
	}
	if got := mappingAttrs(out, 3); len(got) != 0 {
		t.Errorf("[vdso] mapping annotated: %v", got)
	}
	// The next interval of the same process: everything comes from the cache.
	misses := h.counter(t, "cache_misses")
	again := h.run(t, profileOf(pid, bin, testHost, []vma{exeMap, libcMap, vdso}))
	if h.counter(t, "cache_misses") != misses || h.counter(t, "cache_hits") < 2 {
		t.Errorf("second interval read binaries again: misses %d → %d, hits %d", misses, h.counter(t, "cache_misses"), h.counter(t, "cache_hits"))
	}
	if got := mappingAttrs(again, 2)[profileschema.AttrBuildID]; got != wantLibc {
		t.Errorf("libc from cache %q, want %q", got, wantLibc)
	}
	// Mappings already annotated keep one copy of each key.
	out.ResourceProfiles().At(0).Resource().Attributes().Remove(profileschema.AttrBuildID)
	out = h.run(t, out)
	if n := out.Dictionary().MappingTable().At(2).AttributeIndices().Len(); n != 2 {
		t.Errorf("libc mapping has %d attributes after two passes, want 2 (gnu, canonical)", n)
	}
}

func TestDeletedExecutableIsStillIdentified(t *testing.T) {
	cmd, bin := startC(t)
	want := readelfGNU(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	link, _ := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
	if !strings.HasSuffix(link, " (deleted)") {
		t.Fatalf("/proc/PID/exe = %q, expected a deleted binary", link)
	}
	h := newHarness(t)
	out := h.run(t, profileOf(cmd.Process.Pid, link, testHost, nil))
	if got := str(out.ResourceProfiles().At(0).Resource().Attributes(), profileschema.AttrBuildID); got != want {
		t.Errorf("build ID of deleted binary %q, want %q", got, want)
	}
}

func TestGoProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command("go", "tool", "buildid", exe).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool buildid: %v\n%s", err, b)
	}
	h := newHarness(t)
	out := h.run(t, profileOf(os.Getpid(), exe, testHost, nil))
	res := out.ResourceProfiles().At(0).Resource().Attributes()
	if got, want := str(res, profileschema.AttrBuildIDGo), strings.TrimSpace(string(b)); got != want {
		t.Errorf("Go build ID %q, want %q", got, want)
	}
	if str(res, profileschema.AttrBuildID) == "" {
		t.Errorf("no canonical build ID")
	}
}

// The receiver identifies a process's executable when it reads the process:
// that build ID is kept even when the process is gone by the time the
// interval is processed (a short-lived one), and gets its seen times; a live
// process's mappings are still resolved.
func TestReceiverBuildIDIsKept(t *testing.T) {
	cmd, bin := startC(t)
	maps := mapsOf(t, cmd.Process.Pid)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range map[string]int{"gone": gone.Process.Pid, "running": cmd.Process.Pid} {
		t.Run(name, func(t *testing.T) {
			pd := profileOf(pid, bin, testHost, maps)
			pd.ResourceProfiles().At(0).Resource().Attributes().PutStr(profileschema.AttrBuildID, "from-the-receiver")
			h := newHarness(t)
			out := h.run(t, pd)
			res := out.ResourceProfiles().At(0).Resource().Attributes()
			if got := str(res, profileschema.AttrBuildID); got != "from-the-receiver" {
				t.Errorf("build ID %q, want the receiver's", got)
			}
			if _, ok := res.Get(profileschema.AttrBinaryFirstSeen); !ok {
				t.Error("no first-seen time")
			}
			resolved := 0
			for i := 1; i < out.Dictionary().MappingTable().Len(); i++ {
				if len(mappingAttrs(out, i)) != 0 {
					resolved++
				}
			}
			if name == "running" && resolved == 0 {
				t.Error("the running process's mappings got no build IDs")
			}
		})
	}
}

func TestForeignOrGoneProcessesPassThroughUntouched(t *testing.T) {
	cmd, bin := startC(t)
	maps := mapsOf(t, cmd.Process.Pid)

	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// Processed once already (by an agent's processor): build ID and seen
	// times are there.
	annotated := profileOf(cmd.Process.Pid, bin, testHost, maps)
	annotated.ResourceProfiles().At(0).Resource().Attributes().PutStr(profileschema.AttrBuildID, "from-the-agent")
	annotated.ResourceProfiles().At(0).Resource().Attributes().PutInt(profileschema.AttrBinaryFirstSeen, 1)

	for name, tc := range map[string]struct {
		pd         pprofile.Profiles
		unresolved int64
	}{
		"other host":         {profileOf(cmd.Process.Pid, bin, "elsewhere", maps), 0},
		"pid gone":           {profileOf(gone.Process.Pid, bin, testHost, maps), 1},
		"pid runs other exe": {profileOf(cmd.Process.Pid, "/usr/bin/something-else", testHost, maps), 1},
		"already annotated":  {annotated, 0},
	} {
		t.Run(name, func(t *testing.T) {
			before := pprofile.NewProfiles()
			tc.pd.CopyTo(before)
			h := newHarness(t)
			out := h.run(t, tc.pd)
			if !out.ResourceProfiles().At(0).Resource().Attributes().Equal(before.ResourceProfiles().At(0).Resource().Attributes()) {
				t.Errorf("resource changed: %v", out.ResourceProfiles().At(0).Resource().Attributes().AsRaw())
			}
			for i := 1; i < out.Dictionary().MappingTable().Len(); i++ {
				if got := mappingAttrs(out, i); len(got) != 0 {
					t.Errorf("mapping %d annotated: %v", i, got)
				}
			}
			if got := h.counter(t, "unresolved_binaries"); got != tc.unresolved {
				t.Errorf("unresolved = %d, want %d", got, tc.unresolved)
			}
		})
	}
}

func TestMalformedDictionaryDoesNotPanic(t *testing.T) {
	exe, _ := os.Executable()
	pd := profileOf(os.Getpid(), exe, testHost, []vma{{lo: 1, hi: 2, path: exe}})
	dict := pd.Dictionary()
	dict.MappingTable().At(1).SetFilenameStrindex(999)
	dict.StackTable().AppendEmpty().LocationIndices().Append(77, -1)
	dict.LocationTable().AppendEmpty().SetMappingIndex(55)
	st := dict.StackTable().AppendEmpty()
	st.LocationIndices().Append(int32(dict.LocationTable().Len() - 1))
	prof := pd.ResourceProfiles().At(0).ScopeProfiles().At(0).Profiles().At(0)
	prof.Samples().AppendEmpty().SetStackIndex(int32(dict.StackTable().Len() - 2))
	prof.Samples().AppendEmpty().SetStackIndex(int32(dict.StackTable().Len() - 1))
	prof.Samples().AppendEmpty().SetStackIndex(1000)
	h := newHarness(t)
	out := h.run(t, pd)
	if str(out.ResourceProfiles().At(0).Resource().Attributes(), profileschema.AttrBuildID) == "" {
		t.Errorf("valid resource not annotated next to malformed samples")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{ProcRoot: "proc", CacheSize: 1}, "proc_root must be an absolute path"},
		{Config{ProcRoot: "/proc", CacheSize: 0}, "cache_size must be at least 1"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := createDefaultConfig().Validate(); err != nil {
		t.Errorf("default config: %v", err)
	}
}
