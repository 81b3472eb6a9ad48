package buildidprocessor

import (
	"os"
	"testing"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// loadProducerCapture reads OTLP profiles captured from the upstream
// OpenTelemetry eBPF profiler (testdata/ebpf-profiler/README.md): one
// resource per process with process.* attributes and no service.name, build
// IDs on the mappings.
func loadProducerCapture(t *testing.T) pprofile.Profiles {
	t.Helper()
	b, err := os.ReadFile("testdata/ebpf-profiler/profiles.pb")
	if err != nil {
		t.Fatal(err)
	}
	pd, err := (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(b)
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

func TestOtherProducerGetsServicesAndBuildIDs(t *testing.T) {
	in := loadProducerCapture(t)
	for i := 0; i < in.ResourceProfiles().Len(); i++ {
		if _, ok := in.ResourceProfiles().At(i).Resource().Attributes().Get(profileschema.AttrServiceName); ok {
			t.Fatal("the capture is supposed to lack service.name")
		}
	}
	h := newHarness(t)
	out := h.run(t, in)

	// Facts of the captured processes (readelf -n and go tool buildid of
	// the binaries on the capturing host agree with the mappings' IDs).
	want := map[int64]struct{ service, build string }{
		28378: {"sha256sum", "27be6e4fdbd1b91e74ef11ac76129c1757362d49"}, // C: GNU note
		27961: {"go", "1487b4b69366a6243bf608ec525891fcfd17db6d"},        // Go with a GNU note too: GNU wins
		28764: {"vet", "e6906c76dd3b072f57d50d673051560a75eb0518"},       // Go tool
		28759: {"x86_64-linux-gnu-ld.bfd", "0da392ca3a40552f7876d1e68a426ae5e9c41d72"},
		72:    {"kdamond.0", ""}, // kernel thread: no executable, named by its thread
		// Its one sample never ran in the executable's own mapping: which
		// file it was is not in the data, so no build ID is guessed.
		28307: {"x86_64-linux-gnu-ld.bfd", ""},
	}
	services := map[string]bool{}
	for i := 0; i < out.ResourceProfiles().Len(); i++ {
		res := out.ResourceProfiles().At(i).Resource()
		service := profileschema.ServiceName(res)
		services[service] = true
		if service == profileschema.UnknownService {
			t.Errorf("resource %v kept no service", res.Attributes().AsRaw())
		}
		pid, _ := res.Attributes().Get(profileschema.AttrProcessPID)
		w, ok := want[pid.Int()]
		if _, hasExe := res.Attributes().Get(profileschema.AttrProcessExePath); hasExe && !ok && profileschema.BuildID(res) == "" {
			t.Errorf("pid %d (%s): no build ID", pid.Int(), service)
		}
		if !ok {
			continue
		}
		delete(want, pid.Int())
		if service != w.service || profileschema.BuildID(res) != w.build {
			t.Errorf("pid %d: service %q build %q, want %q %q", pid.Int(), service, profileschema.BuildID(res), w.service, w.build)
		}
		if w.build != "" && str(res.Attributes(), profileschema.AttrBuildIDGNU) != w.build {
			t.Errorf("pid %d: %s = %q", pid.Int(), profileschema.AttrBuildIDGNU, str(res.Attributes(), profileschema.AttrBuildIDGNU))
		}
		if w.build != "" && str(res.Attributes(), profileschema.AttrBuildIDHTLHash) == "" {
			t.Errorf("pid %d: the producer's htlhash was not kept", pid.Int())
		}
	}
	for pid := range want {
		t.Errorf("pid %d not in the output", pid)
	}
	// Nine programs ran: ld, go, vet, link, compile, hotpath-bench,
	// sha256sum, the profiler itself and a kernel thread.
	if len(services) != 9 {
		t.Errorf("%d services (%v), want 9: one per program", len(services), services)
	}
}

// Our own agent's resources carry service.name and hotpath.build_id: the
// producer path leaves them exactly as they are.
func TestOwnAgentResourceIsNotReidentified(t *testing.T) {
	in := loadProducerCapture(t)
	attrs := in.ResourceProfiles().At(0).Resource().Attributes()
	attrs.PutStr(profileschema.AttrServiceName, "ld-by-env")
	attrs.PutStr(profileschema.AttrBuildID, "from-the-agent")
	h := newHarness(t)
	out := h.run(t, in)
	res := out.ResourceProfiles().At(0).Resource()
	if profileschema.ServiceName(res) != "ld-by-env" || profileschema.BuildID(res) != "from-the-agent" {
		t.Errorf("service %q build %q: an agent's identity was overwritten", profileschema.ServiceName(res), profileschema.BuildID(res))
	}
	if _, ok := res.Attributes().Get(profileschema.AttrBuildIDGNU); ok {
		t.Errorf("mapping IDs were copied onto a resource that had its own")
	}
}
