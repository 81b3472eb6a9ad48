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
)

// The read-only SQL endpoint of the real binary: it refuses writes, DDL,
// multiple statements and file access; a token, when configured, is
// required; a non-loopback endpoint without a token does not start.
func TestQueryEndpointExposureRules(t *testing.T) {
	dir := t.TempDir()
	ports := newGatewayPorts(t)
	const token = "e2e-secret-token"
	gw := startCollector(t, gatewayConfig(ports, filepath.Join(dir, "gateway.duckdb"), "    query:\n      token: "+token))
	waitReady(t, gw, "the gateway")
	endpoint := fmt.Sprintf("127.0.0.1:%d", ports.query)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := (sqlquery.Client{Endpoint: endpoint}).Query(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("query without the token: %v, want 401", err)
	}
	if _, err := (sqlquery.Client{Endpoint: endpoint, Token: "wrong"}).Query(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("query with a wrong token: %v, want 401", err)
	}
	c := sqlquery.Client{Endpoint: endpoint, Token: token}
	if _, err := c.Query(ctx, "SELECT count(*) FROM cpu_profile_summaries"); err != nil {
		t.Fatalf("read-only query with the token: %v", err)
	}
	for _, stmt := range []string{
		"DELETE FROM cpu_profile_summaries",
		"DROP TABLE cpu_profile_summaries",
		"CREATE TABLE x (a INTEGER)",
		"INSERT INTO cpu_profile_summaries SELECT * FROM cpu_profile_summaries",
		"SELECT 1; DROP TABLE cpu_profile_summaries",
		"ATTACH '/tmp/other.duckdb' AS other",
		"COPY cpu_profile_summaries TO '/tmp/leak.csv'",
		"SELECT * FROM read_csv('/etc/passwd')",
		"INSTALL httpfs",
		"SET enable_external_access = true",
	} {
		if _, err := c.Query(ctx, stmt); err == nil {
			t.Errorf("the endpoint ran %q", stmt)
		}
	}
	if _, err := c.Query(ctx, "SELECT count(*) FROM cpu_profile_summaries"); err != nil {
		t.Errorf("the table is gone after the refused statements: %v", err)
	}
	gw.stop(t)

	// Beyond loopback without a token: refused at start, with one sentence.
	open := startCollector(t, gatewayConfig(newGatewayPorts(t), filepath.Join(dir, "open.duckdb"), "    query:\n      endpoint: 0.0.0.0:0"))
	done := make(chan error, 1)
	go func() { done <- open.cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("collector with a non-loopback query endpoint and no token exited 0")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("collector with a non-loopback query endpoint and no token is running")
	}
	if out := open.out.String(); !strings.Contains(out, "not a loopback address") || !strings.Contains(out, "token") {
		t.Errorf("output does not say a token is needed:\n%s", out)
	}
}
