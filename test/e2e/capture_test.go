//go:build privileged

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// cliBinary is bin/hotpath; make test sets HOTPATH_CLI.
func cliBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HOTPATH_CLI")
	if bin == "" {
		t.Fatal("HOTPATH_CLI is not set: run these tests with `make test`, which builds bin/hotpath first")
	}
	return bin
}

// hotpath capture against the real agent: a high-frequency burst of one
// process, its folded stacks out, the agent's continuous rate untouched.
func TestCaptureThroughAgent(t *testing.T) {
	cBin := testworkload.BuildC(t)
	control := fmt.Sprintf("127.0.0.1:%d", testport.Free(t))
	agent := startCollector(t, fmt.Sprintf(`
receivers:
  ebpfprofile:
    interval: 2s
    control:
      endpoint: %s
exporters:
  debug:
    verbosity: basic
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      exporters: [debug]
`, control))
	waitFor(t, "the control endpoint", 30*time.Second, func() bool {
		return strings.Contains(agent.out.String(), "control endpoint listening")
	})
	// Long enough to outlive every step below on a loaded machine; the
	// cleanup kills it.
	w := testworkload.Start(t, cBin, "30", "OTEL_SERVICE_NAME=e2e-capture")

	run := func(args ...string) (string, string, error) {
		var out, errb bytes.Buffer
		cmd := exec.Command(cliBinary(t), append([]string{"capture", "--endpoint", control}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}
	out, stderr, err := run("--pid", fmt.Sprint(w.Process.Pid), "--duration", "1500ms", "--frequency", "299")
	if err != nil {
		t.Fatalf("hotpath capture: %v\n%s", err, stderr)
	}
	var tally testworkload.Tally
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(line, ' ')
		var n int64
		if _, err := fmt.Sscan(line[i+1:], &n); i < 0 || err != nil {
			t.Fatalf("not a folded line: %q", line)
		}
		tally.Add(line[:i], n)
	}
	if err := tally.CheckShares("hot_a", "hot_b", "dispatch", 100, 0.8); err != nil {
		t.Errorf("%v\nstderr: %s", err, stderr)
	}
	if !strings.Contains(stderr, "at 299 Hz") {
		t.Errorf("no summary on stderr: %q", stderr)
	}

	out, _, err = run("--list")
	if err != nil || !strings.Contains(out, "e2e-capture") {
		t.Errorf("capture --list: %v\n%s", err, out)
	}
	// Each process says how the kernel unwinds it (glibc without frame
	// pointers makes it dwarf on Debian 12; frame_pointer elsewhere).
	for line := range strings.Lines(out) {
		if strings.Contains(line, "e2e-capture") && !strings.Contains(line, " dwarf ") && !strings.Contains(line, " frame_pointer ") {
			t.Errorf("capture --list shows no unwinding mode: %q", line)
		}
	}
	_, stderr, err = run("--service", "no-such-service", "--duration", "1s")
	if err == nil || !strings.Contains(stderr, "services the agent knows") || !strings.Contains(stderr, "e2e-capture") {
		t.Errorf("unknown service: %v\n%s", err, stderr)
	}
	_, stderr, err = run("--pid", "1", "--frequency", "5000")
	if err == nil || !strings.Contains(stderr, "between 1 and 1000 Hz") {
		t.Errorf("frequency over the cap: %v\n%s", err, stderr)
	}
}
