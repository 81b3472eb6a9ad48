//go:build privileged

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/smalldisk"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// Fault tests: the real collector binary as agent and gateway, with the
// gateway down, restarted, killed, out of disk, or sharing its file.

// gatewayPorts are a gateway's loopback listeners.
type gatewayPorts struct{ grpc, http, query int }

func newGatewayPorts(t *testing.T) gatewayPorts {
	return gatewayPorts{grpc: testport.Free(t), http: testport.Free(t), query: testport.Free(t)}
}

// gatewayConfig receives OTLP on ports and stores 1-minute summaries in db.
// exporterExtra is YAML indented under the exporter (queue, retry); a
// "    query:" block in it replaces the default query settings.
func gatewayConfig(p gatewayPorts, db, exporterExtra string) string {
	query := fmt.Sprintf("    query:\n      endpoint: 127.0.0.1:%d", p.query)
	if q, ok := strings.CutPrefix(exporterExtra, "    query:\n"); ok {
		if !strings.Contains(q, "endpoint:") {
			q = fmt.Sprintf("      endpoint: 127.0.0.1:%d\n", p.query) + q
		}
		query, exporterExtra = "    query:\n"+strings.TrimRight(q, "\n"), ""
	}
	return fmt.Sprintf(`
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
exporters:
  duckdbprofile:
    tier: summary
    path: %s
%s
%s
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [otlp]
      exporters: [duckdbprofile]
`, p.grpc, p.http, db, query, exporterExtra)
}

// agentConfig samples at 99 Hz, sends every second to an observing sink and
// to the gateway's gRPC port through a retrying queue (persistent when
// queueDir is set).
func agentConfig(sinkURL string, gatewayGRPC int, db string, queueDir string) string {
	ext, storage, svcExt := "", "", ""
	if queueDir != "" {
		ext = fmt.Sprintf(`
extensions:
  file_storage/queue:
    directory: %s
    create_directory: true
`, queueDir)
		storage = "\n      storage: file_storage/queue"
		svcExt = "\n  extensions: [file_storage/queue]"
	}
	return fmt.Sprintf(`%s
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
  stackaggregator:
    window: 1s
    max_delay: 1s
exporters:
  duckdbprofile/local:
    tier: local
    path: %s
    query:
      enabled: false
  otlphttp/observe:
    endpoint: %s
    compression: none
  otlp_grpc/gateway:
    endpoint: 127.0.0.1:%d
    tls:
      insecure: true
    sending_queue:
      enabled: true%s
    retry_on_failure:
      enabled: true
      initial_interval: 200ms
      max_interval: 1s
      max_elapsed_time: 10m
service:%s
  telemetry:
    metrics:
      level: none
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      processors: [buildid, stackaggregator]
      exporters: [duckdbprofile/local, otlphttp/observe, otlp_grpc/gateway]
`, ext, db, sinkURL, gatewayGRPC, storage, svcExt)
}

// alive reports whether c's process is running (not exited, not a zombie).
func alive(c *collector) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func waitReady(t *testing.T, c *collector, what string) {
	t.Helper()
	waitFor(t, what+" to start", 60*time.Second, func() bool {
		return strings.Contains(c.out.String(), "Everything is ready")
	})
}

// storedSamples sums sample_count over rows matching where in the table,
// through the collector's read-only SQL endpoint; -1 when it cannot answer.
func storedSamples(endpoint, table, where string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := sqlquery.Client{Endpoint: endpoint}.Query(ctx,
		fmt.Sprintf("SELECT coalesce(sum(sample_count), 0) FROM %s WHERE %s", table, where))
	if err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return -1
	}
	n, err := strconv.ParseInt(fmt.Sprint(res.Rows[0][0]), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// settledTotal waits until service's total in the sink is positive and has
// not changed for quiet, and returns it.
func settledTotal(t *testing.T, sink *profileSink, service string, quiet time.Duration) int64 {
	t.Helper()
	var last int64 = -1
	since := time.Now()
	waitFor(t, "the agent to flush "+service, 60*time.Second, func() bool {
		n := tallyService(sink.profiles(), service, time.Minute).total
		if n != last {
			last, since = n, time.Now()
			return false
		}
		return n > 0 && time.Since(since) >= quiet
	})
	return last
}

// runWorkload runs the C workload for seconds under service and returns
// the fewest samples the agent (99 Hz) must have taken of it. What these
// tests check is that every sample the agent emitted reaches the gateway;
// this floor (a quarter of what its CPU time calls for: the machine is
// shared and busy) only proves the workload was profiled at all.
func runWorkload(t *testing.T, service, seconds string) int64 {
	t.Helper()
	cmd := testworkload.Start(t, testworkload.BuildC(t), seconds, "OTEL_SERVICE_NAME="+service)
	_ = cmd.Wait()
	return max(int64(0.25*testworkload.ExpectedSamples(cmd, 99)), 10)
}

// The gateway is down while the agent profiles; when it comes back, the
// agent's retrying queue delivers everything: the gateway stores exactly the
// samples the agent emitted.
func TestGatewayOutageAgentQueueDelivers(t *testing.T) {
	const service = "e2e-outage"
	dir := t.TempDir()
	ports := newGatewayPorts(t)
	sink := newProfileSink(t)
	agent := startCollector(t, agentConfig(sink.URL, ports.grpc, filepath.Join(dir, "agent.duckdb"), ""))
	waitFor(t, "the agent to start sampling", 30*time.Second, func() bool {
		return strings.Contains(agent.out.String(), "sampling every CPU")
	})

	minSamples := runWorkload(t, service, "3")
	sent := settledTotal(t, sink, service, 3*time.Second)
	if sent < minSamples {
		t.Fatalf("agent emitted only %d samples of %s; its CPU time calls for at least %d", sent, service, minSamples)
	}
	// The agent has been failing to reach the gateway all along.
	if out := agent.out.String(); !strings.Contains(out, "connection refused") && !strings.Contains(out, "Exporting failed") {
		t.Logf("agent log does not show the outage yet")
	}

	gateway := startCollector(t, gatewayConfig(ports, filepath.Join(dir, "gateway.duckdb"), ""))
	waitReady(t, gateway, "the gateway")
	query := fmt.Sprintf("127.0.0.1:%d", ports.query)
	where := fmt.Sprintf("service_id = '%s'", service)
	var stored int64
	waitFor(t, "the gateway to store what the agent queued", 60*time.Second, func() bool {
		stored = storedSamples(query, "cpu_profile_summaries", where)
		return stored >= sent
	})
	agent.stop(t)
	gateway.stop(t)
	if stored != sent {
		t.Errorf("gateway stored %d samples of %s, agent emitted %d", stored, service, sent)
	}
}

// The agent is restarted while the gateway is down: its file_storage queue
// survives the restart and the new agent delivers the old agent's data.
func TestAgentRestartDuringOutageKeepsPersistentQueue(t *testing.T) {
	const service = "e2e-restart"
	dir := t.TempDir()
	ports := newGatewayPorts(t)
	sink := newProfileSink(t)
	queueDir := filepath.Join(dir, "queue")
	cfg := agentConfig(sink.URL, ports.grpc, filepath.Join(dir, "agent.duckdb"), queueDir)
	agent := startCollector(t, cfg)
	waitFor(t, "the agent to start sampling", 30*time.Second, func() bool {
		return strings.Contains(agent.out.String(), "sampling every CPU")
	})
	minSamples := runWorkload(t, service, "3")
	sent := settledTotal(t, sink, service, 3*time.Second)
	if sent < minSamples {
		t.Fatalf("agent emitted only %d samples of %s; its CPU time calls for at least %d", sent, service, minSamples)
	}
	agent.stop(t)
	entries, _ := os.ReadDir(queueDir)
	if len(entries) == 0 {
		t.Fatalf("the persistent queue directory %s is empty after the agent stopped", queueDir)
	}

	// A new agent process on the same queue, then the gateway.
	agent2 := startCollector(t, cfg)
	waitReady(t, agent2, "the restarted agent")
	gateway := startCollector(t, gatewayConfig(ports, filepath.Join(dir, "gateway.duckdb"), ""))
	waitReady(t, gateway, "the gateway")
	query := fmt.Sprintf("127.0.0.1:%d", ports.query)
	where := fmt.Sprintf("service_id = '%s'", service)
	var stored int64
	waitFor(t, "the gateway to store the first agent's queue", 60*time.Second, func() bool {
		stored = storedSamples(query, "cpu_profile_summaries", where)
		return stored >= sent
	})
	agent2.stop(t)
	gateway.stop(t)
	if stored != sent {
		t.Errorf("gateway stored %d samples of %s, the first agent emitted %d", stored, service, sent)
	}
}

// batchRequest is one OTLP request of service with stacks distinct stacks
// of one sample each: a batch is stored whole or not at all, so a partial
// one shows up as a total other than stacks.
func batchRequest(service string, stacks int, at time.Time) []byte {
	b := hostileotlp.NewBuilder()
	p := b.Process(map[string]any{profileschema.AttrServiceName: service}, at)
	for i := 0; i < stacks; i++ {
		hostileotlp.Sample(p, b.FrameStack(fmt.Sprintf("leaf_%d", i), fmt.Sprintf("mid_%d", i%17), "main"), 1)
	}
	body, err := pprofileotlp.NewExportRequestFromProfiles(b.PD).MarshalProto()
	if err != nil {
		panic(err)
	}
	return body
}

// postProfiles sends one OTLP/HTTP request; nil means the collector
// acknowledged it.
func postProfiles(url string, body []byte) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Post(url+"/v1development/profiles", "application/x-protobuf", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %s", resp.Status)
	}
	return nil
}

// batchTotals is sum(sample_count) per service of the batch-* services.
func batchTotals(t *testing.T, endpoint string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := sqlquery.Client{Endpoint: endpoint}.Query(ctx,
		`SELECT service_id, sum(sample_count) FROM cpu_profile_summaries WHERE service_id LIKE 'batch-%' GROUP BY service_id`)
	if err != nil {
		t.Fatalf("query %s: %v", endpoint, err)
	}
	out := map[string]int64{}
	for _, r := range res.Rows {
		n, _ := strconv.ParseInt(fmt.Sprint(r[1]), 10, 64)
		out[fmt.Sprint(r[0])] = n
	}
	return out
}

// The gateway is killed with SIGKILL while it writes. Restarted on the same
// file it opens it (integrity checked at open), every batch it acknowledged
// is there in full, and no batch is there in part.
func TestGatewayKilledDuringWritesReopensWithWholeBatches(t *testing.T) {
	const stacks = 400
	dir := t.TempDir()
	db := filepath.Join(dir, "gateway.duckdb")
	ports := newGatewayPorts(t)
	// No queue: the receiver answers after the batch is committed, so an
	// acknowledged batch must survive the kill.
	synchronous := "    sending_queue:\n      enabled: false"
	gateway := startCollector(t, gatewayConfig(ports, db, synchronous))
	waitReady(t, gateway, "the gateway")
	url := fmt.Sprintf("http://127.0.0.1:%d", ports.http)

	var acked sync.Map // service → true
	var nAcked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				service := fmt.Sprintf("batch-%d-%d", w, i)
				if err := postProfiles(url, batchRequest(service, stacks, time.Now())); err != nil {
					return // the gateway is gone
				}
				acked.Store(service, true)
				nAcked.Add(1)
			}
		}()
	}
	waitFor(t, "20 batches to be acknowledged", 60*time.Second, func() bool { return nAcked.Load() >= 20 })
	if err := gateway.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = gateway.cmd.Wait()
	close(stop)
	wg.Wait()

	restarted := startCollector(t, gatewayConfig(ports, db, synchronous))
	waitReady(t, restarted, "the restarted gateway")
	got := batchTotals(t, fmt.Sprintf("127.0.0.1:%d", ports.query))
	for service, n := range got {
		if n != stacks {
			t.Errorf("batch %s is stored in part: %d of %d samples", service, n, stacks)
		}
	}
	missing := 0
	acked.Range(func(k, _ any) bool {
		if got[k.(string)] == 0 {
			missing++
			t.Errorf("acknowledged batch %s is missing after the restart", k)
		}
		return true
	})
	t.Logf("%d batches acknowledged before the kill, %d stored after the restart", nAcked.Load(), len(got))
	// The restarted gateway takes writes.
	if err := postProfiles(url, batchRequest("batch-after", stacks, time.Now())); err != nil {
		t.Fatalf("write after restart: %v", err)
	}
	if n := batchTotals(t, fmt.Sprintf("127.0.0.1:%d", ports.query))["batch-after"]; n != stacks {
		t.Errorf("batch written after the restart holds %d samples, want %d", n, stacks)
	}
}

// The gateway's disk fills up: writes fail with errors (logged, no crash),
// the exporter's queue keeps the data, and once space returns everything
// sent meanwhile is stored.
func TestGatewayDiskFullRecovers(t *testing.T) {
	const stacks = 300
	dir := smalldisk.Mount(t, 24<<20)
	ports := newGatewayPorts(t)
	retrying := `    sending_queue:
      enabled: true
    retry_on_failure:
      enabled: true
      initial_interval: 200ms
      max_interval: 1s
      max_elapsed_time: 5m`
	gateway := startCollector(t, gatewayConfig(ports, filepath.Join(dir, "gateway.duckdb"), retrying))
	waitReady(t, gateway, "the gateway")
	url := fmt.Sprintf("http://127.0.0.1:%d", ports.http)
	query := fmt.Sprintf("127.0.0.1:%d", ports.query)
	if err := postProfiles(url, batchRequest("batch-before", stacks, time.Now())); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first batch to be stored", 30*time.Second, func() bool {
		return batchTotals(t, query)["batch-before"] == stacks
	})

	// Fill the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()

	const full = 10
	for i := 0; i < full; i++ {
		if err := postProfiles(url, batchRequest(fmt.Sprintf("batch-full-%d", i), stacks, time.Now())); err != nil {
			t.Fatalf("the gateway refused a batch while its disk is full (the queue should take it): %v", err)
		}
	}
	waitFor(t, "the gateway to report the full disk", 60*time.Second, func() bool {
		out := strings.ToLower(gateway.out.String())
		return strings.Contains(out, "no space left") || strings.Contains(out, "disk is full") || strings.Contains(out, "could not write")
	})
	if !alive(gateway) {
		t.Fatal("the gateway exited on a full disk")
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the queued batches to be stored once space returned", 60*time.Second, func() bool {
		got := batchTotals(t, query)
		for i := 0; i < full; i++ {
			if got[fmt.Sprintf("batch-full-%d", i)] != stacks {
				return false
			}
		}
		return true
	})
	got := batchTotals(t, query)
	for service, n := range got {
		if n != stacks {
			t.Errorf("batch %s holds %d samples, want %d", service, n, stacks)
		}
	}
	gateway.stop(t)
}

// A second collector on a DuckDB file another process holds stops at once
// and says why, in one sentence; the first keeps running.
func TestSecondCollectorOnHeldFileFailsClearly(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gateway.duckdb")
	first := startCollector(t, gatewayConfig(newGatewayPorts(t), db, ""))
	waitReady(t, first, "the first gateway")

	second := startCollector(t, gatewayConfig(newGatewayPorts(t), db, ""))
	done := make(chan error, 1)
	go func() { done <- second.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the second collector exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the second collector on a held file is still running:\n%s", second.out.String())
	}
	out := second.out.String()
	for _, want := range []string{db, "another process holds the file"} {
		if !strings.Contains(out, want) {
			t.Errorf("second collector's output does not say %q:\n%s", want, out)
		}
	}
	if !alive(first) {
		t.Fatal("the first collector stopped")
	}
	first.stop(t)
}
