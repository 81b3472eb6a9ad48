package tracectx

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestModuleGraphIsSmall: an application that imports this SDK gets its
// module graph, which must not drag in the collector or DuckDB (the reason
// the SDK is a module of its own, not a package of hotpath's main module).
func TestModuleGraphIsSmall(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = "/usr/local/go/bin/go"
	}
	// In a copy of go.mod and go.sum: listing the whole graph records
	// go.sum lines that go mod tidy (checked by make lint) would remove.
	dir := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goCmd, "list", "-m", "all")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	mods := strings.Fields(string(out))
	if len(mods) == 0 || mods[0] != "github.com/hotpath-dev/hotpath/sdk/go/tracectx" {
		t.Fatalf("not this module's graph:\n%s", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path := strings.Fields(line)[0]
		if path == "github.com/hotpath-dev/hotpath" {
			t.Errorf("the SDK's module graph contains hotpath's main module")
		}
		for _, banned := range []string{"go.opentelemetry.io/collector", "github.com/duckdb/", "github.com/cilium/ebpf"} {
			if strings.HasPrefix(path, banned) {
				t.Errorf("the SDK's module graph contains %s", path)
			}
		}
	}
}
