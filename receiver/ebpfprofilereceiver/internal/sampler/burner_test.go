//go:build linux

package sampler

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// burnerSource burns CPU for argv[1] ms (wall clock) in argv[2] threads.
// Thread i burns under i%8 extra recursion levels, so threads differ in tid
// and stack. Tests compare sample counts with the CPU time the burner really
// got (rusage), so a busy machine slows nothing down and fails nothing.
const burnerSource = `
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static long ms;
volatile unsigned long sink;

static double now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void spin(double end) {
	while (now_ms() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
}

void level(int depth, double end) {
	if (depth <= 0)
		spin(end);
	else
		level(depth - 1, end);
	sink++;
}

void *worker(void *arg) {
	level((int)(long)arg % 8, now_ms() + ms);
	return 0;
}

int main(int argc, char **argv) {
	ms = atol(argv[1]);
	long n = argc > 2 ? atol(argv[2]) : 1;
	pthread_t t[256];
	if (n > 256)
		n = 256;
	for (long i = 1; i < n; i++)
		pthread_create(&t[i], 0, worker, (void *)i);
	worker(0);
	for (long i = 1; i < n; i++)
		pthread_join(t[i], 0);
	return 0;
}
`

var (
	burnerOnce sync.Once
	burnerPath string
	burnerErr  error
	burnerDir  string
)

// burner compiles the CPU burner once per test binary (gcc -O0 keeps every
// function and its frame pointer, so stacks unwind).
func burner(t testing.TB) string {
	t.Helper()
	burnerOnce.Do(func() {
		burnerDir, burnerErr = os.MkdirTemp("", "sampler-burner-")
		if burnerErr != nil {
			return
		}
		burnerPath, burnerErr = gcc(burnerDir, "burner", burnerSource, "-O0", "-fno-omit-frame-pointer", "-pthread")
	})
	if burnerErr != nil {
		t.Fatalf("build burner: %v", burnerErr)
	}
	return burnerPath
}

// buildC compiles a test's C program into the test's temporary directory.
func buildC(t testing.TB, name, source string, flags ...string) string {
	t.Helper()
	bin, err := gcc(t.TempDir(), name, source, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// gcc compiles source into dir/name with the given flags.
func gcc(dir, name, source string, flags ...string) (string, error) {
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	out, err := exec.Command("gcc", append(flags, "-o", bin, src)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("gcc %s: %w\n%s", name, err, out)
	}
	return bin, nil
}

// TestMain checks for leaked goroutines (written by hand, not by mdatagen
// like other packages' TestMain: the burner's directory has to go after the
// run).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if burnerDir != "" {
			os.RemoveAll(burnerDir)
		}
	}))
}

// startBurner runs the burner for d with n threads.
func startBurner(t testing.TB, d time.Duration, threads int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(burner(t), strconv.Itoa(int(d.Milliseconds())), strconv.Itoa(threads))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start burner: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// execRange is one executable mapping of a file.
type execRange struct{ lo, hi uint64 }

// execMappings returns the executable mappings of path in pid's address
// space, waiting while the dynamic loader sets them up.
func execMappings(t testing.TB, pid int, path string) []execRange {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if rs := readExecMappings(t, pid, path); len(rs) > 0 {
			return rs
		}
	}
	t.Fatalf("no executable mapping of %s in /proc/%d/maps after 30 s", path, pid)
	return nil
}

func readExecMappings(t testing.TB, pid int, path string) []execRange {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("read maps: %v", err)
	}
	defer f.Close()
	var rs []execRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 55d0c2a00000-55d0c2a01000 r-xp 00001000 08:01 1234  /path
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.Contains(fields[1], "x") || fields[5] != path {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		l, err1 := strconv.ParseUint(lo, 16, 64)
		h, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("parse maps line %q", sc.Text())
		}
		rs = append(rs, execRange{l, h})
	}
	return rs
}

func inRanges(addr uint64, rs []execRange) bool {
	for _, r := range rs {
		if addr >= r.lo && addr < r.hi {
			return true
		}
	}
	return false
}

// waitBurner waits for the burner and returns the CPU time it used.
func waitBurner(t testing.TB, cmd *exec.Cmd) time.Duration {
	t.Helper()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("burner: %v", err)
	}
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// stopBurner kills a burner started for longer than its test needs and
// returns the CPU time it got.
func stopBurner(t testing.TB, cmd *exec.Cmd) time.Duration {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("stop burner: %v", err)
	}
	_ = cmd.Wait() // "signal: killed"
	return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// threadCPU is the CPU time pid's main thread has had so far, to the
// nanosecond (the first field of /proc/PID/schedstat).
func threadCPU(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/schedstat: %v", pid, err)
	}
	return time.Duration(ns)
}

// expectSamples checks got against hz × cpu within a wide margin: the point
// is "sampled at roughly this rate", not timing precision (rusage and the
// sampling clock tick differently).
func expectSamples(t testing.TB, what string, got uint64, hz int, cpu time.Duration) {
	t.Helper()
	want := float64(hz) * cpu.Seconds()
	if float64(got) < 0.5*want-5 || float64(got) > 1.5*want+5 {
		t.Errorf("%s: %d samples, want about %.0f (%d Hz × %s CPU)", what, got, want, hz, cpu)
	}
}
