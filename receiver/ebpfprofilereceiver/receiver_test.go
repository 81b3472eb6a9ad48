//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/profileschema"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// These tests load the real BPF program and sample real processes; they need
// root and fail (not skip) without it.

func startReceiver(t testing.TB, cfg *Config) (*profileReceiver, *consumertest.ProfilesSink) {
	t.Helper()
	sink := new(consumertest.ProfilesSink)
	set := receivertest.NewNopSettings(typeStr)
	r, err := newReceiver(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatalf("start receiver (these tests need root): %v", err)
	}
	return r, sink
}

// waitExitSeen waits until the receiver has handled the kernel's exit event
// of pid, or already dropped the process at a drain (a test that means "the
// process is gone before the drain" waits on that, not on a guessed delay).
func waitExitSeen(t testing.TB, r *profileReceiver, pid int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("the receiver to see pid %d exit", pid), func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e, ok := r.procs.entries[pid]
		return !ok || !e.exitedAt.IsZero()
	})
}

func TestSamplesRealProcessesWithSymbolsAndShares(t *testing.T) {
	cBin := testworkload.BuildC(t)
	goBin := testworkload.BuildGo(t, "")
	goStripped := testworkload.BuildGo(t, "-s -w")

	r, sink := startReceiver(t, testConfig())
	c := testworkload.Start(t, cBin, "3", "OTEL_SERVICE_NAME=spin-c")
	g := testworkload.Start(t, goBin, "3")
	gs := testworkload.Start(t, goStripped, "3", "OTEL_SERVICE_NAME=spin-go-stripped")
	for _, cmd := range []interface{ Wait() error }{c, g, gs} {
		_ = cmd.Wait()
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	all := sink.AllProfiles()
	for _, tc := range []struct {
		name, service, a, b, caller string
		cmd                         *exec.Cmd
		buildKey                    string // the build-ID kind the binary has
	}{
		{"c", "spin-c", "hot_a", "hot_b", "dispatch", c, profileschema.AttrBuildIDGNU},
		{"go", "spin_go", "main.hotA", "main.hotB", "main.dispatch", g, profileschema.AttrBuildIDGo},
		{"go stripped", "spin-go-stripped", "main.hotA", "main.hotB", "main.dispatch", gs, profileschema.AttrBuildIDGo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The executable's mapping names its build the way the
			// profiles conventions say, as read from the file itself.
			want, _, _, err := buildid.NewCache(4).Lookup(tc.cmd.Path)
			if err != nil {
				t.Fatal(err)
			}
			got := exeMappingAttrs(all, tc.cmd.Process.Pid, tc.cmd.Path)
			if got[profileschema.AttrBuildID] != want.Canonical() || got[tc.buildKey] == "" {
				t.Errorf("mapping of %s carries %v; want %s and %s=%s", tc.cmd.Path, got, tc.buildKey, profileschema.AttrBuildID, want.Canonical())
			}
			st := testworkload.TallyProcess(all, tc.cmd.Process.Pid)
			if st.Service != tc.service {
				t.Errorf("service.name = %q, want %q", st.Service, tc.service)
			}
			// Half the samples the process's CPU time calls for: every
			// sample of it is counted, allowing for timer slack.
			minSamples := int64(0.5 * testworkload.ExpectedSamples(tc.cmd, testConfig().FrequencyHz))
			if err := st.CheckShares(tc.a, tc.b, tc.caller, minSamples, 0.8); err != nil {
				t.Error(err)
			}
			// Shared libraries the loader mapped after exec are resolved too.
			// A sample or two inside the dynamic loader at start-up may hit
			// memory it maps and unmaps before anything can read the maps.
			if n := st.UnmappedSamples(); n > max(2, st.Total/50) {
				t.Errorf("%d samples have frames in no mapping:%s", n, st.Top(5))
			}
		})
	}
}

// A stripped C binary's functions have no names, but each is one frame:
// its start in the file, whichever of its instructions or call sites was
// sampled. Resolved afterwards through the unstripped build's function
// starts (what hotpath symbolize does with a debug file), its samples give
// the workload's known shares. Its own receiver, so that the workloads of
// TestSamplesRealProcessesWithSymbolsAndShares keep the CPU they had.
func TestStrippedCFunctionIsOneFrame(t *testing.T) {
	cBin := testworkload.BuildC(t)
	stripped := testworkload.Strip(t, cBin)
	r, sink := startReceiver(t, testConfig())
	cmd := testworkload.Start(t, stripped, "3", "OTEL_SERVICE_NAME=spin-c-stripped")
	_ = cmd.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := testworkload.TallyProcess(sink.AllProfiles(), cmd.Process.Pid).Renamed(testworkload.FunctionFrames(t, cBin, stripped))
	raw := profileschema.RawFramePrefix(stripped)
	var unnamed int64
	for stack, n := range st.Folded {
		if strings.Contains(stack, raw) {
			unnamed += n
		}
	}
	if unnamed > max(2, st.Total/100) {
		t.Errorf("%d of %d samples have a frame of %s that is not a function's start:%s", unnamed, st.Total, stripped, st.Top(5))
	}
	minSamples := int64(0.5 * testworkload.ExpectedSamples(cmd, testConfig().FrequencyHz))
	if err := st.CheckShares("hot_a", "hot_b", "dispatch", minSamples, 0.8); err != nil {
		t.Error(err)
	}
}

// A process excluded by the config leaves no trace in the output; an included
// one is kept.
func TestExcludeFilter(t *testing.T) {
	cBin := testworkload.BuildC(t)
	cfg := testConfig()
	cfg.Exclude.Services = []string{"excluded-*"}
	r, sink := startReceiver(t, cfg)
	ex := testworkload.Start(t, cBin, "1.5", "OTEL_SERVICE_NAME=excluded-spin")
	in := testworkload.Start(t, cBin, "1.5", "OTEL_SERVICE_NAME=kept-spin")
	_ = ex.Wait()
	_ = in.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := testworkload.TallyProcess(sink.AllProfiles(), ex.Process.Pid); st.Total != 0 {
		t.Errorf("excluded process has %d samples", st.Total)
	}
	if st := testworkload.TallyProcess(sink.AllProfiles(), in.Process.Pid); st.Total == 0 {
		t.Errorf("kept process has no samples")
	}
}

// A process that exits long before the interval ends keeps its symbols and
// its build ID: the receiver read its mappings and identified its executable
// when the kernel first reported it.
func TestShortLivedProcessKeepsFrames(t *testing.T) {
	cBin := testworkload.BuildC(t)
	cfg := testConfig()
	cfg.Interval = 5 * time.Second
	r, sink := startReceiver(t, cfg)
	p := testworkload.Start(t, cBin, "0.5")
	_ = p.Wait()
	// The process is gone before the drain, and the receiver knows it.
	waitExitSeen(t, r, p.Process.Pid)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := testworkload.TallyProcess(sink.AllProfiles(), p.Process.Pid)
	if st.Total == 0 {
		t.Fatal("no samples for the short-lived process")
	}
	if st.Leaf["hot_a"]+st.Leaf["hot_b"] == 0 {
		t.Errorf("short-lived process frames unresolved: %v", st.Leaf)
	}
	if st.Exe != "spin_c" {
		t.Errorf("process.executable.name = %q, want spin_c", st.Exe)
	}
	want, err := buildid.Read(cBin)
	if err != nil || want.Canonical() == "" {
		t.Fatalf("build ID of %s: %+v, %v", cBin, want, err)
	}
	if len(st.BuildIDs) != 1 || st.BuildIDs[want.Canonical()] != st.Total {
		t.Errorf("samples by build ID %v, want all %d under %s", st.BuildIDs, st.Total, want.Canonical())
	}
}

// exeMappingAttrs is the string attributes of the mapping of file exe that
// pid's samples reach.
func exeMappingAttrs(all []pprofile.Profiles, pid int, exe string) map[string]string {
	out := map[string]string{}
	for _, pd := range all {
		dict := pd.Dictionary()
		profileschema.ForEachSample(pd, func(res pcommon.Resource, _ pprofile.Profile, s pprofile.Sample) {
			if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); v.Int() != int64(pid) {
				return
			}
			for _, li := range dict.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
				m := dict.MappingTable().At(int(dict.LocationTable().At(int(li)).MappingIndex()))
				if profileschema.Str(dict, m.FilenameStrindex()) != exe {
					continue
				}
				for _, ai := range m.AttributeIndices().All() {
					a := dict.AttributeTable().At(int(ai))
					out[profileschema.Str(dict, a.KeyStrindex())] = a.Value().Str()
				}
			}
		})
	}
	return out
}
