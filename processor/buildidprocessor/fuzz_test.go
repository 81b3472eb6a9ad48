package buildidprocessor

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"

	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seeds from internal/hostileotlp")

// The committed seeds under testdata/fuzz/FuzzProcess are the hostile cases.
func TestFuzzSeeds(t *testing.T) {
	if err := hostileotlp.SyncCorpus("testdata/fuzz/FuzzProcess", *updateSeeds); err != nil {
		t.Fatal(err)
	}
}

// fakeProcRoot is a procfs stand-in where pids 4242 (the hostile cases' good
// process) and 666 (their hostile one) run this test binary with "/" as
// root, so the hostile mappings are really resolved against files.
func fakeProcRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range []string{"4242", "666"} {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(self, filepath.Join(dir, "exe")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/", filepath.Join(dir, "root")); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func fuzzProcessor(t testing.TB, procRoot string) *buildIDProcessor {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	cfg := createDefaultConfig()
	cfg.HostName = "good-host"
	cfg.ProcRoot = procRoot
	p, err := newProcessor(cfg, processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// FuzzProcess feeds arbitrary OTLP bytes to the processor: whatever decodes
// is annotated without panicking, every resource passes through, and what
// comes out still encodes.
// `go test` runs the committed seeds; `go test -fuzz FuzzProcess` explores.
func FuzzProcess(f *testing.F) {
	p := fuzzProcessor(f, fakeProcRoot(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(data)
		if err != nil {
			return
		}
		n := pd.ResourceProfiles().Len()
		out, err := p.process(context.Background(), pd)
		if err != nil {
			t.Fatal(err)
		}
		if out.ResourceProfiles().Len() != n {
			t.Fatalf("%d resources in, %d out", n, out.ResourceProfiles().Len())
		}
		var m pprofile.ProtoMarshaler
		if _, err := m.MarshalProfiles(out); err != nil {
			t.Fatal(err)
		}
	})
}

// In every hostile request the good (local) process is still annotated.
func TestHostileInputKeepsGoodData(t *testing.T) {
	p := fuzzProcessor(t, fakeProcRoot(t))
	for _, c := range hostileotlp.Cases() {
		out, err := p.process(context.Background(), c.Build(time.Now()))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		found := false
		for i := 0; i < out.ResourceProfiles().Len(); i++ {
			res := out.ResourceProfiles().At(i).Resource()
			if profileschema.ServiceName(res) == hostileotlp.GoodService {
				found = true
				if profileschema.BuildID(res) == "" {
					t.Errorf("%s: the good process got no build ID", c.Name)
				}
			}
		}
		if !found {
			t.Errorf("%s: the good process is gone", c.Name)
		}
	}
}

// A mapping path with ".." cannot climb out of /proc/PID/root: the kernel
// never writes one, a hostile sender would use it to make the processor
// read (and publish the build ID of) a host file outside the container.
func TestMappingPathCannotEscapeProcessRoot(t *testing.T) {
	root := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	// A "host" file next to the process's root directory.
	if err := os.WriteFile(filepath.Join(root, "host-binary"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	procDir := filepath.Join(root, "proc", "77")
	if err := os.MkdirAll(filepath.Join(procDir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := fuzzProcessor(t, filepath.Join(root, "proc"))
	proc := &process{procDir: procDir, exePath: "/app"}
	if _, ok := p.resolveMapping(context.Background(), proc, "/../../../host-binary", 0, 0); ok {
		t.Fatal("a mapping path with .. was resolved outside the process root")
	}
	// The same file inside the root resolves: the refusal is about "..".
	if err := os.WriteFile(filepath.Join(procDir, "root", "inside"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.resolveMapping(context.Background(), proc, "/inside", 0, 0); !ok {
		t.Fatal("a clean mapping path inside the root did not resolve")
	}
}
