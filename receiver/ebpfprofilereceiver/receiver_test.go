//go:build privileged

package ebpfprofilereceiver

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
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
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// These tests load the real BPF program and sample real processes; they need
// root and fail (not skip) without it.

func startReceiver(t testing.TB, cfg *Config) (*profileReceiver, *consumertest.ProfilesSink) {
	t.Helper()
	return startReceiverWith(t, cfg, nil)
}

// startReceiverWith is startReceiver with before (if not nil) called on
// the receiver before it starts.
func startReceiverWith(t testing.TB, cfg *Config, before func(*profileReceiver)) (*profileReceiver, *consumertest.ProfilesSink) {
	t.Helper()
	sink := new(consumertest.ProfilesSink)
	set := receivertest.NewNopSettings(typeStr)
	r, err := newReceiver(set, cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(r)
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

// waitRead waits until the receiver has read pid (an entry with what was
// read of its memory map).
func waitRead(t testing.TB, r *profileReceiver, pid int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("the receiver to read pid %d", pid), func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[pid]
		return e != nil && e.snapshot != nil
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

// Every resource names the host: host.name as configured, host.id from the
// machine ID, host.arch and os.type (which the resourcedetection processor
// added before the receiver did).
func TestHostAttributes(t *testing.T) {
	raw, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		t.Fatalf("this test reads the machine ID the receiver reads: %v", err)
	}
	machineID := strings.TrimSpace(string(raw))
	wantArch := map[string]string{"amd64": "amd64", "arm64": "arm64"}[runtime.GOARCH]
	if machineID == "" || wantArch == "" {
		t.Fatalf("machine ID %q, GOARCH %s: the test expects a machine ID and amd64 or arm64", machineID, runtime.GOARCH)
	}
	cBin := testworkload.BuildC(t)
	cfg := testConfig()
	cfg.HostName = "test-node-7"
	r, sink := startReceiver(t, cfg)
	p := testworkload.Start(t, cBin, "0.5")
	_ = p.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		profileschema.AttrHostName: "test-node-7",
		profileschema.AttrHostID:   machineID,
		profileschema.AttrHostArch: wantArch,
		profileschema.AttrOSType:   "linux",
	}
	resources := 0
	for _, pd := range sink.AllProfiles() {
		for _, rp := range pd.ResourceProfiles().All() {
			attrs := rp.Resource().Attributes()
			if v, _ := attrs.Get(profileschema.AttrProcessPID); v.Int() != int64(p.Process.Pid) {
				continue
			}
			resources++
			for k, w := range want {
				if v, ok := attrs.Get(k); !ok || v.Str() != w {
					t.Errorf("%s = %q (set: %v), want %q", k, v.Str(), ok, w)
				}
			}
		}
	}
	if resources == 0 {
		t.Fatal("no profile of the workload")
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

// unknownFrameAddresses is the addresses of s's frames that FrameName calls
// UnknownFrame (no function, no mapping file).
func unknownFrameAddresses(dict pprofile.ProfilesDictionary, s pprofile.Sample) []uint64 {
	var out []uint64
	for _, li := range dict.StackTable().At(int(s.StackIndex())).LocationIndices().All() {
		if loc := dict.LocationTable().At(int(li)); profileschema.FrameName(dict, loc) == profileschema.UnknownFrame {
			out = append(out, loc.Address())
		}
	}
	return out
}

// burnC is the start of the test programs that work for a given time:
// burn(secs) keeps a CPU busy for secs seconds of wall-clock time.
const burnC = `#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void burn(double secs) {
	volatile unsigned long x = 0;
	for (double end = now() + secs; now() < end;)
		for (int i = 0; i < 1000000; i++)
			x += i;
}
`

// forkExecC forks children one after another. Each works in child_work for
// argv[2] seconds, waits for a byte on stdin (shared with the parent and
// the other children), then execs argv[3] (a copy of this program named
// execd), which works in after_exec_work for argv[4] seconds and exits. The
// parent prints where child_work is in its memory (and so in its
// children's, until they exec), then each child's pid, and waits for each
// child.
const forkExecC = burnC + `

__attribute__((noinline)) void child_work(double secs) { burn(secs); }
__attribute__((noinline)) void after_exec_work(double secs) { burn(secs); }
__attribute__((noinline)) void parent_work(double secs) { burn(secs); }

/* forker N CHILD_SECS EXECD EXECD_SECS [PARENT_SECS]: N children, one after
   another, each working CHILD_SECS, then exec'ing EXECD once a byte comes
   on stdin. With PARENT_SECS, forker first works that long (so that it is
   sampled and read), then waits for a byte before its first fork. With
   EXECD_HOLD in its environment, execd exits only once a byte comes after
   its work. */
int main(int argc, char **argv) {
	if (strcmp(basename(argv[0]), "execd") == 0) {
		char c;
		after_exec_work(atof(argv[1]));
		if (getenv("EXECD_HOLD") && read(0, &c, 1) != 1)
			return 125;
		return 0;
	}
	printf("%p\n", (void *)child_work);
	fflush(stdout);
	if (argc > 5) {
		char c;
		parent_work(atof(argv[5]));
		if (read(0, &c, 1) != 1)
			return 125;
	}
	for (int i = 0, n = atoi(argv[1]); i < n; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			char c;
			child_work(atof(argv[2]));
			if (read(0, &c, 1) != 1)
				_exit(126);
			execl(argv[3], argv[3], argv[4], (char *)0);
			_exit(127);
		}
		printf("%d\n", pid);
		fflush(stdout);
		waitpid(pid, 0, 0);
	}
	return 0;
}
`

// A forked child's samples from before its exec mostly reach a drain after
// the exec, when the process runs another program (or is gone). They keep
// the image they ran in: its function names and its service, not the new
// program's (whose layout their addresses do not fit) and not none. The new
// program's own samples are its own.
func TestSamplesFromBeforeAnExecKeepTheImageTheyRanIn(t *testing.T) {
	cfg := testConfig()
	r, sink := startReceiver(t, cfg)
	f := startForker(t, "8", "0.3", "0.1")
	cmd, stdin, lines := f.cmd, f.stdin, f.lines
	var err error
	// Each child execs once the receiver has read it: a child read only
	// after its exec (its first-sample event handled late, on a loaded
	// machine) leaves nothing to name its samples from before, which is
	// not what this test is about.
	children := map[int64]bool{}
	var last int
	for lines.Scan() {
		if last, err = strconv.Atoi(lines.Text()); err != nil {
			t.Fatalf("child pid %q: %v", lines.Text(), err)
		}
		children[int64(last)] = true
		waitRead(t, r, last) // the child waits for the byte below to exec
		if _, err := stdin.Write([]byte{'\n'}); err != nil {
			t.Fatal(err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", cmd.Path, err)
	}
	if len(children) != 8 {
		t.Fatalf("forker printed %d child pids, want 8", len(children))
	}
	waitExitSeen(t, r, last)
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := f.tallyChildren(sink.AllProfiles(), children)
	// The children's CPU time (wait4 counts reaped descendants) is 3/4
	// child_work; half of what that calls for allows for timer slack.
	if want := int64(0.5 * 0.75 * testworkload.ExpectedSamples(cmd, cfg.FrequencyHz)); c.childWork < want {
		t.Errorf("%d samples in child_work under service forker, want at least %d (of %d samples of the children)", c.childWork, want, c.total)
	}
	// Every child was read before its exec; the allowance is for the odd
	// sample that none of the reads fits.
	c.check(t)
}

// A child the receiver reads only after its exec (its first-sample event
// handled late: a shell's child, which execs within microseconds, nearly
// always is) has no image of its own from before the exec. It ran its
// parent's until then, and its samples from before are named against the
// parent's, under the parent's service. The test holds the receiver's
// process table while the child works and execs, as a reader busy with
// other processes would keep its event waiting.
func TestSamplesFromBeforeAnExecOfAChildReadAfterItHaveItsParentsImage(t *testing.T) {
	r, sink := startReceiver(t, testConfig())
	// forker works 0.2 s in parent_work (sampled, so read), then waits for
	// a byte to fork its child; the child works 0.3 s in child_work, waits
	// for a byte and execs execd, which works 0.3 s and waits for a byte
	// to exit: it stays until the receiver has read it (on a loaded
	// machine the held table's queue can take longer than its work, and an
	// execd gone before its read has no image to name its own samples).
	t.Setenv("EXECD_HOLD", "1")
	f := startForker(t, "1", "0.3", "0.3", "0.2")
	waitRead(t, r, f.cmd.Process.Pid)
	r.procs.mu.Lock()
	held := true
	release := func() {
		if held {
			held = false
			r.procs.mu.Unlock()
		}
	}
	defer release()
	if _, err := f.stdin.Write([]byte("\n\n")); err != nil {
		t.Fatal(err)
	}
	if !f.lines.Scan() {
		t.Fatalf("forker printed no child pid: %v", f.lines.Err())
	}
	child, err := strconv.Atoi(f.lines.Text())
	if err != nil {
		t.Fatalf("child pid %q: %v", f.lines.Text(), err)
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("child %d to exec execd", child), func() bool {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", child))
		if err != nil {
			t.Fatalf("child %d gone before it was seen to exec: %v", child, err)
		}
		return strings.TrimSpace(string(comm)) == "execd"
	})
	release()
	waitFor(t, 30*time.Second, fmt.Sprintf("the receiver to read child %d as execd", child), func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[child]
		return e != nil && e.snapshot != nil && e.resource.ExeName == "execd"
	})
	if _, err := f.stdin.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Wait(); err != nil {
		t.Fatalf("%s: %v", f.cmd.Path, err)
	}
	waitExitSeen(t, r, child)
	r.procs.mu.Lock()
	left := r.procs.left[child]
	r.procs.mu.Unlock()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A read that began between the child's change of name and the end
	// of its exec found the new image and is kept as the image left: the
	// parent's is tried after it. (A drain since may have let go of both.)
	t.Logf("child %d: at the end, an image of its own kept from the exec: %t; its parent's: %t", child, left.entry != nil, left.parent != 0)
	c := f.tallyChildren(sink.AllProfiles(), map[int64]bool{int64(child): true})
	// 0.3 s of child_work (wall clock) at 99 Hz is about 30 samples, fewer
	// on a busy machine; without its parent's image, none is named.
	if c.childWork == 0 {
		t.Errorf("no sample in child_work under service forker (of %d samples of the child)", c.total)
	}
	c.check(t)
}

// goneC works in its own code for argv[1] seconds and exits.
const goneC = burnC + `
__attribute__((noinline)) void own_work(double secs) { burn(secs); }

int main(int argc, char **argv) {
	own_work(atof(argv[1]));
	return 0;
}
`

// A program gone before the receiver could read it (a shell's short
// commands exit within milliseconds of their first sample, before their
// reader gets to them on a busy node) has its samples named from the
// executable files the kernel saw it map, with the tables a read of an
// earlier process of those files put in memory. The test holds the
// receiver's process table while the program runs and exits, as a reader
// busy with other processes keeps its first-sample event waiting.
func TestProgramGoneBeforeItsReadIsNamedFromTheFilesItMapped(t *testing.T) {
	var tt *componenttest.Telemetry
	r, sink := startReceiverWithoutDrainWith(t, func(r *profileReceiver) { r.metrics, tt = testSelfMetrics(t) })
	// -O1 omits frame pointers: reading the first run attaches the
	// program's unwind table, which loads its symbol table too.
	bin := testworkload.CompileC(t, "goneprog", []byte(goneC), "-O1")
	first := exec.Command(bin, "30")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Process.Kill(); _ = first.Wait() })
	waitRead(t, r, first.Process.Pid)
	waitFor(t, 30*time.Second, "the first run's unwinding decided", func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[first.Process.Pid]
		return e != nil && e.unwindDecided.Load()
	})
	_ = first.Process.Kill()
	_ = first.Wait()

	r.procs.mu.Lock()
	gone := exec.Command(bin, "0.3")
	err := gone.Start()
	if err == nil {
		err = gone.Wait()
	}
	r.procs.mu.Unlock()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	pid := gone.Process.Pid
	// Its exit event gives its entry a snapshot of the files it mapped.
	waitFor(t, 30*time.Second, fmt.Sprintf("the receiver to handle pid %d's exit and name it from the files it mapped", pid), func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[pid]
		return e != nil && !e.exitedAt.IsZero() && e.snapshot != nil
	})
	// Counted (with other processes of the machine gone before their read).
	waitFor(t, 30*time.Second, "a process gone before its read counted as named", func() bool {
		m, err := tt.GetMetric("otelcol_receiver_ebpfprofile_processes_gone_before_read")
		if err != nil {
			return false
		}
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			if v, _ := p.Attributes.Value("outcome"); v.AsString() == "named" && p.Value > 0 {
				return true
			}
		}
		return false
	})
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tally := testworkload.TallyProcess(sink.AllProfiles(), pid)
	var named int64
	var unnamed testworkload.Tally
	for stack, n := range tally.Folded {
		frames := testworkload.UserFrames(stack)
		if slices.Contains(frames, "own_work") {
			named += n
		}
		if slices.Contains(frames, profileschema.UnknownFrame) {
			unnamed.Add(stack, n)
		}
	}
	t.Logf("pid %d, service %q: %d samples, %d in own_work, %d with an unnamed frame", pid, tally.Service, tally.Total, named, unnamed.Total)
	// 0.3 s at 99 Hz is about 30 samples, fewer on a busy machine; with
	// no names from the files it mapped, every one is unnamed.
	if named == 0 {
		t.Errorf("no sample of pid %d in own_work (of %d); top stacks:%s", pid, tally.Total, tally.Top(5))
	}
	if unnamed.Total > max(2, tally.Total/10) {
		t.Errorf("%d of pid %d's %d samples have an unnamed frame:%s", unnamed.Total, pid, tally.Total, unnamed.Top(5))
	}
	if tally.Service != "goneprog" {
		t.Errorf("pid %d's service is %q, want its command name goneprog", pid, tally.Service)
	}
}

// forkerRun is a running forker (forkExecC) and its pipes.
type forkerRun struct {
	cmd   *exec.Cmd
	stdin io.Writer
	lines *bufio.Scanner
	// childWorkAt is child_work's address, forker's first line.
	childWorkAt uint64
}

// startForker compiles forkExecC as forker and execd (one program, two
// names) and starts forker with N CHILD_SECS EXECD EXECD_SECS and extra.
func startForker(t *testing.T, n, childSecs, execdSecs string, extra ...string) forkerRun {
	t.Helper()
	forker := testworkload.CompileC(t, "forker", []byte(forkExecC), "-O1", "-fno-omit-frame-pointer")
	execd := filepath.Join(filepath.Dir(forker), "execd")
	bin, err := os.ReadFile(forker)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(execd, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(forker, append([]string{n, childSecs, execd, execdSecs}, extra...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("forker printed nothing: %v", lines.Err())
	}
	at, err := strconv.ParseUint(strings.TrimPrefix(lines.Text(), "0x"), 16, 64)
	if err != nil {
		t.Fatalf("child_work's address %q: %v", lines.Text(), err)
	}
	return forkerRun{cmd: cmd, stdin: stdin, lines: lines, childWorkAt: at}
}

// forkedChildren is what a receiver emitted of a forker's children.
type forkedChildren struct {
	total, childWork, afterExec, unnamedBeforeExec int64
	wrong                                          map[string]int64   // "service: stack" of samples under the wrong service
	all                                            testworkload.Tally // "service: stack" of every sample, for a failure's message
	unmapped                                       testworkload.Tally
}

// tallyChildren counts the samples of the children (pids) in all: in
// child_work under forker's service, in after_exec_work under execd's, and
// from before an exec left unnamed (an unknown frame in forker's code).
func (f forkerRun) tallyChildren(all []pprofile.Profiles, children map[int64]bool) forkedChildren {
	// inForker: an address in forker's code (a few KiB), where every stack
	// from before an exec passes (main, child_work, burn).
	inForker := func(a uint64) bool { return a > f.childWorkAt-64<<10 && a < f.childWorkAt+64<<10 }
	var total, childWork, afterExec, unnamedBeforeExec int64
	wrong := map[string]int64{}
	var unmapped, every testworkload.Tally
	for _, pd := range all {
		dict := pd.Dictionary()
		profileschema.ForEachSample(pd, func(res pcommon.Resource, _ pprofile.Profile, s pprofile.Sample) {
			if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); !children[v.Int()] {
				return
			}
			n, service, stack := profileschema.SampleCount(s), profileschema.ServiceName(res), profileschema.FoldedStack(dict, s)
			total += n
			every.Add(service+": "+stack, n)
			frames := testworkload.UserFrames(stack)
			switch {
			case slices.Contains(frames, "child_work") && service == "forker":
				childWork += n
			case slices.Contains(frames, "after_exec_work") && service == "execd":
				afterExec += n
			case slices.Contains(frames, "child_work"), slices.Contains(frames, "after_exec_work"),
				service != "forker" && service != "execd":
				wrong[service+": "+stack] += n
			}
			if slices.ContainsFunc(unknownFrameAddresses(dict, s), inForker) {
				unnamedBeforeExec += n
			}
			if slices.Contains(frames, profileschema.UnknownFrame) {
				unmapped.Add(service+": "+stack, n)
			}
		})
	}
	return forkedChildren{total: total, childWork: childWork, afterExec: afterExec, unnamedBeforeExec: unnamedBeforeExec, wrong: wrong, unmapped: unmapped, all: every}
}

// check wants samples after the exec under execd, none under a wrong
// service, and at most a tenth of those from before an exec unnamed (the
// odd sample that no read fits). An execd gone before it could be read has
// its own unnamed frames, elsewhere.
func (c forkedChildren) check(t *testing.T) {
	t.Helper()
	if c.afterExec == 0 {
		t.Errorf("no sample in after_exec_work under service execd (of %d samples of the children)", c.total)
	}
	for stack, n := range c.wrong {
		t.Errorf("%d samples under the wrong service: %s", n, stack)
	}
	t.Logf("%d samples of the children: %d in child_work under forker, %d in after_exec_work under execd, %d from before an exec unnamed",
		c.total, c.childWork, c.afterExec, c.unnamedBeforeExec)
	if c.unnamedBeforeExec > max(2, (c.childWork+c.unnamedBeforeExec)/10) {
		t.Errorf("%d samples from before an exec (frames in forker's code) are unnamed, %d named; children's samples with frames in no mapping (%d):%s",
			c.unnamedBeforeExec, c.childWork, c.unmapped.Total, c.unmapped.Top(5))
	}
	if t.Failed() {
		t.Logf("the children's samples by service and stack:%s", c.all.Top(20))
	}
}
