//go:build privileged

package e2e

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// serviceTally sums one service's samples (samples/count profiles) by window
// start and collects the build IDs seen for it.
type serviceTally struct {
	total    int64
	byWindow map[time.Time]int64
	buildIDs map[string]bool
}

func tallyService(all []pprofile.Profiles, service string, window time.Duration) serviceTally {
	st := serviceTally{byWindow: map[time.Time]int64{}, buildIDs: map[string]bool{}}
	for _, pd := range all {
		dict := pd.Dictionary()
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			rp := pd.ResourceProfiles().At(i)
			if profileschema.ServiceName(rp.Resource()) != service {
				continue
			}
			st.buildIDs[profileschema.BuildID(rp.Resource())] = true
			for j := 0; j < rp.ScopeProfiles().Len(); j++ {
				profiles := rp.ScopeProfiles().At(j).Profiles()
				for k := 0; k < profiles.Len(); k++ {
					p := profiles.At(k)
					if !profileschema.IsSampleCount(dict, p) {
						continue
					}
					for s := 0; s < p.Samples().Len(); s++ {
						sample := p.Samples().At(s)
						n := profileschema.SampleCount(sample)
						st.total += n
						st.byWindow[profileschema.SampleTime(p, sample).AsTime().Truncate(window)] += n
					}
				}
			}
		}
	}
	return st
}

// Agent → gateway over OTLP/gRPC on loopback: the gateway's rolled-up windows
// hold exactly the samples the agent sent for them, and a binary replaced on
// disk mid-run shows up as two build IDs of one service.
func TestGatewayRollupEqualsAgentWindows(t *testing.T) {
	const service = "e2e-rollup"
	v1 := testworkload.BuildC(t)
	v2 := testworkload.BuildC(t, "-O1") // different code, different GNU build ID

	agentSink, gatewaySink := newProfileSink(t), newProfileSink(t)
	grpcPort := testport.Free(t)
	gateway := startCollector(t, fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
processors:
  stackaggregator:
    window: 4s
    max_delay: 3s
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
      receivers: [otlp]
      processors: [stackaggregator]
      exporters: [otlphttp]
`, grpcPort, gatewaySink.URL))
	agent := startCollector(t, fmt.Sprintf(`
receivers:
  ebpfprofile:
    frequency_hz: 99
    interval: 1s
    max_cpu_percent: 0
    control:
      endpoint: ""
processors:
  buildid:
  stackaggregator:
    window: 1s
    max_delay: 1s
exporters:
  otlphttp/observe:
    endpoint: %s
    compression: none
  otlp_grpc/gateway:
    endpoint: 127.0.0.1:%d
    tls:
      insecure: true
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      processors: [buildid, stackaggregator]
      exporters: [otlphttp/observe, otlp_grpc/gateway]
`, agentSink.URL, grpcPort))
	waitFor(t, "the agent to start sampling", 30*time.Second, func() bool {
		return strings.Contains(agent.out.String(), "sampling every CPU")
	})

	first := testworkload.Start(t, v1, "3", "OTEL_SERVICE_NAME="+service)
	_ = first.Wait()
	// Redeploy: a new file renamed over the old path, as package managers do.
	staged := v1 + ".new"
	data, err := os.ReadFile(v2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(staged, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(staged, v1); err != nil {
		t.Fatal(err)
	}
	second := testworkload.Start(t, v1, "3", "OTEL_SERVICE_NAME="+service)
	_ = second.Wait()

	agent.stop(t)   // flushes the agent's open windows to both exporters
	gateway.stop(t) // flushes the gateway's open windows

	const window = 4 * time.Second
	sent := tallyService(agentSink.profiles(), service, window)
	got := tallyService(gatewaySink.profiles(), service, window)
	if want := 0.5 * (testworkload.ExpectedSamples(first, 99) + testworkload.ExpectedSamples(second, 99)); float64(sent.total) < want {
		t.Fatalf("agent sent only %d samples of %s, want ≥ %.0f (half of 99 Hz × its CPU time)", sent.total, service, want)
	}
	if got.total != sent.total {
		t.Errorf("gateway holds %d samples of %s, agent sent %d", got.total, service, sent.total)
	}
	for _, w := range sortedWindows(sent.byWindow, got.byWindow) {
		if sent.byWindow[w] != got.byWindow[w] {
			t.Errorf("window %s: gateway %d samples, agent sent %d", w.Format(time.TimeOnly), got.byWindow[w], sent.byWindow[w])
		}
	}
	delete(got.buildIDs, "")
	if len(got.buildIDs) != 2 {
		t.Errorf("gateway shows build IDs %v for %s; want two (binary replaced mid-run)", got.buildIDs, service)
	}
}

func sortedWindows(ms ...map[time.Time]int64) []time.Time {
	seen := map[time.Time]bool{}
	var ws []time.Time
	for _, m := range ms {
		for w := range m {
			if !seen[w] {
				seen[w] = true
				ws = append(ws, w)
			}
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].Before(ws[j]) })
	return ws
}
