//go:build privileged

package e2e

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// A gateway with labelfilter first: keys off the allow-list never leave it
// (neither to storage nor onwards), listed keys and every sample do.
func TestGatewayLabelFilterDropsUnlistedKeys(t *testing.T) {
	ports := newGatewayPorts(t)
	sink := newProfileSink(t)
	gw := startCollector(t, fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  labelfilter:
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
      processors: [labelfilter]
      exporters: [otlphttp]
`, ports.http, sink.URL))
	waitReady(t, gw, "the gateway")

	b := hostileotlp.NewBuilder()
	p := b.Process(map[string]any{
		profileschema.AttrServiceName:    "e2e-labels",
		profileschema.AttrK8sPodName:     "pod-1",
		profileschema.AttrProcessExeName: "app",
		profileschema.AttrProcessPID:     int64(42),
		"user.email":                     "someone@example.com",
		"http.request.header.cookie":     "secret",
	}, time.Now())
	hostileotlp.Sample(p, b.FrameStack("work", "main"), 5)
	body, err := pprofileotlp.NewExportRequestFromProfiles(b.PD).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	if err := postProfiles(fmt.Sprintf("http://127.0.0.1:%d", ports.http), body); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the filtered request downstream", 30*time.Second, func() bool { return len(sink.profiles()) > 0 })
	gw.stop(t)

	var keys []string
	for _, pd := range sink.profiles() {
		for _, rp := range pd.ResourceProfiles().All() {
			for k := range rp.Resource().Attributes().All() {
				keys = append(keys, k)
			}
		}
	}
	sort.Strings(keys)
	got := strings.Join(keys, ",")
	if want := "k8s.pod.name,process.executable.name,service.name"; got != want {
		t.Errorf("resource keys downstream: %s, want %s", got, want)
	}
	if n := tallyService(sink.profiles(), "e2e-labels", time.Minute).total; n != 5 {
		t.Errorf("%d samples downstream, want 5", n)
	}
}
