//go:build privileged

package duckdbprofileexporter

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver"
)

// pyHotLoop spins in hot_loop (lines 3 to 7) for argv[1] seconds.
const pyHotLoop = `import sys, time

def hot_loop(n):
    x = 1
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0xffffffff
    return x

end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    hot_loop(20000)
`

// TestPython311FramesStoredTyped: Debian's /usr/bin/python3.11 profiled by
// the real eBPF receiver into the real exporter: its Python frames are
// stored typed python with the script's file and a line of the function,
// and read back so through internal/profilequery.
func TestPython311FramesStoredTyped(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3.11")
	if err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	script := filepath.Join(t.TempDir(), "hot_loop.py")
	if err := os.WriteFile(script, []byte(pyHotLoop), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cfg := testConfig(t, "local")
	// Not startExporter: the file is closed (once) before the query
	// layer opens it.
	e := newProfilesExporter(cfg, exportertest.NewNopSettings(NewFactory().Type()).TelemetrySettings)
	if err := e.start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	exporterUp := true
	defer func() {
		if exporterUp {
			_ = e.shutdown(ctx)
		}
	}()

	rf := ebpfprofilereceiver.NewFactory()
	rcfg := rf.CreateDefaultConfig().(*ebpfprofilereceiver.Config)
	rcfg.FrequencyHz = 99
	rcfg.Interval = time.Second
	rcfg.Control.HTTP.NetAddr.Endpoint = ""
	rcfg.MaxCPUPercent = 0
	rcfg.TraceContext.Enabled = false
	next, err := xconsumer.NewProfiles(func(ctx context.Context, pd pprofile.Profiles) error { return e.push(ctx, pd) })
	if err != nil {
		t.Fatal(err)
	}
	r, err := rf.CreateProfiles(ctx, receivertest.NewNopSettings(rf.Type()), rcfg, next)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			if err := r.Shutdown(ctx); err != nil {
				t.Error(err)
			}
		}
	}
	defer stop()
	started := time.Now()
	cmd := exec.Command(py, script, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Wait until the receiver has read the interpreter and a window with
	// hot_loop is stored.
	query := `SELECT frame_name, frame_type, file_name, line_number FROM profile_frame_dictionary_local WHERE frame_name = 'hot_loop'`
	var got []string
	for deadline := time.Now().Add(45 * time.Second); ; {
		if got = rowsOf(t, e.w.DB(), query); len(got) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no hot_loop frame stored after 45 s of python3.11 running")
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	_ = cmd.Process.Kill()
	parts := strings.Split(got[0], "|")
	line, _ := strconv.Atoi(parts[3])
	if parts[1] != "python" || parts[2] != script || line < 3 || line > 7 {
		t.Fatalf("hot_loop stored as type %q, file %q, line %q; want python, %s, 3..7", parts[1], parts[2], parts[3], script)
	}

	// Through the query layer: the service whose stacks hold hot_loop.
	services := rowsOf(t, e.w.DB(), `SELECT DISTINCT service_id FROM stack_samples_local s JOIN profile_stack_dictionary_local d USING (stack_id)
WHERE list_contains(d.stack_frame_ids, (SELECT frame_id FROM profile_frame_dictionary_local WHERE frame_name = 'hot_loop'))`)
	if len(services) != 1 {
		t.Fatalf("services with hot_loop: %v", services)
	}
	exporterUp = false
	if err := e.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := profilequery.Open(ctx, profilequery.Target{DB: cfg.Path})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	p, err := profilequery.Load(ctx, src, profilequery.Selector{Service: services[0], Range: timerange.Range{Since: started.Add(-time.Minute), Until: time.Now().Add(time.Minute)}})
	if err != nil {
		t.Fatal(err)
	}
	if fi := p.Frame("hot_loop"); fi.Type != "python" || fi.File != script || fi.Line < 3 || fi.Line > 7 {
		t.Errorf("profilequery: hot_loop is %+v, want python in %s at 3..7", fi, script)
	}
	var native bool
	for _, s := range p.Stacks {
		for _, f := range s.Frames {
			if strings.Contains(f, "_PyEval_EvalFrameDefault") {
				native = p.Frame(f).Type == "native"
			}
		}
	}
	if !native {
		t.Errorf("the interpreter's _PyEval_EvalFrameDefault is not stored native")
	}
}
