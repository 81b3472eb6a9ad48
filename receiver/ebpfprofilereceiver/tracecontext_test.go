//go:build privileged

package ebpfprofilereceiver

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// Trace context end to end: real processes, real uprobes, the real sampler,
// and the receiver's OTLP output. Root required; these fail, not skip.

// traceTestConfig samples at 99 Hz into a private bpffs instance, so the
// tests never touch the host's /sys/fs/bpf.
func traceTestConfig(t *testing.T) *Config {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount test bpffs (these tests need root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	cfg := testConfig()
	cfg.TraceContext = TraceContextConfig{Enabled: true, BPFFS: dir, RescanInterval: time.Second}
	return cfg
}

// traceLeaves tallies one process's samples by trace ID (hex; "" for none)
// and leaf function: the innermost user-space frame, as testworkload's
// tallies count it (a reschedule interrupt taken in main.slowWork is
// main.slowWork's time).
func traceLeaves(all []pprofile.Profiles, pid int) map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	for _, pd := range all {
		dict := pd.Dictionary()
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			rp := pd.ResourceProfiles().At(i)
			if v, _ := rp.Resource().Attributes().Get(profileschema.AttrProcessPID); v.Int() != int64(pid) {
				continue
			}
			for j := 0; j < rp.ScopeProfiles().Len(); j++ {
				profiles := rp.ScopeProfiles().At(j).Profiles()
				for k := 0; k < profiles.Len(); k++ {
					p := profiles.At(k)
					if !profileschema.IsSampleCount(dict, p) {
						continue
					}
					for s := 0; s < p.Samples().Len(); s++ {
						smp := p.Samples().At(s)
						trace := ""
						if li := smp.LinkIndex(); li > 0 {
							tid := dict.LinkTable().At(int(li)).TraceID()
							trace = hex.EncodeToString(tid[:])
						}
						leaf := testworkload.UserLeaf(profileschema.FoldedStack(dict, smp))
						if out[trace] == nil {
							out[trace] = map[string]int64{}
						}
						out[trace][leaf] += profileschema.SampleCount(smp)
					}
				}
			}
		}
	}
	return out
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// waitAttached polls until the receiver has uprobes on bin.
func waitAttached(t *testing.T, r *profileReceiver, bin string) {
	t.Helper()
	if r.traceCtx == nil {
		t.Fatal("trace context did not start (see the receiver's warning)")
	}
	waitFor(t, 10*time.Second, bin+" attached", func() bool {
		return slices.ContainsFunc(r.traceCtx.probes.Attached(), func(p string) bool { return strings.HasSuffix(p, bin) })
	})
}

func newTraceID(t *testing.T) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// A Go HTTP service (OTel SDK, otelhttp, tracectx middleware, GOMAXPROCS 2)
// serves one 2-second CPU-bound request among many concurrent short ones;
// the samples linked to its trace ID are in its function, and other traces'
// samples do not leak into it.
func TestGoServiceRequestProfile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tracesvc")
	// tracesvc is a module of its own, as an application using the SDK is.
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "testdata/tracesvc"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tracesvc: %v\n%s", err, out)
	}
	// Started before the receiver: found by the initial rescan, not by an
	// exec event.
	svc := exec.Command(bin)
	svc.Env = append(os.Environ(), "GOMAXPROCS=2", "OTEL_SERVICE_NAME=tracesvc")
	stdout, _ := svc.StdoutPipe()
	stdin, _ := svc.StdinPipe() // tracesvc serves while it is open
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); svc.Process.Kill(); svc.Wait() })
	var addr string
	var procs int
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatalf("tracesvc did not start: %v", err)
	} else if _, err := fmt.Sscanf(line, "listening %s gomaxprocs %d", &addr, &procs); err != nil || procs < 2 {
		t.Fatalf("tracesvc said %q (GOMAXPROCS must be ≥ 2)", line)
	}

	r, sink := startReceiver(t, traceTestConfig(t))
	waitAttached(t, r, bin)

	call := func(path, trace string) error {
		req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
		req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s: %s", path, resp.Status)
		}
		return nil
	}

	slowTrace := newTraceID(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var mu sync.Mutex
	fastTraces := map[string]bool{}
	var errs []error
	for range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tr := newTraceID(t)
				err := call("/fast?n=4", tr)
				mu.Lock()
				fastTraces[tr] = true
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	// ~2 s of CPU on an idle machine of this kind (3e9 iterations).
	slowErr := call("/slow?n=3000", slowTrace)
	close(stop)
	wg.Wait()
	if slowErr != nil || len(errs) > 0 {
		t.Fatalf("requests failed: slow %v, fast %v", slowErr, errs)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	byTrace := traceLeaves(sink.AllProfiles(), svc.Process.Pid)
	slow := byTrace[slowTrace]
	total := sum(slow)
	// ~2 s of CPU at 99 Hz is ~200 samples; margin for slower CPUs and
	// lost stacks.
	if total < 60 {
		t.Fatalf("only %d samples linked to the slow request's trace %s (leaves %v)", total, slowTrace, slow)
	}
	if in := slow["main.slowWork"]; float64(in) < 0.9*float64(total) {
		t.Errorf("%d of %d samples of trace %s in main.slowWork, want ≥ 90%%: %v", in, total, slowTrace, slow)
	}
	// The other direction: slowWork's samples belong to the slow trace, not
	// to the fast requests running on the same threads.
	var slowWorkAll, fastTagged, fastWorkAll int64
	for tr, leaves := range byTrace {
		slowWorkAll += leaves["main.slowWork"]
		fastWorkAll += leaves["main.fastWork"]
		if fastTraces[tr] {
			fastTagged += leaves["main.fastWork"]
			if leaves["main.slowWork"] > 0 {
				t.Errorf("fast trace %s has %d main.slowWork samples", tr, leaves["main.slowWork"])
			}
		}
	}
	if float64(slow["main.slowWork"]) < 0.9*float64(slowWorkAll) {
		t.Errorf("only %d of %d main.slowWork samples carry the slow trace", slow["main.slowWork"], slowWorkAll)
	}
	if fastWorkAll == 0 || float64(fastTagged) < 0.8*float64(fastWorkAll) {
		t.Errorf("only %d of %d main.fastWork samples carry a fast request's trace", fastTagged, fastWorkAll)
	}
	t.Logf("slow trace: %d samples %v; slowWork total %d; fastWork %d (%d tagged)", total, slow, slowWorkAll, fastWorkAll, fastTagged)
}

// The C header: two threads with their own contexts and one without; each
// thread's samples carry its own trace, the untraced thread's none.
func TestCProgramThreadsTagged(t *testing.T) {
	sdkDir, _ := filepath.Abs("../../sdk/c")
	bin := filepath.Join(t.TempDir(), "tracectx_c")
	if out, err := exec.Command("gcc", "-O2", "-fno-omit-frame-pointer", "-pthread", "-I", sdkDir,
		"-o", bin, "testdata/tracectx_c.c").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	r, sink := startReceiver(t, traceTestConfig(t))
	// Started after the receiver: found through its exec event.
	cmd := exec.Command(bin, "40000") // ~1 s of CPU per thread here
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewReader(stdout)
	if line, _ := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("C program said %q", line)
	}
	waitAttached(t, r, bin)
	io.WriteString(stdin, "go\n")
	if line, _ := out.ReadString('\n'); line != "done\n" {
		t.Fatalf("C program said %q", line)
	}
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	byTrace := traceLeaves(sink.AllProfiles(), cmd.Process.Pid)
	for i := 1; i <= 2; i++ {
		tr := fmt.Sprintf("%02x%s", i, strings.Repeat("00", 14)+"cc")
		got := byTrace[tr]
		// ~1 s of CPU per thread is ~100 samples; ask for a modest count
		// and check the share. Samples without any stack (leaf "") say
		// nothing either way.
		n := sum(got) - got[""]
		if got["burn_traced"] < 20 || float64(got["burn_traced"]) < 0.9*float64(n) || got["burn_untraced"] > 0 {
			t.Errorf("thread %d's trace %s: %v, want ≥ 20 samples, ≥ 90%% in burn_traced, none in burn_untraced", i, tr, got)
		}
	}
	var untraced, untracedTagged int64
	for tr, leaves := range byTrace {
		untraced += leaves["burn_untraced"]
		if tr != "" {
			untracedTagged += leaves["burn_untraced"]
		}
	}
	if untraced < 20 || float64(untracedTagged) > 0.05*float64(untraced) {
		t.Errorf("untraced thread: %d of %d samples tagged; all: %v", untracedTagged, untraced, byTrace)
	}
}

// Another tool (OBI) writes traces_ctx_v1 directly through the pinned map:
// the sampled thread's samples carry that trace.
func TestPinnedMapEntryFromAnotherTool(t *testing.T) {
	cBin := testworkload.BuildC(t)
	cfg := traceTestConfig(t)
	r, sink := startReceiver(t, cfg)
	m, err := ebpf.LoadPinnedMap(filepath.Join(cfg.TraceContext.BPFFS, "otel", "traces_ctx_v1"), nil)
	if err != nil {
		t.Fatalf("open the pinned map as another tool would: %v", err)
	}
	defer m.Close()

	p := testworkload.Start(t, cBin, "1.5")
	pid := uint64(p.Process.Pid)
	val := struct {
		TraceID [16]byte
		SpanID  [8]byte
	}{TraceID: [16]byte{0x0b, 0x1, 0x0}, SpanID: [8]byte{0x5}}
	val.TraceID[15] = 0x42
	if err := m.Put(pid<<32|pid, val); err != nil {
		t.Fatal(err)
	}
	_ = p.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	byTrace := traceLeaves(sink.AllProfiles(), p.Process.Pid)
	want := hex.EncodeToString(val.TraceID[:])
	var all int64
	for _, leaves := range byTrace {
		all += sum(leaves)
	}
	// The spin program runs 1.5 s of wall time: on a loaded machine it may
	// get far less CPU, so the count asked for is modest.
	if got := sum(byTrace[want]); all < 10 || float64(got) < 0.85*float64(all) {
		t.Errorf("%d of %d samples carry the trace written into the pinned map (%s): %v", got, all, want, byTrace)
	}
	// The thread exited: the sampler's exit hook dropped its entry.
	var left [24]byte
	if err := m.Lookup(pid<<32|pid, &left); err == nil {
		t.Errorf("entry of the exited thread still in the map")
	}
}
