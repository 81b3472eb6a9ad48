package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

const holdEnv = "HOTPATH_SQL_TEST_HOLD"

// TestHoldChild plays a collector in a child process (no-op otherwise).
func TestHoldChild(t *testing.T) {
	path := os.Getenv(holdEnv)
	if path == "" {
		return
	}
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Path = path
	cfg.Query.Enabled = false
	exp, err := f.CreateProfiles(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
	if err == nil {
		err = exp.Start(context.Background(), componenttest.NewNopHost())
	}
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(3)
	}
	fmt.Println("holding")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// holdInChild starts TestHoldChild in a child process, which opens path
// with a real exporter (as a running collector does) until the test ends.
func holdInChild(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldChild$")
	cmd.Env = append(os.Environ(), holdEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "holding" {
		t.Fatalf("child: %q", lines.Text())
	}
}

// TestSQLExplainsHeldFile: with a collector holding the file and no endpoint
// answering, the error says where to query instead.
func TestSQLExplainsHeldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "held.duckdb")
	holdInChild(t, path)
	_, stderr, code := runCLI(t, "sql", "--endpoint", testport.Addr(t), "--db", path, "SELECT 1")
	t.Logf("stderr: %s", stderr)
	if code != 1 || !strings.Contains(stderr, "a collector holds the file") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	// --db alone, and no endpoint asked serves the file (this collector
	// serves none): the same, for sql and profile.
	for _, args := range [][]string{{"sql", "--db", path, "SELECT 1"}, {"profile", "--db", path, "--service", "api"}} {
		_, stderr, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(stderr, "a collector holds the file") || !strings.Contains(stderr, "--db HOST:PORT") {
			t.Fatalf("%s: code %d, stderr %q", args[0], code, stderr)
		}
	}
}
