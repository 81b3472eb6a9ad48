//go:build privileged

package ebpfprofilereceiver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr/cgrouptest"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

// TestContainerAttributionEndToEnd runs a real process in a real cgroup
// laid out as the kubelet's cgroupfs driver lays out a containerd
// container (/kubepods/burstable/pod<uid>/<container id>, here in the
// cgroup v1 pids hierarchy), samples it with the real receiver, stores the
// receiver's output with the real exporter and selects it back by pod and
// by container prefix: every sample of the process, and only those.
func TestContainerAttributionEndToEnd(t *testing.T) {
	const (
		podUID      = "0f3c2b1a-4d5e-4f60-8a9b-0c1d2e3f4a5b"
		containerID = "3b9f1c2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
	)
	dir := containerCgroup(t, podUID, containerID)
	bin := testworkload.BuildC(t)
	r, sink := startReceiver(t, testConfig())

	// The shell enters the cgroup, then becomes the workload.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" 3`, "sh", dir, bin)
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=in-pod")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("workload in the cgroup did not start: %q %v", line, err)
	}
	_ = cmd.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	all := sink.AllProfiles()
	var total int64
	for _, pd := range all {
		profileschema.ForEachSample(pd, func(res pcommon.Resource, p pprofile.Profile, s pprofile.Sample) {
			if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); v.Int() != int64(cmd.Process.Pid) || !profileschema.IsSampleCount(pd.Dictionary(), p) {
				return
			}
			if got := profileschema.ContainerID(res) + " " + profileschema.PodUID(res); got != containerID+" "+podUID {
				t.Fatalf("resource of pid %d says container and pod %q, want %q", cmd.Process.Pid, got, containerID+" "+podUID)
			}
			total += profileschema.SampleCount(s)
		})
	}
	if total < 20 {
		t.Fatalf("%d samples of the process in the cgroup, want at least 20", total)
	}

	// Stored by the real exporter, selected back by pod and by container.
	db := filepath.Join(t.TempDir(), "agent.duckdb")
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Tier, cfg.Path, cfg.Query.Enabled = "local", db, false
	ctx := context.Background()
	exp, err := f.CreateProfiles(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	for _, pd := range all {
		if err := exp.ConsumeProfiles(ctx, pd); err != nil {
			t.Fatal(err)
		}
	}
	if err := exp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := profilequery.Open(ctx, profilequery.Target{DB: db, Local: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rng := timerange.Range{Since: time.Now().Add(-time.Hour), Until: time.Now().Add(time.Minute)}
	for _, sel := range []profilequery.Selector{
		{Service: "in-pod", Range: rng, Pod: podUID},
		{Service: "in-pod", Range: rng, Container: containerID[:12]},
	} {
		p, err := profilequery.Load(ctx, src, sel)
		if err != nil {
			t.Fatalf("select pod %q container %q: %v", sel.Pod, sel.Container, err)
		}
		if p.Total() != total {
			t.Errorf("select pod %q container %q: %d samples, want the process's %d", sel.Pod, sel.Container, p.Total(), total)
		}
	}
	if _, err := profilequery.Load(ctx, src, profilequery.Selector{Service: "in-pod", Range: rng, Container: "ffff"}); err == nil {
		t.Error("another container's prefix selected samples")
	}
}

// containerCgroup creates the cgroup of a containerd container of a
// burstable pod as the kubelet's cgroupfs driver lays it out
// (/kubepods/burstable/pod<uid>/<container id>), in the cgroup v1 pids
// hierarchy where there is one, and removes it after the test.
func containerCgroup(t *testing.T, podUID, containerID string) string {
	t.Helper()
	root := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(root, "cgroup.procs")); err != nil {
		root = "/sys/fs/cgroup" // cgroup v2 only
	}
	dir := filepath.Join(root, "kubepods", "burstable", "pod"+podUID, containerID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create the container's cgroup (needs root): %v", err)
	}
	t.Cleanup(func() {
		for d := dir; d != root; d = filepath.Dir(d) {
			_ = os.Remove(d) // empty once the process exited; fails for a shared parent in use
		}
	})
	return dir
}

// joinThenExecC works in before_join, says "read me" and waits for a byte
// on stdin, writes its pid to the cgroup.procs file argv[1], works argv[2]
// seconds of CPU time in after_join, then execs itself as the container's
// program: a container's first process as runc init is one (it joins the
// container's cgroup, then execs the container's program). The program
// ("joiner program SECS") says "ready", works SECS seconds of CPU time in
// in_program and exits at a byte on stdin (the same pipe: it survives the
// exec).
const joinThenExecC = burnC + `
#include <string.h>
static double cpu_now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* secs of CPU time, not of the clock: on a machine busy with other work
   (make run beside the tests) 0.3 s of the clock got 4 samples, and 0.1 s
   before the join sometimes none, so that the receiver, which reads a
   process at its first sample, never read the joiner. */
static inline void burn_cpu(double secs) {
	volatile unsigned long x = 0;
	for (double end = cpu_now() + secs; cpu_now() < end;)
		x++;
}
__attribute__((noinline)) void before_join(double secs) { burn_cpu(secs); }
__attribute__((noinline)) void after_join(double secs) { burn_cpu(secs); }
__attribute__((noinline)) void in_program(double secs) { burn_cpu(secs); }

int main(int argc, char **argv) {
	char c;
	if (argc == 3 && strcmp(argv[1], "program") == 0) {
		printf("ready\n");
		fflush(stdout);
		in_program(atof(argv[2]));
		return read(0, &c, 1) == 1 ? 0 : 1;
	}
	before_join(0.1);
	printf("read me\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		return 1;
	FILE *f = fopen(argv[1], "w");
	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0)
		return 2;
	after_join(atof(argv[2]));
	execl("/proc/self/exe", argv[0], "program", argv[3], (char *)0);
	return 127;
}
`

// A process read before it joined a container's cgroup and exec'd the
// container's program: its samples from after the join (drained after the
// exec, named against the image it left) are the container's, not those of
// the cgroup it was read in. Its samples from before the join go to the
// container too (nothing in a sample tells them apart); the test does not
// look at them.
func TestSamplesBeforeAnExecHaveTheCgroupOfTheExec(t *testing.T) {
	const (
		podUID      = "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d"
		containerID = "c0ffee0123456789abcdef0123456789abcdef0123456789abcdef0123456789"
	)
	dir := containerCgroup(t, podUID, containerID)
	joiner := testworkload.CompileC(t, "joiner", []byte(joinThenExecC), "-O1", "-fno-omit-frame-pointer")

	// No drain until the receiver's last: the samples from after the join
	// are all drained after the exec. A drain between the join and the
	// exec gives them the entry read before the join, whose cgroup is not
	// read again without an exec. Intervals end on the wall clock, so a
	// short interval can end there.
	r, sink := startReceiverWithoutDrain(t)
	cmd := exec.Command(joiner, filepath.Join(dir, "cgroup.procs"), "0.3", "0.3")
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=joiner")
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
	lines := bufio.NewReader(stdout)
	if line, err := lines.ReadString('\n'); err != nil || line != "read me\n" {
		t.Fatalf("joiner did not start: %q %v", line, err)
	}
	pid := cmd.Process.Pid
	waitRead(t, r, pid)
	if _, err := stdin.Write([]byte{'\n'}); err != nil {
		t.Fatal(err)
	}
	if line, err := lines.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the container's program did not start: %q %v", line, err)
	}
	// The cgroup of the image left at the exec is read when the exec
	// event is handled: the program lives until then (on a loaded
	// machine the event may come after a short program's exit, and the
	// cgroup of the first read stays).
	waitFor(t, 30*time.Second, fmt.Sprintf("the receiver to handle pid %d's exec", pid), func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		_, handled := r.procs.left[pid]
		return handled
	})
	if _, err := stdin.Write([]byte{'\n'}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	r.procs.mu.Lock()
	drained := !r.procs.lastDrain.IsZero()
	r.procs.mu.Unlock()
	if drained {
		t.Fatal("a drain ran before the shutdown")
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	var afterJoin, program int64
	wrong := map[string]int64{} // "leaf in container and pod ...": samples
	for _, pd := range sink.AllProfiles() {
		profileschema.ForEachSample(pd, func(res pcommon.Resource, p pprofile.Profile, s pprofile.Sample) {
			if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); v.Int() != int64(pid) || !profileschema.IsSampleCount(pd.Dictionary(), p) {
				return
			}
			frames := testworkload.UserFrames(profileschema.FoldedStack(pd.Dictionary(), s))
			var n *int64
			switch {
			case slices.Contains(frames, "after_join"):
				n = &afterJoin
			case slices.Contains(frames, "in_program"):
				n = &program
			default:
				return
			}
			if got := profileschema.ContainerID(res) + " " + profileschema.PodUID(res); got != containerID+" "+podUID {
				wrong[fmt.Sprintf("%s in container and pod %q", frames[len(frames)-1], got)] += profileschema.SampleCount(s)
			}
			*n += profileschema.SampleCount(s)
		})
	}
	if len(wrong) > 0 {
		t.Errorf("samples outside the container and pod %s %s: %v", containerID, podUID, wrong)
	}
	// 0.3 s of CPU each at 99 Hz: about 30.
	t.Logf("%d samples in after_join, %d in the container's program", afterJoin, program)
	if afterJoin < 5 || program < 5 {
		t.Fatalf("%d samples in after_join and %d in the container's program, want at least 5 of each", afterJoin, program)
	}
}

// A process gone before the receiver could read it (a short-lived command
// in a container on a busy node) takes the container of the cgroup its
// first-sample event named, and so does the image a process left at an
// exec whose event was handled after the process was gone. Without a
// cgroup in the event both have none, as before.
func TestGoneBeforeItsReadTakesTheContainerOfItsCgroup(t *testing.T) {
	const (
		podUID      = "7f2c1d9e-4b6a-4f0e-9d3c-2a1b0c9d8e7f"
		containerID = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
	)
	// As the kubelet's cgroupfs driver lays out a containerd container of
	// a burstable pod; the id is what the kernel's lifecycle events carry
	// (sampler.TestEventsCarryTheProcessCgroup).
	_, cgroup := cgrouptest.Make(t, "kubepods/burstable/pod"+podUID+"/"+containerID)
	want := cgroupattr.Container{ID: containerID, PodUID: podUID}
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)

	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := gone.Process.Pid
	e := table.read(pid, 0, eventView{comm: "true", cgroup: cgroup})
	if e.snapshot != nil || e.resource.ServiceName != "true" || e.resource.Container != want {
		t.Errorf("gone before its read: service %q, container %+v; want true, %+v", e.resource.ServiceName, e.resource.Container, want)
	}
	if e := table.read(pid, 0, eventView{comm: "true"}); e.resource.Container != (cgroupattr.Container{}) {
		t.Errorf("gone before its read, no cgroup in the event: container %+v", e.resource.Container)
	}

	// Read while it ran (outside the container), gone when its exec event
	// is handled.
	left := exec.Command("sleep", "30")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = left.Process.Kill(); _ = left.Wait() })
	table.seen(left.Process.Pid, 0, eventView{})
	if e := table.lookup(left.Process.Pid); e.snapshot == nil || e.resource.Container != (cgroupattr.Container{}) {
		t.Fatalf("sleep read: %+v", e.resource)
	}
	_ = left.Process.Kill()
	_ = left.Wait()
	table.execed(left.Process.Pid, eventView{comm: "program", cgroup: cgroup})
	if c, _ := table.leftImagesOf(left.Process.Pid); c[0].resource.Container != want {
		t.Errorf("the image left at an exec handled after the process was gone: container %+v, want %+v", c[0].resource.Container, want)
	}
}
