package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

const probe = "SELECT tier, version, [1, 2] AS ids, NULL AS nothing FROM schema_version"

// startQueryExporter starts a real exporter of tier (through its factory)
// on a new file, serving queries on a free port, until the test ends (or
// exp.Shutdown).
func startQueryExporter(t *testing.T, tier string) (*duckdbprofileexporter.Config, xexporter.Profiles) {
	t.Helper()
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Tier = tier
	cfg.Path = filepath.Join(t.TempDir(), tier+".duckdb")
	cfg.Query.HTTP.NetAddr.Endpoint = testport.Addr(t)
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = exp.Shutdown(context.Background())
		}
	})
	return cfg, stopOnce{exp, &stopped}
}

// stopOnce is an exporter that the test's cleanup does not stop again once
// the test has.
type stopOnce struct {
	xexporter.Profiles
	stopped *bool
}

func (s stopOnce) Shutdown(ctx context.Context) error {
	*s.stopped = true
	return s.Profiles.Shutdown(ctx)
}

// TestSQLUsesEndpointThenFile runs a real exporter (through its factory),
// queries it over the endpoint while it holds the file, then queries the
// file directly once it has stopped.
func TestSQLUsesEndpointThenFile(t *testing.T) {
	cfg, exp := startQueryExporter(t, "local")

	out, stderr, code := runCLI(t, "sql", "--endpoint", cfg.Query.HTTP.NetAddr.Endpoint, "--db", cfg.Path, "--format", "csv", probe)
	if want := fmt.Sprintf("tier,version,ids,nothing\nlocal,%d,\"[1, 2]\",\n", profilequery.WritableVersion); code != 0 || out != want {
		t.Fatalf("endpoint csv: code %d out %q err %q", code, out, stderr)
	}
	_, stderr, code = runCLI(t, "sql", "--endpoint", cfg.Query.HTTP.NetAddr.Endpoint, "DELETE FROM schema_version")
	if code != 1 || !strings.Contains(stderr, "read-only") {
		t.Fatalf("write through endpoint: code %d err %q", code, stderr)
	}
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Collector gone: same command, answered from the file.
	out, stderr, code = runCLI(t, "sql", "--endpoint", cfg.Query.HTTP.NetAddr.Endpoint, "--db", cfg.Path, "--format", "table", probe)
	want := "tier   version  ids     nothing\n" +
		"-----  -------  ------  -------\n" +
		fmt.Sprintf("local  %7d  [1, 2]     NULL\n", profilequery.WritableVersion)
	if code != 0 || out != want {
		t.Fatalf("file table: code %d err %q out:\n%s\nwant:\n%s", code, stderr, out, want)
	}
	out, _, code = runCLI(t, "sql", "--endpoint", "", "--db", cfg.Path, "--format", "json", probe)
	if code != 0 || !strings.Contains(out, `"tier": "local"`) || !strings.Contains(out, `"nothing": null`) {
		t.Fatalf("file json: %q", out)
	}
	_, stderr, code = runCLI(t, "sql", "--endpoint", "", "--db", cfg.Path, "DROP TABLE schema_version")
	if code != 1 || !strings.Contains(stderr, "read-only") {
		t.Fatalf("write to file: code %d err %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "sql", "--endpoint", cfg.Query.HTTP.NetAddr.Endpoint, probe)
	if code != 1 || !strings.Contains(stderr, "no collector answers") {
		t.Fatalf("nothing to query: code %d err %q", code, stderr)
	}
}

// TestSQLReadsWhereTheOtherCommandsDo: without --db, hotpath sql asks the
// gateway, or with --local the agent, then opens the tier's file when its
// collector does not answer, as hotpath top does. It asked the agent by
// default and had no --local.
func TestSQLReadsWhereTheOtherCommandsDo(t *testing.T) {
	gw, gwExp := startQueryExporter(t, "summary")
	agent, agentExp := startQueryExporter(t, "local")
	t.Setenv("HOTPATH_GATEWAY_QUERY", gw.Query.HTTP.NetAddr.Endpoint)
	t.Setenv("HOTPATH_AGENT_QUERY", agent.Query.HTTP.NetAddr.Endpoint)
	t.Setenv("HOTPATH_QUERY_ENDPOINT", "")
	t.Setenv("HOTPATH_DB", "")
	stateDir := filepath.Dir(localDB(t)) // agent.duckdb, no gateway.duckdb
	t.Setenv("HOTPATH_STATE_DIR", stateDir)
	const tierSQL = "SELECT tier FROM schema_version"

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"sql", "--no-header", tierSQL}, "summary\n"},
		{[]string{"sql", "--no-header", "--local", tierSQL}, "local\n"},
	} {
		if out, stderr, code := runCLI(t, c.args...); code != 0 || out != c.want {
			t.Fatalf("%q with both collectors running: code %d out %q err %q, want %q", c.args, code, out, stderr, c.want)
		}
	}
	// --local beside a place named by flag is a contradiction, not a
	// preference.
	for _, args := range [][]string{
		{"sql", "--local", "--db", agent.Path, tierSQL},
		{"sql", "--local", "--endpoint", agent.Query.HTTP.NetAddr.Endpoint, tierSQL},
	} {
		if _, stderr, code := runCLI(t, args...); code != 2 || !strings.Contains(stderr, "--local asks the agent's endpoint and file") {
			t.Fatalf("%q: code %d err %q, want a usage error", args, code, stderr)
		}
	}

	// Both collectors stopped: the tier's file under $HOTPATH_STATE_DIR
	// when it exists, else an error that says what was looked for.
	if err := gwExp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := agentExp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, stderr, code := runCLI(t, "sql", "--no-header", "--local", tierSQL); code != 0 || out != "local\n" {
		t.Fatalf("--local, no agent running: code %d out %q err %q, want %s/agent.duckdb's tier", code, out, stderr, stateDir)
	}
	_, stderr, code := runCLI(t, "sql", tierSQL)
	for _, want := range []string{"no collector answers at " + gw.Query.HTTP.NetAddr.Endpoint, filepath.Join(stateDir, "gateway.duckdb"), "--local"} {
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("no gateway running and no file: code %d err %q, want exit 1 naming %q", code, stderr, want)
		}
	}
}

// TestSQLDBAloneIsTheOnePlaceAsked: --db without --endpoint is where the
// query goes, a file or a collector's HOST:PORT, as in the other commands.
// HOTPATH_QUERY_ENDPOINT was asked first whatever --db named, so a
// gateway's file got the agent's answer.
func TestSQLDBAloneIsTheOnePlaceAsked(t *testing.T) {
	gw, _ := startQueryExporter(t, "summary")
	agent := localDB(t) // a local-tier file no collector holds
	const tierSQL = "SELECT tier FROM schema_version"

	// The running gateway as the default endpoint: a --db file alone is
	// answered from that file.
	t.Setenv("HOTPATH_QUERY_ENDPOINT", gw.Query.HTTP.NetAddr.Endpoint)
	if out, stderr, code := runCLI(t, "sql", "--no-header", tierSQL); code != 0 || out != "summary\n" {
		t.Fatalf("default endpoint: code %d out %q err %q", code, out, stderr)
	}
	if out, stderr, code := runCLI(t, "sql", "--no-header", "--db", agent, tierSQL); code != 0 || out != "local\n" {
		t.Fatalf("--db %s alone: code %d out %q err %q, want the file's tier", agent, code, out, stderr)
	}
	// --db HOST:PORT is that collector's endpoint.
	t.Setenv("HOTPATH_QUERY_ENDPOINT", testport.Addr(t)) // nothing listens there
	if out, stderr, code := runCLI(t, "sql", "--no-header", "--db", gw.Query.HTTP.NetAddr.Endpoint, tierSQL); code != 0 || out != "summary\n" {
		t.Fatalf("--db HOST:PORT: code %d out %q err %q", code, out, stderr)
	}
	// The file a collector holds, alone: read through the endpoint that
	// says it serves that file (the gateway's here), by the CLI's commands.
	t.Setenv("HOTPATH_GATEWAY_QUERY", gw.Query.HTTP.NetAddr.Endpoint)
	if out, stderr, code := runCLI(t, "sql", "--no-header", "--db", gw.Path, tierSQL); code != 0 || out != "summary\n" {
		t.Fatalf("--db of a held file: code %d out %q err %q", code, out, stderr)
	}
	_, stderr, code := runCLI(t, "profile", "--db", gw.Path, "--service", "api", "--since", "1h")
	if code != 1 || !strings.Contains(stderr, "no samples") || !strings.Contains(stderr, "collector at "+gw.Query.HTTP.NetAddr.Endpoint) {
		t.Fatalf("profile --db of a held file: code %d err %q, want no samples on the collector", code, stderr)
	}
	// --endpoint with --db: the endpoint first, the file when none answers.
	if out, stderr, code := runCLI(t, "sql", "--no-header", "--endpoint", gw.Query.HTTP.NetAddr.Endpoint, "--db", agent, tierSQL); code != 0 || out != "summary\n" {
		t.Fatalf("--endpoint and --db: code %d out %q err %q", code, out, stderr)
	}
}

func TestUnknownCommandAndFormat(t *testing.T) {
	if _, _, code := runCLI(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	if _, stderr, code := runCLI(t, "sql", "--format", "xml", "SELECT 1"); code != 1 || !strings.Contains(stderr, "--format must be") {
		t.Fatalf("bad format: %d %q", code, stderr)
	}
}
