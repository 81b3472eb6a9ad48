//go:build privileged

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// The real collector binary, started with a profiles pipeline and no feature
// gate flag, samples a C and a Go program and exports their symbolized
// profiles over OTLP/HTTP.
func TestAgentExportsSymbolizedProfiles(t *testing.T) {
	cBin := testworkload.BuildC(t)
	goBin := testworkload.BuildGo(t, "-s -w")
	sink := newProfileSink(t)
	col := startCollector(t, fmt.Sprintf(`
receivers:
  ebpfprofile:
    frequency_hz: 99
    interval: 2s
    max_cpu_percent: 0 # sample counts are checked: no guard under a loaded CI
    control:
      endpoint: ""
exporters:
  otlphttp:
    endpoint: %s
    compression: none
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      exporters: [otlphttp]
`, sink.URL))
	waitFor(t, "the agent to start sampling", 30*time.Second, func() bool {
		return strings.Contains(col.out.String(), "sampling every CPU")
	})

	c := testworkload.Start(t, cBin, "3", "OTEL_SERVICE_NAME=e2e-c")
	g := testworkload.Start(t, goBin, "3", "OTEL_SERVICE_NAME=e2e-go")
	_ = c.Wait()
	_ = g.Wait()
	col.stop(t)

	all := sink.profiles()
	for _, tc := range []struct {
		name, service, a, b, caller string
		cmd                         *exec.Cmd
	}{
		{"c", "e2e-c", "hot_a", "hot_b", "dispatch", c},
		{"go", "e2e-go", "main.hotA", "main.hotB", "main.dispatch", g},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := testworkload.TallyProcess(all, tc.cmd.Process.Pid)
			if st.Service != tc.service {
				t.Errorf("service.name = %q, want %q", st.Service, tc.service)
			}
			// Half the samples the process's CPU time calls for: every
			// sample of it is counted, allowing for timer slack.
			minSamples := int64(0.5 * testworkload.ExpectedSamples(tc.cmd, 99))
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

// A frequency over the continuous cap stops the collector before it starts,
// with one sentence saying what is wrong.
func TestAgentRefusesFrequencyOverCap(t *testing.T) {
	col := startCollector(t, `
receivers:
  ebpfprofile:
    frequency_hz: 1000
    control:
      endpoint: ""
exporters:
  debug:
service:
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      exporters: [debug]
`)
	done := make(chan error, 1)
	go func() { done <- col.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("collector exited 0 with frequency_hz: 1000")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("collector with frequency_hz: 1000 is still running")
	}
	if out := col.out.String(); !strings.Contains(out, "frequency_hz must be between 1 and 100") {
		t.Errorf("output does not explain the frequency cap:\n%s", out)
	}
}

// Without CAP_BPF/CAP_PERFMON the collector refuses to start and says what to
// do, in one sentence, instead of running without data.
func TestAgentRefusesWithoutPrivileges(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is needed to drop privileges")
	}
	// A copy that the unprivileged user can execute.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "otelcol-hotpath")
	data, err := os.ReadFile(collectorBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(`
receivers:
  ebpfprofile:
    control:
      endpoint: ""
exporters:
  debug:
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      exporters: [debug]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", bin, "--config", cfg)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("collector started without privileges:\n%s", out)
	}
	for _, want := range []string{"CAP_BPF", "CAP_PERFMON", "run as root"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output does not mention %q:\n%s", want, out)
		}
	}
}
