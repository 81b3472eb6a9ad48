//go:build linux && privileged

package sampler

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/internal/ehframe/ehframetest"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/overlaytest"
	"github.com/hotpath-dev/hotpath/internal/procfile"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
)

// libSpinSource is a library built without frame pointers whose hot
// function is called through another that keeps a frame: a walk by frame
// pointer cannot get from the leaf back to the program.
const libSpinSource = `
__attribute__((noinline)) long spin_inner(long n) {
	volatile long s = 0;
	for (long i = 0; i < n; i++) s += i * i;
	return s;
}
__attribute__((noinline)) long spin_outer(long n) {
	volatile long pad[4] = {n, n, n, n};
	return spin_inner(pad[0]) + pad[3];
}
__attribute__((noinline)) long spin_each(long n, long (*f)(long)) {
	long s = 0;
	for (long i = 0; i < n; i++) s += f(i);
	return s;
}
__attribute__((noinline)) long spin_calls(long n, long (*f)(long)) {
	volatile long pad[4] = {n, n, n, n};
	return spin_each(pad[0], f) + pad[3];
}
`

// spinMainSource calls the library until it is killed.
const spinMainSource = `
#include <stdio.h>
long spin_outer(long);
int main(void) {
	long s = 0;
	puts("up");
	fflush(stdout);
	for (;;) s += spin_outer(100000 + (s & 1));
	return (int)s;
}
`

// TestLibraryTableFoundThroughTheMemoryMap: a process that execs a program
// with a loaded table unwinds its frames in a library through that
// library's table as soon as the table is loaded for any process, before
// user space has read the process and given it its mappings (a short-lived
// compiler or linker is never read): the kernel finds the library among
// the files the process mapped, or in its memory map (findWays). Without
// the library's table the walk cannot get back to the program, so the same
// check fails.
func TestLibraryTableFoundThroughTheMemoryMap(t *testing.T) {
	for _, way := range findWays {
		t.Run(way.name, func(t *testing.T) {
			s := way.open(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
			bin, lib := buildSpin(t, spinMainSource)
			binText := loadTable(t, s, bin)
			libText := loadTable(t, s, lib)

			// The program's own table at exec (TestExeUnwindAtExec), and
			// nothing for the library: its frames are walked by frame
			// pointer.
			setExeUnwind(t, s, bin, binText)
			without := runSpin(t, s, bin, lib)
			if without.whole*10 > without.inLeaf {
				t.Fatalf("without the library's table, %d of %d stacks in the library reached the program: the library is walked by frame pointer and should not", without.whole, without.inLeaf)
			}

			setExeUnwind(t, s, lib, libText)
			with := runSpin(t, s, bin, lib)
			if with.whole*10 < with.inLeaf*9 {
				t.Errorf("with the library's table loaded, %d of %d stacks in the library reached the program through it", with.whole, with.inLeaf)
			}
			way.check(t, with.stats)
			t.Logf("stacks in the library reaching the program: %d of %d without its table, %d of %d with it; %s",
				without.whole, without.inLeaf, with.whole, with.inLeaf, lookups(with.stats))
		})
	}
}

// findWays are the two ways the kernel finds a library in a process user
// space has not read: the list of executable files the process mapped
// (proc_vma_store), and, for what is not in it (mapped before the sampler
// started, ld.so, or a kernel where the tracepoint cannot be attached),
// the process's memory map.
var findWays = []struct {
	name  string
	open  func(testing.TB, Config) *Sampler
	check func(*testing.T, Stats) // that the library was found this way
}{
	{"mapped files", func(t testing.TB, cfg Config) *Sampler {
		s := openSampler(t, cfg)
		if err := s.MappingsErr(); err != nil {
			t.Fatal(err)
		}
		return s
	}, func(t *testing.T, st Stats) {
		if st.MappedFiles == 0 {
			t.Errorf("no frame found in the files the process mapped; %s", lookups(st))
		}
	}},
	{"memory map", openWithoutMappedFiles, func(t *testing.T, st Stats) {
		if st.VMATables == 0 || st.VMALookups < st.VMATables || st.MappedFiles != 0 {
			t.Errorf("want memory-map look-ups that found a table, and nothing from mapped files; %s", lookups(st))
		}
	}},
}

// openWithoutMappedFiles opens a sampler without proc_vma_store: frames outside
// the mappings user space gave are looked up in the memory map.
func openWithoutMappedFiles(t testing.TB, cfg Config) *Sampler {
	t.Helper()
	s := openSamplerEdited(t, cfg, func(spec *ebpf.CollectionSpec) { delete(spec.Programs, cpuProfileProgProcVmaStore) })
	if s.MappingsErr() == nil {
		t.Fatal("the sampler kept the files processes map without its program")
	}
	return s
}

func lookups(st Stats) string {
	return fmt.Sprintf("found in mapped files %d, memory-map look-ups %d, with a table %d", st.MappedFiles, st.VMALookups, st.VMATables)
}

// TestLibraryTableFoundForAProgramWithoutATable: a process whose program
// has no table (built with frame pointers, so none is loaded for it) has no
// unwind entry until user space reads it, and a short-lived one never is
// read. Its frames in a library without frame pointers still unwind with
// the library's table, found in its memory map: a walk by frame pointer
// alone would skip from the library's leaf past the frames that called it
// (glibc's ld.so and libc lose a dlopen's or a qsort's callers that way).
func TestLibraryTableFoundForAProgramWithoutATable(t *testing.T) {
	for _, way := range findWays {
		t.Run(way.name, func(t *testing.T) {
			s := way.open(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
			bin, lib := buildSpin(t, spinMainSource, "-fno-omit-frame-pointer")
			setExeUnwind(t, s, lib, loadTable(t, s, lib))
			run := runSpin(t, s, bin, lib)
			if run.whole*10 < run.inLeaf*9 {
				t.Errorf("%d of %d stacks in the library reached the program", run.whole, run.inLeaf)
			}
			way.check(t, run.stats)
			t.Logf("stacks in the library reaching the program: %d of %d; %s", run.whole, run.inLeaf, lookups(run.stats))
		})
	}
}

// TestProgramRunningBeforeTheSamplerKeepsFramePointers: the walk through
// the memory map is for processes in the first seconds after their exec,
// before the receiver has attached their tables. A process without tables
// that exec'd before that (a Go service, or anything running when the agent
// started: the kernel has no exec time for it) keeps the frame-pointer walk,
// which is cheaper; so the library's frames here are not unwound with its
// table.
func TestProgramRunningBeforeTheSamplerKeepsFramePointers(t *testing.T) {
	bin, lib := buildSpin(t, spinMainSource, "-fno-omit-frame-pointer")
	pid := startSpin(t, bin).Process.Pid
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	setExeUnwind(t, s, lib, loadTable(t, s, lib))
	drain(t, s)
	run := countSpin(t, s, pid, bin, lib)
	// Not the lookups: they are counted for every process, and the
	// machine's others may be in their first seconds.
	if run.whole*10 > run.inLeaf {
		t.Errorf("%d of %d stacks in the library reached the program: want the frame-pointer walk", run.whole, run.inLeaf)
	}
}

// callbackMainSource passes a callback to the library, which calls it in a
// loop (as glibc's qsort calls a comparator). Built with frame pointers,
// the callback still gets no frame of its own: GCC sets none up in a
// function that calls nothing and keeps nothing on the stack.
const callbackMainSource = `
#include <stdio.h>
long spin_calls(long, long (*)(long));
__attribute__((noinline)) static long mix(long i) {
	long x = i;
	for (int k = 0; k < 64; k++) x = x * 6364136223846793005L + k;
	return x;
}
int main(void) {
	long s = 0;
	puts("up");
	fflush(stdout);
	for (;;) s += spin_calls(1000 + (s & 1), mix);
	return (int)s;
}
`

// TestFramelessCallbackCalledFromALibraryWithATable: a program built with
// frame pointers whose callback has no frame, called from a library without
// frame pointers whose table is loaded. At the callback, rbp is the
// library's (or a frame far above), so a frame-pointer step loses the
// library's frames and the program's that called it; the walk takes the
// word at the stack pointer as the callback's return address instead,
// since it points just after a call in the library, and goes on with the
// library's table. Stacks in the callback reach main through both library
// frames. With the walk as it was (frame pointer at the leaf), none did.
func TestFramelessCallbackCalledFromALibraryWithATable(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	// Not a position-independent executable: the callback's addresses at
	// run time are its symbol's.
	bin, lib := buildSpin(t, callbackMainSource, "-fno-omit-frame-pointer", "-no-pie")
	mixLo, mixHi := functionRange(t, bin, "mix")
	if frameless, err := startsWithoutFrame(bin, mixLo); err != nil || !frameless {
		t.Fatalf("mix in %s sets up a frame (%v): the test needs a callback without one", bin, err)
	}
	setExeUnwind(t, s, lib, loadTable(t, s, lib))
	drain(t, s)
	cmd := startSpin(t, bin)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	inBin, inLib := inText(t, pid, bin), inText(t, pid, lib)
	run := countStacks(t, s, pid, "the callback",
		func(pc uint64) bool { return pc >= mixLo && pc < mixHi },
		// mix <- spin_each <- spin_calls <- main
		func(st []uint64) bool { return len(st) >= 4 && inLib(st[1]) && inLib(st[2]) && inBin(st[3]) })
	if run.whole*10 < run.inLeaf*9 {
		t.Errorf("%d of %d stacks in the callback reached the program through the library", run.whole, run.inLeaf)
	}
	t.Logf("stacks in the callback reaching main through the library: %d of %d", run.whole, run.inLeaf)
}

// relaySource is a second library without frame pointers between the
// program and libspin.so.
const relaySource = `
long spin_outer(long);
__attribute__((noinline)) long relay_inner(long n) {
	volatile long pad[2] = {n, n};
	return spin_outer(pad[0]) + pad[1];
}
__attribute__((noinline)) long relay_outer(long n) {
	volatile long pad[4] = {n, n, n, n};
	return relay_inner(pad[0]) + pad[3];
}
`

// relayMainSource calls librelay.so n times (its argument) and exits, or
// without one until it is killed.
const relayMainSource = `
#include <stdio.h>
#include <stdlib.h>
long relay_outer(long);
int main(int argc, char **argv) {
	long s = 0, n = argc > 1 ? atol(argv[1]) : 0;
	if (n > 0) {
		for (long i = 0; i < n; i++) s += relay_outer(100000 + (s & 1));
		return (int)(s & 1);
	}
	puts("up");
	fflush(stdout);
	for (;;) s += relay_outer(100000 + (s & 1));
	return (int)s;
}
`

// TestTwoLibrariesFoundForAProgramWithoutATable: a program built with frame
// pointers calls a library that calls another, both without frame pointers
// and with their tables loaded, and the kernel looks them up in the memory
// map (no proc_vma_store: libraries mapped before the sampler started, or a
// kernel where it cannot be attached). A sample can look one mapping up
// there (a second bpf_find_vma in the same timer interrupt fails), so one
// walk finds libspin.so, where the leaf is, and not librelay.so above it;
// the CPU's found-only entry keeps what the walks of the same process
// found, and from the next sample on both are known. Before, the entry
// started empty at every walk and no stack got past librelay.so.
func TestTwoLibrariesFoundForAProgramWithoutATable(t *testing.T) {
	s := openWithoutMappedFiles(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	bin, relay, spin := buildRelay(t)
	setExeUnwind(t, s, spin, loadTable(t, s, spin))
	setExeUnwind(t, s, relay, loadTable(t, s, relay))
	drain(t, s)
	cmd := startSpin(t, bin)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	run := countStacks(t, s, pid, "libspin.so", inText(t, pid, spin), wholeThroughRelay(t, pid, bin, relay, spin))
	// Half, not nine in ten: on a loaded machine other processes sampled
	// on the CPU may share the program's slot and start the entry afresh,
	// and the next sample finds one library again (152 of 209 in a CI run
	// with four slots). An entry that kept nothing has none whole.
	if run.whole*2 < run.inLeaf {
		t.Errorf("%d of %d stacks in libspin.so reached the program through librelay.so", run.whole, run.inLeaf)
	}
	t.Logf("stacks in libspin.so reaching the program through librelay.so: %d of %d", run.whole, run.inLeaf)
}

// TestShortLivedProcessesWholeThroughTwoLibraries: relaymain's processes,
// which live a few milliseconds and are sampled in libspin.so about once
// each, have whole stacks through both libraries from their first sample.
// The kernel keeps the libraries each process maps (the maple tree's write
// tracepoint) and the walk takes them from there. A walk that looked each
// library up in the memory map found one a sample (the second bpf_find_vma
// in the timer's interrupt fails): libspin.so, where the leaf is, and the
// stack stopped at librelay.so (0 of 210 whole, without proc_vma_store).
func TestShortLivedProcessesWholeThroughTwoLibraries(t *testing.T) {
	if _, err := exec.LookPath("setarch"); err != nil {
		t.Fatalf("setarch (util-linux) runs the processes at the same addresses: %v", err)
	}
	s := findWays[0].open(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	bin, relay, spin := buildRelay(t)
	setExeUnwind(t, s, spin, loadTable(t, s, spin))
	setExeUnwind(t, s, relay, loadTable(t, s, relay))
	// Every process without address randomization: one that keeps
	// running shows where all of them have their code.
	norand := func(args ...string) *exec.Cmd {
		return exec.Command("setarch", append([]string{"x86_64", "-R", bin}, args...)...)
	}
	probe := norand()
	startUp(t, probe)
	inSpin := inText(t, probe.Process.Pid, spin)
	whole := wholeThroughRelay(t, probe.Process.Pid, bin, relay, spin)
	_ = probe.Process.Kill()
	_ = probe.Wait()
	drain(t, s)

	// Processes one after another, each calling the libraries 20 times
	// (a few milliseconds), until the count has its stacks.
	var started sync.Map
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			cmd := norand("20")
			if err := cmd.Start(); err != nil {
				done <- err
				return
			}
			started.Store(uint32(cmd.Process.Pid), true)
			if err := cmd.Wait(); err != nil {
				done <- err
				return
			}
		}
	}()
	run := countStacksOf(t, s, "libspin.so of short-lived processes",
		func(pid uint32) bool { _, ok := started.Load(pid); return ok }, inSpin, whole)
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	processes := 0
	started.Range(func(any, any) bool { processes++; return true })
	if run.whole*10 < run.inLeaf*9 {
		t.Errorf("%d of %d stacks in libspin.so of %d processes reached the program through librelay.so", run.whole, run.inLeaf, processes)
	}
	findWays[0].check(t, run.stats)
	t.Logf("stacks in libspin.so reaching the program through librelay.so: %d of %d, %d processes; %s",
		run.whole, run.inLeaf, processes, lookups(run.stats))
}

// swapMainSource loads the library of its first argument, spins in it for
// a fifth of a second of CPU time (its samples find it), unloads it, and
// loads the one of its second, which the loader maps where the first was
// (the same size), and spins in it; it prints where spin_outer was in
// each.
const swapMainSource = `
#include <dlfcn.h>
#include <stdio.h>
#include <time.h>
static double cpu_seconds(void) {
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
	if (argc < 3)
		return 2;
	void *a = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!a)
		return 1;
	long (*fa)(long) = (long (*)(long))dlsym(a, "spin_outer");
	long s = 0;
	for (double end = cpu_seconds() + 0.2; cpu_seconds() < end;)
		s += fa(100000 + (s & 1));
	dlclose(a);
	void *b = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
	if (!b)
		return 1;
	long (*f)(long) = (long (*)(long))dlsym(b, "spin_outer");
	printf("%p %p\n", (void *)fa, (void *)f);
	fflush(stdout);
	for (;;) s += f(100000 + (s & 1));
	return (int)s;
}
`

// TestLibraryMappedWhereAnotherWasIsFoundAsItself: the kept list of a
// process's mapped files is not told of munmap. A library loaded where an
// unloaded one was (dlclose, then dlopen of another of the same size)
// takes the old entry's slot, so the walk unwinds its frames with its own
// table. Were it added after the old entry, the walk would find the old
// library first (no table here) and cut every stack at the new one. The
// first library's samples have put its mapping among the CPU entries'
// found mappings; the new mapping makes the walk drop them (found_maps),
// or it would go on taking the old one from there.
func TestLibraryMappedWhereAnotherWasIsFoundAsItself(t *testing.T) {
	// The found mappings are kept in the process's own entry when its
	// program's table is loaded (the kernel gives it one at the exec), in
	// the CPU's otherwise: both are dropped.
	for _, entry := range []string{"the CPU's entry", "the process's entry"} {
		t.Run(entry, func(t *testing.T) {
			s := findWays[0].open(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
			dir := t.TempDir()
			var libs [2]string
			for i, name := range []string{"liba.so", "libb.so"} {
				lib, err := gcc(dir, name, libSpinSource, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,-soname,"+name)
				if err != nil {
					t.Fatal(err)
				}
				libs[i] = lib
			}
			bin, err := gcc(dir, "swapmain", swapMainSource, "-O2", "-fno-omit-frame-pointer")
			if err != nil {
				t.Fatal(err)
			}
			// A table for the second library only: the first's entry, if
			// the walk took it, has none.
			setExeUnwind(t, s, libs[1], loadTable(t, s, libs[1]))
			if entry == "the process's entry" {
				setExeUnwind(t, s, bin, loadTable(t, s, bin))
			}
			drain(t, s)
			cmd := exec.Command(bin, libs[0], libs[1])
			line := startUp(t, cmd)
			var fa, fb uint64
			if _, err := fmt.Sscanf(line, "0x%x 0x%x", &fa, &fb); err != nil {
				t.Fatalf("swapmain printed %q: %v", line, err)
			}
			if fa != fb {
				t.Fatalf("the second library is at %#x, the first was at %#x: the test needs the loader to map it where the first was", fb, fa)
			}
			pid := cmd.Process.Pid
			var own cpuProfileProcUnwind
			if err := s.objs.ProcUnwinds.Lookup(uint32(pid), &own); (err == nil) != (entry == "the process's entry") {
				t.Fatalf("the process's own entry: %v", err)
			}
			// The first library's samples, at the same addresses, are not
			// counted.
			drain(t, s)
			inBin, inLib := inText(t, pid, bin), inText(t, pid, libs[1])
			run := countStacks(t, s, pid, "libb.so", inLib,
				func(st []uint64) bool { return len(st) >= 3 && inLib(st[1]) && inBin(st[2]) })
			if run.whole*10 < run.inLeaf*9 {
				t.Errorf("%d of %d stacks in the library loaded where another was reached the program; %s", run.whole, run.inLeaf, lookups(run.stats))
			}
			t.Logf("stacks in libb.so reaching the program: %d of %d; %s", run.whole, run.inLeaf, lookups(run.stats))
		})
	}
}

// forkMainSource forks a child that spins in the library and prints the
// child's pid; the parent waits without running.
const forkMainSource = `
#include <stdio.h>
#include <unistd.h>
long spin_outer(long);
int main(void) {
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		long s = 0;
		for (;;) s += spin_outer(100000 + (s & 1));
		return (int)s;
	}
	printf("%d\n", (int)child);
	fflush(stdout);
	for (;;) pause();
}
`

// TestForkedChildWalkedWithItsParentsMappings: a child forked without an
// exec has no entry of its own until user space reads it (here, never).
// It runs its parent's image, so the walk takes the parent's mappings:
// the program's table, which the exec gave the parent, and the library
// found in the child's memory map. Without them its stacks were taken by
// frame pointer and cut at the library.
func TestForkedChildWalkedWithItsParentsMappings(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	bin, lib := buildSpin(t, forkMainSource, "-fno-omit-frame-pointer")
	setExeUnwind(t, s, bin, loadTable(t, s, bin))
	setExeUnwind(t, s, lib, loadTable(t, s, lib))
	drain(t, s)
	cmd := exec.Command(bin)
	line := startUp(t, cmd)
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("forkmain printed %q: %v", line, err)
	}
	// The child outlives a kill of the parent alone.
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
	parent := uint32(cmd.Process.Pid)
	waitAsleep(t, int(parent))
	var before, after, pu cpuProfileProcUnwind
	if err := s.objs.ProcUnwinds.Lookup(parent, &before); err != nil {
		t.Fatalf("the parent has no entry of its own: %v", err)
	}
	if err := s.objs.ProcUnwinds.Lookup(uint32(child), &pu); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("the child has an entry of its own: %v", err)
	}
	run := countSpin(t, s, child, bin, lib)
	if run.whole*10 < run.inLeaf*9 {
		t.Errorf("%d of %d stacks of the forked child in libspin.so reached the program; %s", run.whole, run.inLeaf, lookups(run.stats))
	}
	// The parent's entry is read, not written (the parent waits in
	// pause): what the child's walks found is kept in the CPU's entry.
	if err := s.objs.ProcUnwinds.Lookup(parent, &after); err != nil || after != before {
		t.Errorf("the parent's entry changed under the child's walks: %d found mappings before, %d after (%v)", before.FoundN, after.FoundN, err)
	}
	t.Logf("stacks of the forked child in libspin.so reaching the program: %d of %d; %s", run.whole, run.inLeaf, lookups(run.stats))
}

// waitAsleep waits until pid sleeps (state S in /proc/PID/stat): a
// process waiting in pause is not sampled again.
func waitAsleep(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := procfile.ReadStat(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		if st.State == 'S' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d not asleep after 30 s: state %c", pid, st.State)
		}
	}
}

// buildRelay builds relaymain, which calls librelay.so, which calls
// libspin.so: the libraries without frame pointers, the program with them.
func buildRelay(t *testing.T) (bin, relay, spin string) {
	t.Helper()
	dir := t.TempDir()
	spin, err := gcc(dir, "libspin.so", libSpinSource, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,-soname,libspin.so")
	if err != nil {
		t.Fatal(err)
	}
	// link compiles src into out against libs, which come after the
	// source that needs them.
	link := func(out, src string, libs []string, flags ...string) {
		t.Helper()
		file := out + ".c"
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"-O2"}, flags...), "-o", out, file, "-Wl,-rpath,$ORIGIN")
		if b, err := exec.Command("gcc", append(args, libs...)...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", filepath.Base(out), err, b)
		}
	}
	relay = filepath.Join(dir, "librelay.so")
	link(relay, relaySource, []string{spin}, "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,-soname,librelay.so")
	bin = filepath.Join(dir, "relaymain")
	link(bin, relayMainSource, []string{relay, spin}, "-fno-omit-frame-pointer")
	return bin, relay, spin
}

// wholeThroughRelay says whether a stack in libspin.so of pid (or of a
// process with its addresses) reaches main through both libraries:
// spin_inner <- spin_outer <- relay_inner <- relay_outer <- main.
func wholeThroughRelay(t *testing.T, pid int, bin, relay, spin string) func([]uint64) bool {
	t.Helper()
	inBin, inSpin, inRelay := inText(t, pid, bin), inText(t, pid, spin), inText(t, pid, relay)
	return func(st []uint64) bool {
		return len(st) >= 5 && inSpin(st[1]) && inRelay(st[2]) && inRelay(st[3]) && inBin(st[4])
	}
}

// functionRange is the address range of the function symbol name in the
// ELF file at path.
func functionRange(t *testing.T, path, name string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	for _, sym := range syms {
		if sym.Name == name && elf.ST_TYPE(sym.Info) == elf.STT_FUNC && sym.Size > 0 {
			return sym.Value, sym.Value + sym.Size
		}
	}
	t.Fatalf("no function %s in %s", name, path)
	return 0, 0
}

// startsWithoutFrame says whether the function at addr in the x86-64 ELF
// file at path begins with something else than push %rbp (0x55), with or
// without an endbr64 before it.
func startsWithoutFrame(path string, addr uint64) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_EXECINSTR == 0 || addr < sec.Addr || addr >= sec.Addr+sec.Size {
			continue
		}
		code := make([]byte, 5)
		if _, err := sec.ReadAt(code, int64(addr-sec.Addr)); err != nil {
			return false, err
		}
		if code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa {
			code = code[4:]
		}
		return code[0] != 0x55, nil
	}
	return false, fmt.Errorf("%#x is in no executable section of %s", addr, path)
}

// buildSpin compiles libSpinSource into libspin.so and mainSource, which
// calls it, into spinmain beside it: both without frame pointers unless
// mainFlags says otherwise for the program, the program finding the
// library in its own directory (a copy of the two elsewhere, an image's
// layer, runs as well).
func buildSpin(t *testing.T, mainSource string, mainFlags ...string) (bin, lib string) {
	t.Helper()
	dir := t.TempDir()
	lib, err := gcc(dir, "libspin.so", libSpinSource, "-O2", "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,-soname,libspin.so")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "spinmain.c")
	if err := os.WriteFile(src, []byte(mainSource), 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "spinmain")
	// The library after the source, which needs it.
	args := append(append([]string{"-O2", "-fomit-frame-pointer"}, mainFlags...), "-o", bin, src, lib, "-Wl,-rpath,$ORIGIN")
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc spinmain: %v\n%s", err, out)
	}
	return bin, lib
}

type loadedText struct {
	text FileText
	tab  UnwindTable
}

// loadTable compiles path's .eh_frame into a table in the kernel.
func loadTable(t *testing.T, s *Sampler, path string) loadedText {
	t.Helper()
	data, addr := ehframetest.Section(t, path)
	ut, err := unwindtable.Build(data, addr)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := s.LoadUnwindTable(ut.Rows)
	if err != nil {
		t.Fatal(err)
	}
	st, err := symbolize.OpenSymbolTable(path)
	if err != nil {
		t.Fatal(err)
	}
	off, ok := st.TextOffset()
	if !ok {
		t.Fatalf("%s has no one text offset", path)
	}
	return loadedText{FileText{Vaddr: st.TextVaddr(), Offset: off, OffsetKnown: true}, tab}
}

type spinRun struct {
	inLeaf, whole uint64 // stacks with the leaf where the count looked; of them, the whole ones
	stats         Stats
}

// setExeUnwind registers lt as the table of path's file (exe_unwinds).
func setExeUnwind(t *testing.T, s *Sampler, path string, lt loadedText) {
	t.Helper()
	id, err := fileid.Of(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetExeUnwind(id, lt.text, lt.tab); err != nil {
		t.Fatal(err)
	}
}

// runSpin runs bin until 200 of its samples are in and tallies them.
func runSpin(t *testing.T, s *Sampler, bin, lib string) spinRun {
	t.Helper()
	drain(t, s)
	cmd := startSpin(t, bin)
	// Stopped here, not only at the test's end: a test's next run should
	// not share the CPUs with this one.
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	return countSpin(t, s, cmd.Process.Pid, bin, lib)
}

// startSpin starts bin, stopped at the test's end at the latest, and
// returns it once it is up.
func startSpin(t *testing.T, bin string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin)
	startUp(t, cmd)
	return cmd
}

// startUp starts cmd, stopped at the test's end at the latest, and returns
// the first line it prints, which says it is up.
func startUp(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return line
}

// countSpin tallies pid's samples until 200 are in lib; bin and lib are
// the paths its memory map shows. Whole: the next frames are the library's
// and then the program's.
func countSpin(t *testing.T, s *Sampler, pid int, bin, lib string) spinRun {
	t.Helper()
	inBin, inLib := inText(t, pid, bin), inText(t, pid, lib)
	return countStacks(t, s, pid, filepath.Base(lib), inLib,
		func(st []uint64) bool { return len(st) >= 3 && inLib(st[1]) && inBin(st[2]) })
}

// inText says whether an address is in the executable mapping of path in
// pid.
func inText(t *testing.T, pid int, path string) func(uint64) bool {
	t.Helper()
	lo, hi := execText(t, pid, path)
	return func(pc uint64) bool { return pc >= lo && pc < hi }
}

// countStacks tallies pid's user stacks whose leaf is where leaf says until
// 200 are in, and of them those whole says are whole.
func countStacks(t *testing.T, s *Sampler, pid int, where string, leaf func(uint64) bool, whole func([]uint64) bool) spinRun {
	t.Helper()
	return countStacksOf(t, s, fmt.Sprintf("pid %d in %s", pid, where), func(p uint32) bool { return p == uint32(pid) }, leaf, whole)
}

// countStacksOf is countStacks for the processes of says are counted.
func countStacksOf(t *testing.T, s *Sampler, what string, of func(uint32) bool, leaf func(uint64) bool, whole func([]uint64) bool) spinRun {
	t.Helper()
	var r spinRun
	for deadline := time.Now().Add(60 * time.Second); r.inLeaf < 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d samples of %s after 60 s", r.inLeaf, what)
		}
		b := drain(t, s)
		r.stats.VMALookups += b.Stats.VMALookups
		r.stats.VMATables += b.Stats.VMATables
		r.stats.MappedFiles += b.Stats.MappedFiles
		for _, smp := range b.Samples {
			st := smp.UserStack
			if !of(smp.PID) || len(st) == 0 || !leaf(st[0]) {
				continue
			}
			r.inLeaf += smp.Count
			if whole(st) {
				r.whole += smp.Count
			}
		}
	}
	return r
}

// containerSpinMainSource is spinMainSource for a container: it waits for a
// line on stdin and then execs itself, so the test can load its tables
// under the identities its container's overlay mount gives its files
// before the exec, at which the kernel gives the process its program's
// table.
const containerSpinMainSource = `
#include <stdio.h>
#include <unistd.h>
long spin_outer(long);
int main(int argc, char **argv) {
	long s = 0;
	if (argc < 2) {
		char line[8];
		puts("mounted");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			return 1;
		execl("/proc/self/exe", argv[0], "spin", (char *)0);
		return 2;
	}
	puts("up");
	fflush(stdout);
	for (;;) s += spin_outer(100000 + (s & 1));
	return (int)s;
}
`

// TestOverlayLibraryTableFoundThroughTheMemoryMap is
// TestLibraryTableFoundThroughTheMemoryMap in a container: the program and
// its library come from an overlay mount, and user space keys their tables
// by the identities the mount shows (its own device number). The library's
// mapping holds the layer's file, on another device; the kernel's lookup
// keys it by the mount's, and finds the table.
func TestOverlayLibraryTableFoundThroughTheMemoryMap(t *testing.T) {
	for _, way := range findWays {
		t.Run(way.name, func(t *testing.T) {
			overlayLibraryTableFound(t, way.open(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true}), way.check)
		})
	}
}

func overlayLibraryTableFound(t *testing.T, s *Sampler, check func(*testing.T, Stats)) {
	bin, lib := buildSpin(t, containerSpinMainSource)
	dir := filepath.Dir(bin)
	im := overlaytest.NewImage(t, bin, "spinmain")
	im.Add(t, lib, "libspin.so")

	cmd := im.Command(t, 0, "spinmain")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	out := bufio.NewReader(stdout)
	if line, err := out.ReadString('\n'); err != nil || line != "mounted\n" {
		t.Fatalf("container: %q, %v", line, err)
	}
	pid := cmd.Process.Pid
	rootfs := im.Rootfs(0)
	for _, name := range []string{"spinmain", "libspin.so"} {
		inside := fmt.Sprintf("/proc/%d/root%s/%s", pid, rootfs, name)
		id, err := fileid.Of(inside)
		if err != nil {
			t.Fatal(err)
		}
		layer, err := fileid.Of(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if id.Dev == layer.Dev {
			t.Fatalf("%s: the overlay mount shows the device of the file it was copied from (%d)", name, id.Dev)
		}
		lt := loadTable(t, s, inside)
		if err := s.SetExeUnwind(id, lt.text, lt.tab); err != nil {
			t.Fatal(err)
		}
	}
	// The library is found from the exec on: what finds it is counted
	// from there.
	drain(t, s)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("container after its exec: %q, %v", line, err)
	}
	got := countSpin(t, s, pid, filepath.Join(rootfs, "spinmain"), filepath.Join(rootfs, "libspin.so"))
	if got.whole*10 < got.inLeaf*9 {
		t.Errorf("%d of %d stacks in the container's library reached its program (%s)", got.whole, got.inLeaf, lookups(got.stats))
	}
	check(t, got.stats)
	t.Logf("stacks in the container's library reaching its program: %d of %d; %s", got.whole, got.inLeaf, lookups(got.stats))
}

// The kernel keeps a sampled process's list of mapped files past its exit
// for user space, which takes it at the exit event: the receiver names a
// process gone before it could be read from it. Taking the list frees it.
func TestExitedProcessLeavesItsMappedFilesToUserSpace(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 199, Interval: 5 * time.Second, DWARFUnwind: true})
	if err := s.MappingsErr(); err != nil {
		t.Fatalf("mapped_files not kept: %v", err)
	}
	events := recordEvents(t, s)
	bin := burner(t)
	cmd := exec.Command(bin, "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	events.watchExit(pid)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	events.waitExit(t, s, "the burner")
	files, err := s.TakeMappedFiles(uint32(pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]fileid.ID{}
	for _, path := range []string{bin, "/lib64/ld-linux-x86-64.so.2"} {
		id, err := fileid.Of(path)
		if err != nil {
			t.Fatal(err)
		}
		want[path] = id
	}
	for path, id := range want {
		found := false
		for _, f := range files {
			if id.Size = 0; f.File == id {
				found = true
				if f.Start >= f.Limit || f.Offset%uint64(os.Getpagesize()) != 0 {
					t.Errorf("%s's mapping %#x-%#x at offset %#x is no mapping", path, f.Start, f.Limit, f.Offset)
				}
			}
		}
		if !found {
			t.Errorf("no mapping of %s (%+v) among the %d the kernel kept for pid %d: %+v", path, id, len(files), pid, files)
		}
	}
	if again, err := s.TakeMappedFiles(uint32(pid)); err != nil || len(again) != 0 {
		t.Errorf("taken a second time: %d mappings, error %v; want none", len(again), err)
	}
}
