//go:build privileged

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// shippedPair is the shipped gateway and agent (distributions/*/config.yaml,
// unchanged) on free loopback ports, each with its own state directory
// under dir; both are killed at the end of the test, and their output is
// logged if it failed.
type shippedPair struct {
	gateway, agent           *shippedCollector
	dir                      string
	gatewayQuery, agentQuery string // host:port of their SQL endpoints
	agentMetrics             int    // port of the agent's self-metrics
}

func newShippedPair(t *testing.T) *shippedPair {
	t.Helper()
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", testport.Free(t)) }
	p := &shippedPair{dir: t.TempDir(), gatewayQuery: addr(), agentQuery: addr(), agentMetrics: testport.Free(t)}
	grpc := addr()
	p.gateway = &shippedCollector{t: t, role: "gateway", env: []string{
		"HOTPATH_STATE_DIR=" + filepath.Join(p.dir, "gateway"),
		"HOTPATH_GATEWAY_GRPC=" + grpc,
		"HOTPATH_GATEWAY_HTTP=" + addr(),
		fmt.Sprintf("HOTPATH_GATEWAY_METRICS=%d", testport.Free(t)),
		"HOTPATH_GATEWAY_QUERY=" + p.gatewayQuery,
	}}
	p.agent = &shippedCollector{t: t, role: "agent", env: []string{
		"HOTPATH_STATE_DIR=" + filepath.Join(p.dir, "agent"),
		"HOTPATH_GATEWAY_ENDPOINT=" + grpc,
		fmt.Sprintf("HOTPATH_AGENT_METRICS=%d", p.agentMetrics),
		"HOTPATH_AGENT_QUERY=" + p.agentQuery,
		"HOTPATH_AGENT_CONTROL=" + addr(),
	}}
	t.Cleanup(func() {
		for _, c := range []*shippedCollector{p.agent, p.gateway} {
			if c.cur != nil {
				c.kill()
			}
		}
		if t.Failed() {
			t.Logf("%s\n%s", p.gateway.output(), p.agent.output())
		}
	})
	return p
}

// The shipped configs, unchanged, profile a real process end to end: the
// agent samples it, stores it locally and sends it to the gateway, and SQL
// on the gateway's query endpoint returns exactly the samples the agent
// stored. A shipped YAML that does not start, or does not connect the two,
// fails here (TestCrashKill9 checks the same pair under kill -9).
func TestShippedConfigsProfileEndToEnd(t *testing.T) {
	const service = "e2e-shipped"
	p := newShippedPair(t)
	p.gateway.start()
	p.agent.start()
	waitFor(t, "the shipped agent to sample", 60*time.Second, func() bool {
		return strings.Contains(p.agent.cur.out.String(), "sampling every CPU")
	})

	w := testworkload.Start(t, testworkload.BuildC(t), "3", "OTEL_SERVICE_NAME="+service)
	_ = w.Wait()
	// Every window with the workload is written, and was handed to the
	// gateway exporter at the same moment.
	waitAgentWrotePast(t, p.agentQuery, 90*time.Second)
	local := storedSamples(p.agentQuery, "cpu_profile_samples_local", "service_id = '"+service+"'")
	// The shipped overhead guard (max_cpu_percent: 1) lowers the rate on a
	// busy machine, so no rate is expected: the workload must be there, and
	// the gateway must hold exactly what the agent stored.
	if local <= 0 {
		t.Fatalf("the agent stored no samples of %s (%d)", service, local)
	}
	// A clean stop of the agent waits for its in-flight sends; a clean stop
	// of the gateway writes its open 1-minute windows. Started again, the
	// gateway serves what it stored.
	p.agent.stop()
	p.gateway.stop()
	p.gateway.start()
	var stored int64
	waitFor(t, "the gateway's query endpoint to answer", 30*time.Second, func() bool {
		stored = storedSamples(p.gatewayQuery, "cpu_profile_summaries", "service_id = '"+service+"'")
		return stored >= 0
	})
	t.Logf("%s: agent local table %d samples, gateway cpu_profile_summaries %d", service, local, stored)
	if stored != local {
		t.Errorf("the gateway's cpu_profile_summaries hold %d samples of %s, the agent's local table %d", stored, service, local)
	}
}

// waitAgentWrotePast waits until an agent has written everything it sampled
// before this call to its local table (served at query): it runs a marker
// program and waits for the marker's samples. The agent drains the kernel
// and closes its windows in time order, so once a later sample is stored,
// every earlier one is, whatever the machine's load.
func waitAgentWrotePast(t *testing.T, query string, timeout time.Duration) {
	t.Helper()
	marker := fmt.Sprintf("e2e-marker-%d", time.Now().UnixNano())
	// It runs until it is stored: a program gone before the agent read
	// its environment would be stored under another name.
	m := testworkload.Start(t, testworkload.BuildC(t), "600", "OTEL_SERVICE_NAME="+marker)
	defer func() { _ = m.Process.Kill(); _ = m.Wait() }()
	for deadline := time.Now().Add(timeout); storedSamples(query, "cpu_profile_samples_local", "service_id = '"+marker+"'") <= 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			res, err := sqlquery.Client{Endpoint: query}.Query(context.Background(),
				"SELECT max(timestamp), count(*), utc_now() FROM cpu_profile_samples_local")
			t.Fatalf("the agent did not store the marker (pid %d, sampled after the workload) in %s; its table: %v %v", m.Process.Pid, timeout, res, err)
		}
	}
}
