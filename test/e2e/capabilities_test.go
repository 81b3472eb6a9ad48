//go:build privileged

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// agentView is what an agent's output shows of the C workload, aspect by
// aspect; each field is "" when that aspect is right, else what is wrong.
type agentView struct {
	samples      string // the workload's samples landed at all
	userFrames   string // symbolized user frames in the expected shares
	service      string // service.name from its environment
	buildID      string // one GNU build ID
	kernelFrames string // named kernel frames
}

func (v agentView) problems() map[string]string {
	all := map[string]string{"samples": v.samples, "user frames": v.userFrames, "service": v.service, "build ID": v.buildID, "kernel frames": v.kernelFrames}
	for k, p := range all {
		if p == "" {
			delete(all, k)
		}
	}
	return all
}

// checkAgentSees runs the C workload (as root: the agent must read another
// user's process), stops the agent (which flushes) and checks its output.
func checkAgentSees(t *testing.T, a *unprivilegedAgent) agentView {
	t.Helper()
	var v agentView
	w := testworkload.Start(t, testworkload.BuildC(t), "3", "OTEL_SERVICE_NAME=e2e-caps")
	_ = w.Wait()
	a.stop(t)
	all := a.sink.profiles()
	st := testworkload.TallyProcess(all, w.Process.Pid)
	minSamples := int64(0.25 * testworkload.ExpectedSamples(w, 99))
	if st.Total < minSamples {
		v.samples = fmt.Sprintf("%d samples of the workload, want ≥ %d (a quarter of 99 Hz × its CPU time)", st.Total, minSamples)
	}
	if st.Service != "e2e-caps" {
		v.service = fmt.Sprintf("service.name %q, want e2e-caps (needs /proc/PID/environ)", st.Service)
	}
	if err := st.CheckShares("hot_a", "hot_b", "dispatch", minSamples, 0.8); err != nil {
		v.userFrames = err.Error()
	}
	// The workload's own samples (by pid: other programs named spin_c may
	// run on the machine; those the pid took before its exec are this test
	// binary's, with its build ID, and not tallied). The last batch may
	// come after the process exited, without a build ID.
	ids := map[string]bool{}
	for id := range st.BuildIDs {
		ids[id] = true
	}
	delete(ids, "")
	if len(ids) != 1 {
		v.buildID = fmt.Sprintf("build IDs %v, want one (needs /proc/PID/exe)", ids)
	}
	if named, unnamed := kernelFrames(all); named == 0 || unnamed > named/10 {
		v.kernelFrames = fmt.Sprintf("%d symbolized, %d not (needs /proc/kallsyms addresses)", named, unnamed)
	}
	return v
}

// startedSampling waits until the agent logs that it samples, or exits;
// false when it exited first.
func startedSampling(t *testing.T, a *unprivilegedAgent) bool {
	t.Helper()
	started := false
	waitFor(t, "the unprivileged agent to start sampling or exit", 60*time.Second, func() bool {
		started = strings.Contains(a.out.String(), "sampling every CPU")
		return started || !alive(a.collector)
	})
	return started
}

// securityDocCapabilities reads the capabilities docs/security.md tells
// operators to grant the agent (its table's first column).
func securityDocCapabilities(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "## Agent: the capabilities it needs")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("docs/security.md has no section on the agent's capabilities")
	}
	var caps []string
	for _, m := range regexp.MustCompile("(?m)^\\| `CAP_([A-Z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		caps = append(caps, strings.ToLower(m[1]))
	}
	return caps
}

// What docs/security.md lists is what these tests grant.
func TestSecurityDocListsTheTestedCapabilities(t *testing.T) {
	doc := securityDocCapabilities(t)
	slices.Sort(doc)
	tested := slices.Sorted(slices.Values(MinimalCapabilities))
	if !slices.Equal(doc, tested) {
		t.Fatalf("docs/security.md lists %v, the tests grant %v", doc, tested)
	}
	for _, c := range MinimalCapabilities {
		if _, ok := whatDropBreaks[c]; !ok {
			t.Errorf("no expectation for running without CAP_%s", strings.ToUpper(c))
		}
	}
}

// The agent runs as nobody with only MinimalCapabilities and samples a
// root-owned process completely: its samples land, user frames symbolized in
// the expected shares, service named from its environment, its build ID,
// kernel frames named; and it warns about no missing capability, nor that
// a part of the sampler could not be attached (process events, the kept
// list of the files processes map).
func TestAgentRunsWithMinimalCapabilities(t *testing.T) {
	a := startUnprivilegedAgent(t, MinimalCapabilities)
	if !startedSampling(t, a) {
		t.Fatalf("the agent with %v exited:\n%s", MinimalCapabilities, a.out.String())
	}
	v := checkAgentSees(t, a)
	for aspect, p := range v.problems() {
		t.Errorf("%s: %s", aspect, p)
	}
	out := a.out.String()
	for _, lost := range []string{"missing CAP_", "kernel frames will not be symbolized", "process exec/exit events unavailable", "mappings are not recorded"} {
		if strings.Contains(out, lost) {
			t.Errorf("the agent says %q although it has all of %v:\n%s", lost, MinimalCapabilities, out)
		}
	}
}

// whatDropBreaks is, per capability, the message the agent must print
// without it and the aspects of agentView that must then be wrong (all
// others must stay right: the agent still samples). nil aspects: the agent
// must refuse to start.
var whatDropBreaks = map[string]struct {
	says   string
	breaks []string
}{
	"bpf":             {"missing CAP_BPF: run as root or grant", nil},
	"perfmon":         {"missing CAP_PERFMON: run as root or grant", nil},
	"sys_ptrace":      {"missing CAP_SYS_PTRACE:", []string{"user frames", "build ID"}},
	"dac_read_search": {"missing CAP_DAC_READ_SEARCH:", []string{"service"}},
	"syslog":          {"needs CAP_SYSLOG", []string{"kernel frames"}},
}

// Each of MinimalCapabilities is needed, and its lack is named: without
// CAP_BPF or CAP_PERFMON the agent refuses to start saying which is
// missing; without any other it starts, says which is missing, samples the
// workload, and loses exactly what docs/security.md says it loses.
func TestAgentMinimalCapabilitiesAreAllNeeded(t *testing.T) {
	for i, drop := range MinimalCapabilities {
		t.Run("without_"+drop, func(t *testing.T) {
			want := whatDropBreaks[drop]
			caps := append(append([]string(nil), MinimalCapabilities[:i]...), MinimalCapabilities[i+1:]...)
			a := startUnprivilegedAgent(t, caps)
			started := startedSampling(t, a)
			if want.breaks == nil {
				if started {
					t.Fatalf("the agent started without CAP_%s", strings.ToUpper(drop))
				}
				if out := a.out.String(); !strings.Contains(out, want.says) {
					t.Fatalf("the agent stopped without saying %q:\n%s", want.says, out)
				}
				return
			}
			if !started {
				t.Fatalf("the agent without CAP_%s did not start:\n%s", strings.ToUpper(drop), a.out.String())
			}
			// Said at start, though not necessarily before sampling
			// starts (kallsyms is read beside it).
			waitFor(t, fmt.Sprintf("the agent without CAP_%s to say %q", strings.ToUpper(drop), want.says), 30*time.Second, func() bool {
				return strings.Contains(a.out.String(), want.says)
			})
			got := checkAgentSees(t, a).problems()
			t.Logf("without CAP_%s: %v", strings.ToUpper(drop), got)
			for _, aspect := range want.breaks {
				if got[aspect] == "" {
					t.Errorf("without CAP_%s, %s is still right: the capability is not needed for it", strings.ToUpper(drop), aspect)
				}
				delete(got, aspect)
			}
			for aspect, p := range got {
				t.Errorf("without CAP_%s, %s is also wrong (unrelated to the capability?): %s", strings.ToUpper(drop), aspect, p)
			}
		})
	}
}
