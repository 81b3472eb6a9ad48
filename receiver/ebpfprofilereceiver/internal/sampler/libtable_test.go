//go:build linux && privileged

package sampler

import (
	"bufio"
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
	if without.whole*10 > without.inLib {
		t.Fatalf("without the library's table, %d of %d stacks in the library reached the program: the library is walked by frame pointer and should not", without.whole, without.inLib)
	}

	setExeUnwind(t, s, lib, libText)
	before := drain(t, s).Stats
	with := runSpin(t, s, bin, lib)
	if with.whole*10 < with.inLib*9 {
		t.Errorf("with the library's table loaded, %d of %d stacks in the library reached the program through it", with.whole, with.inLib)
	}
	if with.stats.VMATables == 0 || with.stats.VMALookups < with.stats.VMATables {
		t.Errorf("memory map lookups %d, with a table %d (before: %+v)", with.stats.VMALookups, with.stats.VMATables, before)
	}
	t.Logf("stacks in the library reaching the program: %d of %d without its table, %d of %d with it; lookups %d, with a table %d",
		without.whole, without.inLib, with.whole, with.inLib, with.stats.VMALookups, with.stats.VMATables)
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
	if run.whole*10 < run.inLib*9 {
		t.Errorf("%d of %d stacks in the library reached the program", run.whole, run.inLib)
	}
	if run.stats.VMATables == 0 {
		t.Errorf("memory map lookups %d, none with a table", run.stats.VMALookups)
	}
	t.Logf("stacks in the library reaching the program: %d of %d; lookups %d, with a table %d",
		run.whole, run.inLib, run.stats.VMALookups, run.stats.VMATables)
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
	if run.whole*10 > run.inLib {
		t.Errorf("%d of %d stacks in the library reached the program: want the frame-pointer walk", run.whole, run.inLib)
	}
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
	inLib, whole uint64 // stacks with the leaf in the library; of them, those whose next frames are the library's and then the program's
	stats        Stats
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
// the paths its memory map shows.
func countSpin(t *testing.T, s *Sampler, pid int, bin, lib string) spinRun {
	t.Helper()
	binLo, binHi := execText(t, pid, bin)
	libLo, libHi := execText(t, pid, lib)
	in := func(pc, lo, hi uint64) bool { return pc >= lo && pc < hi }
	var r spinRun
	for deadline := time.Now().Add(60 * time.Second); r.inLib < 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d samples of %s in %s after 60 s", r.inLib, filepath.Base(bin), filepath.Base(lib))
		}
		b := drain(t, s)
		r.stats.VMALookups += b.Stats.VMALookups
		r.stats.VMATables += b.Stats.VMATables
		for _, smp := range b.Samples {
			st := smp.UserStack
			if smp.PID != uint32(pid) || len(st) == 0 || !in(st[0], libLo, libHi) {
				continue
			}
			r.inLib += smp.Count
			if len(st) >= 3 && in(st[1], libLo, libHi) && in(st[2], binLo, binHi) {
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
	if got.whole*10 < got.inLib*9 {
		t.Errorf("%d of %d stacks in the container's library reached its program (memory map lookups %d, with a table %d)", got.whole, got.inLib, got.stats.VMALookups, got.stats.VMATables)
	}
	if got.stats.VMATables == 0 {
		t.Errorf("memory map lookups %d, none with a table", got.stats.VMALookups)
	}
	t.Logf("stacks in the container's library reaching its program: %d of %d; lookups %d, with a table %d",
		got.whole, got.inLib, got.stats.VMALookups, got.stats.VMATables)
}
