//go:build linux && privileged

package sampler

import (
	"bufio"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/ehframe/ehframetest"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/overlaytest"
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
// compiler or linker is never read): the kernel finds the library in the
// process's memory map. Without the library's table the walk cannot get
// back to the program, so the same check fails.
func TestLibraryTableFoundThroughTheMemoryMap(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	bin, lib := buildSpin(t, spinMainSource)
	binText := loadTable(t, s, bin)
	libText := loadTable(t, s, lib)

	// The program's own table at exec (TestExeUnwindAtExec), and nothing
	// for the library: its frames are walked by frame pointer.
	setExeUnwind(t, s, bin, binText)
	without := runSpin(t, s, bin, lib)
	if without.whole*10 > without.inLeaf {
		t.Fatalf("without the library's table, %d of %d stacks in the library reached the program: the library is walked by frame pointer and should not", without.whole, without.inLeaf)
	}

	setExeUnwind(t, s, lib, libText)
	before := drain(t, s).Stats
	with := runSpin(t, s, bin, lib)
	if with.whole*10 < with.inLeaf*9 {
		t.Errorf("with the library's table loaded, %d of %d stacks in the library reached the program through it", with.whole, with.inLeaf)
	}
	if with.stats.VMATables == 0 || with.stats.VMALookups < with.stats.VMATables {
		t.Errorf("memory map lookups %d, with a table %d (before: %+v)", with.stats.VMALookups, with.stats.VMATables, before)
	}
	t.Logf("stacks in the library reaching the program: %d of %d without its table, %d of %d with it; lookups %d, with a table %d",
		without.whole, without.inLeaf, with.whole, with.inLeaf, with.stats.VMALookups, with.stats.VMATables)
}

// TestLibraryTableFoundForAProgramWithoutATable: a process whose program
// has no table (built with frame pointers, so none is loaded for it) has no
// unwind entry until user space reads it, and a short-lived one never is
// read. Its frames in a library without frame pointers still unwind with
// the library's table, found in its memory map: a walk by frame pointer
// alone would skip from the library's leaf past the frames that called it
// (glibc's ld.so and libc lose a dlopen's or a qsort's callers that way).
func TestLibraryTableFoundForAProgramWithoutATable(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
	bin, lib := buildSpin(t, spinMainSource, "-fno-omit-frame-pointer")
	setExeUnwind(t, s, lib, loadTable(t, s, lib))
	run := runSpin(t, s, bin, lib)
	if run.whole*10 < run.inLeaf*9 {
		t.Errorf("%d of %d stacks in the library reached the program", run.whole, run.inLeaf)
	}
	if run.stats.VMATables == 0 {
		t.Errorf("memory map lookups %d, none with a table", run.stats.VMALookups)
	}
	t.Logf("stacks in the library reaching the program: %d of %d; lookups %d, with a table %d",
		run.whole, run.inLeaf, run.stats.VMALookups, run.stats.VMATables)
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

const relayMainSource = `
#include <stdio.h>
long relay_outer(long);
int main(void) {
	long s = 0;
	puts("up");
	fflush(stdout);
	for (;;) s += relay_outer(100000 + (s & 1));
	return (int)s;
}
`

// TestTwoLibrariesFoundForAProgramWithoutATable: a program built with frame
// pointers calls a library that calls another, both without frame pointers
// and with their tables loaded. A sample can look one mapping up in the
// process's memory map (a second bpf_find_vma in the same timer interrupt
// fails), so one walk finds libspin.so, where the leaf is, and not
// librelay.so above it; the CPU's found-only entry keeps what the walks of
// the same process found, and from the next sample on both are known.
// Before, the entry started empty at every walk and no stack got past
// librelay.so.
func TestTwoLibrariesFoundForAProgramWithoutATable(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
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
	relay := filepath.Join(dir, "librelay.so")
	link(relay, relaySource, []string{spin}, "-fomit-frame-pointer", "-shared", "-fPIC", "-Wl,-soname,librelay.so")
	bin := filepath.Join(dir, "relaymain")
	link(bin, relayMainSource, []string{relay, spin}, "-fno-omit-frame-pointer")
	setExeUnwind(t, s, spin, loadTable(t, s, spin))
	setExeUnwind(t, s, relay, loadTable(t, s, relay))
	drain(t, s)
	cmd := startSpin(t, bin)
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	inBin, inSpin, inRelay := inText(t, pid, bin), inText(t, pid, spin), inText(t, pid, relay)
	run := countStacks(t, s, pid, "libspin.so", inSpin,
		// spin_inner <- spin_outer <- relay_inner <- relay_outer <- main
		func(st []uint64) bool {
			return len(st) >= 5 && inSpin(st[1]) && inRelay(st[2]) && inRelay(st[3]) && inBin(st[4])
		})
	if run.whole*10 < run.inLeaf*9 {
		t.Errorf("%d of %d stacks in libspin.so reached the program through librelay.so", run.whole, run.inLeaf)
	}
	t.Logf("stacks in libspin.so reaching the program through librelay.so: %d of %d", run.whole, run.inLeaf)
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
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return cmd
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
	var r spinRun
	for deadline := time.Now().Add(60 * time.Second); r.inLeaf < 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d samples of pid %d in %s after 60 s", r.inLeaf, pid, where)
		}
		b := drain(t, s)
		r.stats.VMALookups += b.Stats.VMALookups
		r.stats.VMATables += b.Stats.VMATables
		for _, smp := range b.Samples {
			st := smp.UserStack
			if smp.PID != uint32(pid) || len(st) == 0 || !leaf(st[0]) {
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
	s := openSampler(t, Config{FrequencyHz: 499, Interval: time.Second, DWARFUnwind: true})
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
	// The kernel looks the library up once and keeps what it found: its
	// lookups are counted from the exec on.
	drain(t, s)
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := out.ReadString('\n'); err != nil || line != "up\n" {
		t.Fatalf("container after its exec: %q, %v", line, err)
	}
	got := countSpin(t, s, pid, filepath.Join(rootfs, "spinmain"), filepath.Join(rootfs, "libspin.so"))
	if got.whole*10 < got.inLeaf*9 {
		t.Errorf("%d of %d stacks in the container's library reached its program (memory map lookups %d, with a table %d)", got.whole, got.inLeaf, got.stats.VMALookups, got.stats.VMATables)
	}
	if got.stats.VMATables == 0 {
		t.Errorf("memory map lookups %d, none with a table", got.stats.VMALookups)
	}
	t.Logf("stacks in the container's library reaching its program: %d of %d; lookups %d, with a table %d",
		got.whole, got.inLeaf, got.stats.VMALookups, got.stats.VMATables)
}
