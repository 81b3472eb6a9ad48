//go:build privileged

package sampler

import (
	"bufio"
	"debug/elf"
	"errors"
	"os/exec"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python"
)

// pythonDepth10 keeps Debian's python3.11 busy ten Python frames deep.
const pythonDepth10 = `
def spin(n):
    x = 0
    for i in range(n):
        x = (x * 31 + i) & 0xffff
    return x
def down(d):
    return down(d - 1) if d else spin(100000)
print("ready", flush=True)
while True:
    down(8)
`

// startPython runs Debian's python3.11 on src, makes s walk its frames
// and waits for src's "ready" line (interpreter start-up is over).
func startPython(t testing.TB, s *Sampler, src string) int {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3.11", "-c", src)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start python3.11: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	defer func() {
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
			t.Fatalf("python3.11 did not start: %q %v", line, err)
		}
	}()
	pid := cmd.Process.Pid
	// Wait until the interpreter is mapped: at once for one linked into
	// the executable; a build with a shared libpython maps it when the
	// dynamic loader runs.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if in, m, ok := mappedInterpreter(t, pid); ok {
			bias, ok := in.Bias(m.Start, m.Offset)
			if !ok {
				t.Fatalf("no bias for %s at %#x", m.Path, m.Start)
			}
			if err := s.SetPythonProcess(uint32(pid), NewPythonProcess(in.RuntimeVA+bias, in.Offsets)); err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("python (pid %d) never mapped its interpreter", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mappedInterpreter is the CPython interpreter process pid maps (the
// executable, or libpython) and its mapping, if it maps one yet.
func mappedInterpreter(t testing.TB, pid int) (*python.Interpreter, symbolize.Mapping, bool) {
	t.Helper()
	snap, err := symbolize.New(symbolize.Options{}).Snapshot(pid)
	if err != nil {
		return nil, symbolize.Mapping{}, false
	}
	defer snap.Close()
	for _, m := range snap.Mappings {
		if !python.MaybeInterpreter(m.Path) {
			continue
		}
		f, err := elf.Open(m.Path)
		if err != nil {
			t.Fatal(err)
		}
		in, err := python.Inspect(f)
		f.Close()
		if errors.Is(err, python.ErrNotPython) {
			continue // the executable of a build with a shared libpython
		}
		if err != nil {
			t.Fatal(err)
		}
		return in, m, true
	}
	return nil, symbolize.Mapping{}, false
}

// BenchmarkPythonWalk measures what the CPython frame walk adds to the BPF
// program per sample of a Python process (kernel BPF stats). Two samplers
// with unwinding: auto run side by side at 2999 Hz; only one walks the
// python3.11 process's frames (ten deep). Reports both programs' mean run
// time per sample (every sample on the machine), the walk's cost per
// sample of the Python process, and the Python frames it recorded per
// sample. ns/op is the 200 ms window and means nothing.
func BenchmarkPythonWalk(b *testing.B) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enable BPF run-time stats: %v", err)
	}
	defer stats.Close()
	cfg := Config{FrequencyHz: 2999, Interval: time.Second, DWARFUnwind: true}
	off := openSampler(b, cfg)
	on := openSampler(b, cfg)
	pid := startPython(b, on, pythonDepth10)
	time.Sleep(100 * time.Millisecond)
	drain(b, off)
	drain(b, on)
	var pySamples, pyFrames uint64
	rt, runs := sideBySide(b, off, on, func(batch Batch) {
		for _, smp := range batch.Samples {
			if smp.PID == uint32(pid) {
				_, py, _ := SplitPythonFrames(smp.UserStack, nil)
				pySamples += smp.Count
				pyFrames += smp.Count * uint64(len(py))
			}
		}
	})
	if pySamples == 0 {
		b.Fatal("no samples of the Python process")
	}
	b.ReportMetric(perSample(rt[0], runs[0]), "native-bpf-ns/sample")
	b.ReportMetric(perSample(rt[1], runs[1]), "python-bpf-ns/sample")
	// Both programs ran for every sample on the machine; the difference
	// is the walk, spent on the Python process's samples only.
	b.ReportMetric(float64((rt[1]-rt[0]).Nanoseconds())/float64(pySamples), "walk-ns/python-sample")
	b.ReportMetric(float64(pyFrames)/float64(pySamples), "python-frames/sample")
}

// The kernel records the Python process's frames: ten or more per sample
// (spin, down ×9, <module>), each a code object address with the entry
// frame flagged once at the outermost one.
func TestPythonWalkRecordsFrames(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	pid := startPython(t, s, pythonDepth10)
	drain(t, s) // start-up (imports) is over: count from here
	var samples, deep uint64
	deadline := time.Now().Add(20 * time.Second)
	for samples < 100 && time.Now().Before(deadline) {
		time.Sleep(300 * time.Millisecond)
		for _, smp := range drain(t, s).Samples {
			if smp.PID != uint32(pid) || len(smp.UserStack) == 0 {
				continue
			}
			_, py, _ := SplitPythonFrames(smp.UserStack, nil)
			samples += smp.Count
			entries := 0
			for _, f := range py {
				if f.Entry {
					entries++
				}
			}
			if len(py) >= 11 && entries == 1 && py[len(py)-1].Entry {
				deep += smp.Count
			}
		}
	}
	if samples < 100 {
		t.Fatalf("only %d samples of python3.11", samples)
	}
	if float64(deep) < 0.95*float64(samples) {
		t.Errorf("%d of %d samples carry ≥ 11 Python frames ending in one entry frame", deep, samples)
	}
}

// BenchmarkPythonResolve is the agent's user-space cost of naming the
// Python frames of one sample (what the walk adds to symbolization):
// real samples of a 10-deep python3.11 program, every frame resolved
// through python.Process with its per-process cache, "cached" within an
// interval and "rechecked" as at the first use in a new interval (one
// read of each code object's header).
func BenchmarkPythonResolve(b *testing.B) {
	s := openSampler(b, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	pid := startPython(b, s, pythonDepth10)
	drain(b, s)
	time.Sleep(300 * time.Millisecond)
	var stacks [][]PythonFrame
	for _, smp := range drain(b, s).Samples {
		if smp.PID == uint32(pid) {
			if _, py, _ := SplitPythonFrames(smp.UserStack, nil); len(py) > 0 {
				stacks = append(stacks, py)
			}
		}
	}
	if len(stacks) == 0 {
		b.Fatal("no Python samples")
	}
	f, err := elf.Open("/usr/bin/python3.11")
	if err != nil {
		b.Fatal(err)
	}
	in, err := python.Inspect(f)
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	// Debian's python3.11 is not PIE: bias 0.
	proc := python.NewProcess("/proc", pid, in, 0)
	defer proc.Close()
	for _, mode := range []string{"cached", "rechecked"} {
		b.Run(mode, func(b *testing.B) {
			frames := 0
			for i := 0; b.Loop(); i++ {
				notBefore := time.Time{}
				if mode == "rechecked" {
					notBefore = time.Now().Add(time.Hour)
				}
				for _, fr := range stacks[i%len(stacks)] {
					if _, err := proc.Resolve(fr.Code, fr.Instr, notBefore); err != nil {
						b.Fatal(err)
					}
					frames++
				}
			}
			b.ReportMetric(float64(frames)/float64(b.N), "frames/sample")
		})
	}
}
