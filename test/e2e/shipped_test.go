//go:build privileged

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// shippedRole is one of distributions/{agent,gateway}/config.yaml started
// as the README starts it, unmodified: only the ports and the state
// directory change, through the environment variables the file documents.
type shippedRole struct {
	role string
	env  []string
}

// shippedDeployment is a gateway and an agent on free loopback ports, sharing
// one state directory as `make run` does.
type shippedDeployment struct {
	stateDir                  string
	gatewayGRPC, gatewayQuery string
	agentQuery                string
	gateway, agent            shippedRole
}

func newShippedDeployment(t *testing.T) *shippedDeployment {
	t.Helper()
	addr := func() string { return fmt.Sprintf("127.0.0.1:%d", freePort(t)) }
	d := &shippedDeployment{stateDir: t.TempDir(), gatewayGRPC: addr(), gatewayQuery: addr(), agentQuery: addr()}
	d.gateway = shippedRole{"gateway", []string{
		"HOTPATH_STATE_DIR=" + d.stateDir,
		"HOTPATH_GATEWAY_GRPC=" + d.gatewayGRPC,
		"HOTPATH_GATEWAY_HTTP=" + addr(),
		fmt.Sprintf("HOTPATH_GATEWAY_METRICS=%d", freePort(t)),
		"HOTPATH_GATEWAY_QUERY=" + d.gatewayQuery,
	}}
	d.agent = shippedRole{"agent", []string{
		"HOTPATH_STATE_DIR=" + d.stateDir,
		"HOTPATH_GATEWAY_ENDPOINT=" + d.gatewayGRPC,
		fmt.Sprintf("HOTPATH_AGENT_METRICS=%d", freePort(t)),
		"HOTPATH_AGENT_QUERY=" + d.agentQuery,
		"HOTPATH_AGENT_CONTROL=" + addr(),
	}}
	return d
}

// start runs the collector with the role's shipped config and waits until
// it is ready.
func (r shippedRole) start(t *testing.T) *collector {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "distributions", r.role, "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c := startCollectorFile(t, path, r.env)
	waitFor(t, "the shipped "+r.role+" to start", 60*time.Second, func() bool {
		if !alive(c) {
			t.Fatalf("the shipped %s exited:\n%s", r.role, c.out.String())
		}
		return strings.Contains(c.out.String(), "Everything is ready")
	})
	return c
}

// The shipped configs, unmodified, profile a real process end to end: the
// agent samples it, stores it locally and sends it to the gateway, and SQL
// on the gateway's query endpoint returns exactly the samples the agent
// stored. A shipped YAML that does not start, or does not connect the two,
// fails here.
func TestShippedConfigsProfileEndToEnd(t *testing.T) {
	const service = "e2e-shipped"
	d := newShippedDeployment(t)
	gateway := d.gateway.start(t)
	agent := d.agent.start(t)
	waitFor(t, "the shipped agent to sample", 60*time.Second, func() bool {
		return strings.Contains(agent.out.String(), "sampling every CPU")
	})

	w := testworkload.Start(t, testworkload.BuildC(t), "3", "OTEL_SERVICE_NAME="+service)
	_ = w.Wait()
	// Every window with the workload is written, and was handed to the
	// gateway exporter at the same moment.
	waitAgentWrotePast(t, d.agentQuery, 90*time.Second)
	local := storedSamples(d.agentQuery, "cpu_profile_samples_local", "service_id = '"+service+"'")
	// The shipped overhead guard (max_cpu_percent: 1) lowers the rate on a
	// busy machine, so no rate is expected: the workload must be there, and
	// the gateway must hold exactly what the agent stored.
	if local <= 0 {
		t.Fatalf("the agent stored no samples of %s (%d)", service, local)
	}
	// A clean stop of the agent waits for its in-flight sends; a clean stop
	// of the gateway writes its open 1-minute windows. Started again, the
	// gateway serves what it stored.
	agent.stop(t)
	gateway.stop(t)
	d.gateway.start(t)
	var stored int64
	waitFor(t, "the gateway's query endpoint to answer", 30*time.Second, func() bool {
		stored = storedSamples(d.gatewayQuery, "cpu_profile_summaries", "service_id = '"+service+"'")
		return stored >= 0
	})
	t.Logf("%s: agent local table %d samples, gateway cpu_profile_summaries %d", service, local, stored)
	if stored != local {
		t.Errorf("the gateway's cpu_profile_summaries hold %d samples of %s, the agent's local table %d", stored, service, local)
	}
}

// waitAgentWrotePast waits until an agent has written everything it sampled
// before this call to its local table (served at query): it runs a marker
// program and waits for the marker's samples. The agent drains the
// kernel and closes its windows in time order, so once a later sample is
// stored, every earlier one is, whatever the machine's load.
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
