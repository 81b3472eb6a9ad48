//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// Leaf-heavy workloads: main → dispatch → a frameless leaf that burns the
// CPU. With frame pointers alone the leaf's caller (dispatch) is skipped;
// leaf-caller recovery must put it back.

const leafGo = `package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// hotLeaf calls nothing and has no locals on the stack: the compiler gives
// it no frame.
//
//go:noinline
func hotLeaf(x uint64) uint64 {
	for i := 0; i < 2000; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	return x
}

//go:noinline
func dispatch(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = hotLeaf(x)
	}
	return x
}

var sink uint64

func main() {
	secs, err := strconv.ParseFloat(os.Args[1], 64)
	if err != nil {
		panic(err)
	}
	fmt.Println("ready")
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	for time.Now().Before(end) {
		sink += dispatch(1000, sink)
	}
}
`

const leafC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// Frameless at -O2 with -momit-leaf-frame-pointer: no calls, no spills.
__attribute__((noinline)) unsigned long hot_leaf(unsigned long x) {
	for (int i = 0; i < 2000; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) unsigned long dispatch(int n, unsigned long x) {
	for (int i = 0; i < n; i++)
		x = hot_leaf(x);
	return x;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

volatile unsigned long sink;

int main(int argc, char **argv) {
	double end = now() + atof(argv[1]);
	printf("ready\n");
	fflush(stdout);
	while (now() < end)
		sink += dispatch(1000, sink);
	return 0;
}
`

func buildLeafGo(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(leafGo), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module leaf\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "leaf_go")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The test means nothing if hotLeaf has a frame.
	out, err := exec.Command("go", "tool", "objdump", "-s", `^main\.hotLeaf$`, bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool objdump: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "TEXT main.hotLeaf") || strings.Contains(string(out), "PUSHQ BP") {
		t.Fatalf("main.hotLeaf is not a frameless leaf:\n%s", out)
	}
	return bin
}

func buildLeafC(t testing.TB) string {
	t.Helper()
	bin := testworkload.CompileC(t, "leaf_c", []byte(leafC), "-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	fn := regexp.MustCompile(`(?s)<hot_leaf>:\n(.*?)\n\n`).FindSubmatch(out)
	if fn == nil || strings.Contains(string(fn[1]), "push") || strings.Contains(string(fn[1]), "call") {
		t.Fatalf("hot_leaf is not a frameless leaf:\n%s", fn)
	}
	disp := regexp.MustCompile(`(?s)<dispatch>:\n(.*?)\n\n`).FindSubmatch(out)
	if disp == nil || !strings.Contains(string(disp[1]), "push   %rbp") {
		t.Fatalf("dispatch has no frame pointer:\n%s", disp)
	}
	return bin
}

// callerShare is, among the samples whose innermost user frame is leaf, the
// share with caller directly above it.
func callerShare(tl testworkload.Tally, leaf, caller string) (share float64, leafSamples int64) {
	var withCaller int64
	for stack, n := range tl.Folded {
		frames := testworkload.UserFrames(stack)
		if len(frames) == 0 || frames[len(frames)-1] != leaf {
			continue
		}
		leafSamples += n
		if len(frames) > 1 && frames[len(frames)-2] == caller {
			withCaller += n
		}
	}
	if leafSamples == 0 {
		return 0, 0
	}
	return float64(withCaller) / float64(leafSamples), leafSamples
}

// TestLeafCallerRecovery samples the Go and C workloads with two receivers
// at once, one per unwinding mode: with auto the caller is above the leaf in
// ≥ 95 % of the leaf's samples; with frame_pointer it is mostly missing
// (which shows the check can fail).
func TestLeafCallerRecovery(t *testing.T) {
	goBin, cBin := buildLeafGo(t), buildLeafC(t)

	fpCfg, autoCfg := testConfig(), testConfig()
	fpCfg.Unwinding, autoCfg.Unwinding = UnwindingFramePointer, UnwindingAuto
	fpCfg.TraceContext.Enabled, autoCfg.TraceContext.Enabled = false, false
	fp, fpSink := startReceiver(t, fpCfg)
	auto, autoSink := startReceiver(t, autoCfg)

	g := testworkload.Start(t, goBin, "3")
	c := testworkload.Start(t, cBin, "3")
	_ = g.Wait()
	_ = c.Wait()
	for _, r := range []*profileReceiver{fp, auto} {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		name, leaf, caller string
		cmd                *exec.Cmd
	}{
		{"go", "main.hotLeaf", "main.dispatch", g},
		{"c", "hot_leaf", "dispatch", c},
	} {
		t.Run(tc.name, func(t *testing.T) {
			minSamples := int64(0.5 * testworkload.ExpectedSamples(tc.cmd, autoCfg.FrequencyHz))
			autoT := testworkload.TallyProcess(autoSink.AllProfiles(), tc.cmd.Process.Pid)
			fpT := testworkload.TallyProcess(fpSink.AllProfiles(), tc.cmd.Process.Pid)
			autoShare, autoN := callerShare(autoT, tc.leaf, tc.caller)
			fpShare, fpN := callerShare(fpT, tc.leaf, tc.caller)
			t.Logf("%s above %s: auto %.3f of %d samples, frame_pointer %.3f of %d (process: %d samples, cpu %s)", tc.caller, tc.leaf, autoShare, autoN, fpShare, fpN, autoT.Total, tc.cmd.ProcessState.UserTime()+tc.cmd.ProcessState.SystemTime())
			if autoN < minSamples/2 || fpN < minSamples/2 {
				t.Fatalf("too few %s samples (auto %d, frame_pointer %d; want ≥ %d); auto top:%s", tc.leaf, autoN, fpN, minSamples/2, autoT.Top(5))
			}
			if autoShare < 0.95 {
				t.Errorf("auto: %s above %s in %.3f of samples, want ≥ 0.95; top:%s", tc.caller, tc.leaf, autoShare, autoT.Top(5))
			}
			if fpShare > 0.5 {
				t.Errorf("frame_pointer: %s above %s in %.3f of samples; expected the blind spot (< 0.5); top:%s", tc.caller, tc.leaf, fpShare, fpT.Top(5))
			}
		})
	}
	auto.mu.Lock()
	l := auto.leaf
	auto.mu.Unlock()
	t.Logf("auto leaf stats: %+v", l)
	if l.Recovered == 0 {
		t.Errorf("auto receiver counted no recovered stacks: %+v", l)
	}
	fp.mu.Lock()
	if fp.leaf != (leafStats{}) {
		t.Errorf("frame_pointer receiver counted leaf recovery: %+v", fp.leaf)
	}
	fp.mu.Unlock()
}

// BenchmarkAgentCPU measures the receiver's own CPU (getrusage of this
// process: the workloads are children, and the BPF program's time is charged
// to the sampled processes) while it samples the Go and C leaf workloads
// for 10 s at 99 Hz with a 1 s interval, once per unwinding mode. Run with
// -benchtime=1x; reported as CPU milliseconds per wall second.
func BenchmarkAgentCPU(b *testing.B) {
	goBin, cBin := buildLeafGo(b), buildLeafC(b)
	for _, mode := range []string{UnwindingFramePointer, UnwindingAuto} {
		b.Run(mode, func(b *testing.B) {
			for b.Loop() {
				cfg := testConfig()
				cfg.Unwinding = mode
				cfg.TraceContext.Enabled = false
				r, _ := startReceiver(b, cfg)
				g := testworkload.Start(b, goBin, "10")
				c := testworkload.Start(b, cBin, "10")
				cpu0, wall0 := processCPU(), time.Now()
				_ = g.Wait()
				_ = c.Wait()
				if err := r.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				cpu, wall := processCPU()-cpu0, time.Since(wall0)
				b.ReportMetric(float64(cpu.Milliseconds())/wall.Seconds(), "cpu-ms/s")
				r.mu.Lock()
				b.ReportMetric(float64(r.leaf.Recovered), "recovered-samples")
				r.mu.Unlock()
			}
		})
	}
}
