package ebpfprofilereceiver

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// splitPyZlib: the designed 60/30/10 split for an interpreter without
// -X perf; hotC spends its time in a C extension (zlib.compress, which
// calls into libz), so its samples show hotC above zlib's native frames.
const splitPyZlib = `
import json, sys, time, zlib

def hotA(n):
    x = 1
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0xffffffff
    return x

def hotB(n):
    x = 2
    for i in range(n):
        x = (x * 1103515245 + 12345) & 0xffffffff
    return x

BLOB = bytes(range(256)) * 64

def hotC(n):
    for _ in range(n // 2000):
        zlib.compress(BLOB, 9)

UNIT = 20000
cpu = {"hotA": 0, "hotB": 0, "hotC": 0}

def timed(name, fn, units):
    t0 = time.thread_time_ns()
    fn(units * UNIT)
    cpu[name] += time.thread_time_ns() - t0

def dispatch():
    timed("hotA", hotA, 6)
    timed("hotB", hotB, 3)
    timed("hotC", hotC, 1)

seconds = float(sys.argv[1])
print("ready", flush=True)
time.sleep(0.3)
end = time.monotonic() + seconds
while time.monotonic() < end:
    dispatch()
print(json.dumps(cpu), flush=True)
`

// TestPython311FramesWithoutHelp: Debian's /usr/bin/python3.11 (no -X perf,
// no frame pointers, no debug info) shows its Python functions, with
// files and lines, interleaved with the native frames; hotC's samples
// reach into zlib's C code.
func TestPython311FramesWithoutHelp(t *testing.T) {
	py, err := exec.LookPath("/usr/bin/python3.11")
	if err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	cfg := testConfig()
	cfg.TraceContext.Enabled = false
	res := runSplit(t, cfg, "split.py", splitPyZlib, py)
	tl := res.tally
	// Python frames are named like any other function (no suffix).
	inFunc := map[string]int64{}
	var inPython, withZlib, total int64
	for stack, n := range tl.Folded {
		frames := userFrames(stack)
		total += n
		found := ""
		for i, f := range frames {
			for _, fn := range designedSplit {
				if f == fn && i > 1 && frames[i-1] == "timed" && frames[i-2] == "dispatch" {
					found = fn
				}
			}
		}
		if found != "" {
			inFunc[found] += n
		}
		if strings.Contains(stack, "_PyEval_EvalFrameDefault") {
			inPython += n
		}
		if found == "hotC" && strings.Contains(stack, "deflate") {
			withZlib += n
		}
	}
	var named int64
	for _, fn := range designedSplit {
		named += inFunc[fn]
	}
	minSamples := int64(0.25 * testworkload.ExpectedSamples(res.cmd, cfg.FrequencyHz))
	if named < minSamples {
		t.Fatalf("only %d samples in dispatch → timed → hotA/hotB/hotC (want ≥ %d); top:%s", named, minSamples, tl.Top(8))
	}
	share := float64(named) / float64(inPython)
	t.Logf("dispatch → timed → hot function in %.3f of the interpreter's samples (%d of %d); hotC reaches deflate in %d of %d; top:%s", share, named, inPython, withZlib, inFunc["hotC"], tl.Top(3))
	if share < 0.95 {
		t.Errorf("dispatch → timed → hot function named in %.3f of the interpreter's samples (%d of %d), want ≥ 0.95; top:%s", share, named, inPython, tl.Top(8))
	}
	checkShares(t, inFunc, res.measured, tl)
	if float64(withZlib) < 0.5*float64(inFunc["hotC"]) {
		t.Errorf("only %d of hotC's %d samples reach zlib's deflate; top:%s", withZlib, inFunc["hotC"], tl.Top(8))
	}
	assertFrameFileLine(t, res.profiles, "hotA", res.script, 5, "python")
}
