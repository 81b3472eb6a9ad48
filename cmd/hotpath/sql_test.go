package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

const probe = "SELECT tier, version, [1, 2] AS ids, NULL AS nothing FROM schema_version"

// TestSQLUsesEndpointThenFile runs a real exporter (through its factory),
// queries it over the endpoint while it holds the file, then queries the
// file directly once it has stopped.
func TestSQLUsesEndpointThenFile(t *testing.T) {
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Path = filepath.Join(t.TempDir(), "p.duckdb")
	cfg.Query.HTTP.NetAddr.Endpoint = freePort(t)
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}

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

func TestUnknownCommandAndFormat(t *testing.T) {
	if _, _, code := runCLI(t, "frobnicate"); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	if _, stderr, code := runCLI(t, "sql", "--format", "xml", "SELECT 1"); code != 1 || !strings.Contains(stderr, "--format must be") {
		t.Fatalf("bad format: %d %q", code, stderr)
	}
}
