package e2e

import (
	"fmt"
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
		pid                         int
	}{
		{"c", "e2e-c", "hot_a", "hot_b", "dispatch", c.Process.Pid},
		{"go", "e2e-go", "main.hotA", "main.hotB", "main.dispatch", g.Process.Pid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := testworkload.TallyProcess(all, tc.pid)
			if st.Service != tc.service {
				t.Errorf("service.name = %q, want %q", st.Service, tc.service)
			}
			if err := st.CheckShares(tc.a, tc.b, tc.caller, 150, 0.08, 0.8); err != nil {
				t.Error(err)
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
