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

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// MinimalCapabilities is what the agent needs, and all it needs, to sample,
// symbolize (user and kernel frames), name services and read build IDs of
// every process on the host as a non-root user. docs/security.md explains
// each; TestAgentRunsWithMinimalCapabilities proves the set is enough.
var MinimalCapabilities = []string{"bpf", "perfmon", "sys_ptrace", "syslog", "dac_read_search"}

// unprivilegedAgent is the agent started by setpriv as uid/gid 65534 with
// only caps (permitted, inheritable, ambient, bounding), exporting to a sink.
type unprivilegedAgent struct {
	*collector
	sink *profileSink
}

func startUnprivilegedAgent(t *testing.T, caps []string) *unprivilegedAgent {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatal("setpriv (util-linux) is needed to drop privileges")
	}
	// A copy of the binary and the config that uid 65534 can read.
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
	sink := newProfileSink(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`
receivers:
  ebpfprofile:
    frequency_hz: 99
    interval: 1s
    # Off: a second agent on this machine (make run, the soak) holds the
    # default port, and the overhead guard would lower the rate these
    # tests size their sample counts from.
    control:
      endpoint: ""
    max_cpu_percent: 0
processors:
  buildid:
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
      processors: [buildid]
      exporters: [otlphttp]
`, sink.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	set := "-all"
	for _, c := range caps {
		set += ",+" + c
	}
	c := &collector{out: &syncBuffer{}}
	c.cmd = exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		"--inh-caps="+set, "--ambient-caps="+set, "--bounding-set="+set, bin, "--config", cfg)
	c.cmd.Dir = dir
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", c.out.String())
		}
	})
	return &unprivilegedAgent{collector: c, sink: sink}
}

// kernelFrames counts kernel locations reached by samples that have a
// function name, and those that have none.
func kernelFrames(all []pprofile.Profiles) (named, unnamed int) {
	for _, pd := range all {
		dict := pd.Dictionary()
		locs := dict.LocationTable()
		for i := 1; i < locs.Len(); i++ {
			loc := locs.At(i)
			if !profileschema.IsKernelFrame(dict, loc) {
				continue
			}
			// A symbolized kernel frame is "function_[k]"; without a
			// symbol it is "[kernel.kallsyms]+0x...".
			if strings.HasSuffix(profileschema.FrameName(dict, loc), "_[k]") {
				named++
			} else {
				unnamed++
			}
		}
	}
	return named, unnamed
}

// checkAgentSees runs the C workload (as root: the agent must read another
// user's process) and checks the agent's output: the workload's samples with
// its service name, symbolized user frames in the expected shares, a build
// ID, and named kernel frames.
func checkAgentSees(t *testing.T, a *unprivilegedAgent) []string {
	t.Helper()
	var problems []string
	w := testworkload.Start(t, testworkload.BuildC(t), "3", "OTEL_SERVICE_NAME=e2e-caps")
	_ = w.Wait()
	a.stop(t)
	all := a.sink.profiles()
	st := testworkload.TallyProcess(all, w.Process.Pid)
	if st.Service != "e2e-caps" {
		problems = append(problems, fmt.Sprintf("service.name %q, want e2e-caps (needs /proc/PID/environ)", st.Service))
	}
	minSamples := int64(0.25 * testworkload.ExpectedSamples(w, 99))
	if err := st.CheckShares("hot_a", "hot_b", "dispatch", minSamples, 0.8); err != nil {
		problems = append(problems, "user frames: "+err.Error())
	}
	// The last batch may come after the process exited, without a build ID.
	ids := tallyService(all, "e2e-caps", time.Minute).buildIDs
	delete(ids, "")
	if len(ids) != 1 {
		problems = append(problems, fmt.Sprintf("build IDs %v, want one (needs /proc/PID/exe)", ids))
	}
	if named, unnamed := kernelFrames(all); named == 0 || unnamed > named/10 {
		problems = append(problems, fmt.Sprintf("kernel frames: %d symbolized, %d not (needs /proc/kallsyms addresses)", named, unnamed))
	}
	return problems
}

// The agent runs as nobody with only MinimalCapabilities and still samples,
// symbolizes user and kernel frames, names the service and reads build IDs
// of a root-owned process.
func TestAgentRunsWithMinimalCapabilities(t *testing.T) {
	a := startUnprivilegedAgent(t, MinimalCapabilities)
	waitFor(t, "the unprivileged agent to start sampling", 60*time.Second, func() bool {
		return strings.Contains(a.out.String(), "sampling every CPU")
	})
	for _, p := range checkAgentSees(t, a) {
		t.Error(p)
	}
}

// Each of MinimalCapabilities is needed: without CAP_BPF or CAP_PERFMON the
// agent refuses to start; without CAP_SYS_PTRACE it cannot read other users'
// /proc/PID/maps (no user symbols); without CAP_DAC_READ_SEARCH it cannot
// open /proc/PID/environ (mode 0400: no service name) or binaries in
// directories it may not search (no build ID); without CAP_SYSLOG kallsyms
// shows no addresses (no kernel symbols, with kernel.perf_event_paranoid=2).
func TestAgentMinimalCapabilitiesAreAllNeeded(t *testing.T) {
	for i, drop := range MinimalCapabilities {
		t.Run("without_"+drop, func(t *testing.T) {
			caps := append(append([]string(nil), MinimalCapabilities[:i]...), MinimalCapabilities[i+1:]...)
			a := startUnprivilegedAgent(t, caps)
			deadline := time.Now().Add(60 * time.Second)
			for !strings.Contains(a.out.String(), "sampling every CPU") {
				if !alive(a.collector) {
					if drop != "bpf" && drop != "perfmon" {
						t.Fatalf("the agent without CAP_%s did not start", strings.ToUpper(drop))
					}
					// Refused, as it must be, and for that reason.
					if want := "CAP_" + strings.ToUpper(drop); !strings.Contains(a.out.String(), want) {
						t.Errorf("the agent stopped without saying it lacks %s:\n%s", want, a.out.String())
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("the agent neither started nor exited")
				}
				time.Sleep(100 * time.Millisecond)
			}
			if drop == "bpf" || drop == "perfmon" {
				t.Fatalf("the agent started without CAP_%s", strings.ToUpper(drop))
			}
			if problems := checkAgentSees(t, a); len(problems) == 0 {
				t.Errorf("the agent without CAP_%s saw everything: the capability is not needed", strings.ToUpper(drop))
			} else {
				t.Logf("without CAP_%s: %v", strings.ToUpper(drop), problems)
			}
		})
	}
}
