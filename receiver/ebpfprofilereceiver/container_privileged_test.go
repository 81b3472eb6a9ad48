//go:build privileged

package ebpfprofilereceiver

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
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
