//go:build linux && privileged

package unwinder

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/binarycache"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/overlaytest"

	"go.uber.org/zap/zaptest"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// These tests drive the real sampler (BPF maps in the kernel): they need
// root and fail without it.

const spinC = `#include <unistd.h>
int main(void) { for (;;) pause(); }
`

// build compiles spinC with flags into dir.
func build(t *testing.T, name string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "spin.c")
	if err := os.WriteFile(src, []byte(spinC), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	if out, err := exec.Command("gcc", append(flags, "-o", bin, src)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// start runs bin and returns a snapshot of it once the loader has mapped
// its libraries.
func start(t *testing.T, sym *symbolize.Symbolizer, bin string) *symbolize.Process {
	t.Helper()
	return startCommand(t, sym, exec.Command(bin), "")
}

// startCommand runs cmd and returns a snapshot of it once the loader has
// mapped its libraries and, when exe is not "", a file whose path ends
// in exe (a command that execs it).
func startCommand(t *testing.T, sym *symbolize.Symbolizer, cmd *exec.Cmd, exe string) *symbolize.Process {
	t.Helper()
	return startMapping(t, sym, cmd, "libc.so", exe)
}

// startMapping runs cmd and returns a snapshot of it once it maps files
// whose paths contain each of names.
func startMapping(t *testing.T, sym *symbolize.Symbolizer, cmd *exec.Cmd, names ...string) *symbolize.Process {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; {
		p, err := sym.Snapshot(cmd.Process.Pid)
		if err == nil && !slices.ContainsFunc(names, func(name string) bool { return !hasMapping(p, name) }) {
			t.Cleanup(func() { p.Close() })
			return p
		}
		if err == nil {
			p.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never mapped %q (%v)", cmd.Path, names, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func hasMapping(p *symbolize.Process, name string) bool {
	for _, m := range p.Mappings {
		if strings.Contains(m.Path, name) {
			return true
		}
	}
	return false
}

func openSampler(t *testing.T, hz int) *sampler.Sampler {
	t.Helper()
	s, err := sampler.Open(sampler.Config{FrequencyHz: hz, Interval: time.Second, DWARFUnwind: true})
	if err != nil {
		t.Fatalf("open sampler (needs root): %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A process whose binaries all keep frame pointers stays on the fast path
// except for glibc, which Debian builds without them; tables are shared
// between processes and survive them within the budget.
func TestAttachLoadsTablesOnlyForBinariesWithoutFramePointers(t *testing.T) {
	s := openSampler(t, 19)
	sym := symbolize.New(symbolize.Options{})
	u := New(s, sym, 64<<20, nil, zaptest.NewLogger(t))

	fp := start(t, sym, build(t, "fp", "-O2", "-fno-omit-frame-pointer"))
	nofp := start(t, sym, build(t, "nofp", "-O2", "-fomit-frame-pointer"))

	dwarf, err := u.Attach(fp, nil)
	if err != nil || !dwarf {
		t.Fatalf("Attach(frame-pointer binary + glibc) = %v, %v; want true (glibc lacks frame pointers)", dwarf, err)
	}
	st := u.Stats()
	if st.Tables != 2 || st.Processes != 1 || st.TableBytes == 0 {
		t.Fatalf("after the frame-pointer process: %+v, want two tables (glibc, ld.so) for one process", st)
	}
	if _, err := u.Attach(nofp, nil); err != nil {
		t.Fatal(err)
	}
	st = u.Stats()
	if st.Tables != 3 || st.Processes != 2 {
		t.Fatalf("after the no-frame-pointer process: %+v, want three tables (glibc and ld.so shared, nofp's own)", st)
	}
	// Re-reading a process (exec, refresh) must not double-count users.
	if _, err := u.Attach(nofp, nil); err != nil {
		t.Fatal(err)
	}
	if err := u.Detach(nofp.PID); err != nil {
		t.Fatal(err)
	}
	if err := u.Detach(fp.PID); err != nil {
		t.Fatal(err)
	}
	st = u.Stats()
	if st.Processes != 0 || st.Tables != 3 {
		t.Fatalf("after both exited: %+v; tables stay cached for the next process", st)
	}
	for _, b := range u.binaries {
		if b.users != 0 {
			t.Errorf("%s still has %d users", b.path, b.users)
		}
	}
}

// TestNeedsWorkDuringAnalysisAndLoad: while Attach analyses a binary it
// has not seen (compiling a large C++ binary's .eh_frame takes hundreds of
// milliseconds) or loads its table into the kernel, the process reader can
// still ask about the next new process: a short-lived one must not wait and
// exit unread.
func TestNeedsWorkDuringAnalysisAndLoad(t *testing.T) {
	for _, stage := range []string{"analyse", "load"} {
		t.Run(stage, func(t *testing.T) {
			sym := symbolize.New(symbolize.Options{})
			u := New(openSampler(t, 19), sym, 64<<20, nil, zaptest.NewLogger(t))
			first := start(t, sym, build(t, "first", "-O2", "-fomit-frame-pointer"))
			next := start(t, sym, build(t, "next", "-O2", "-fomit-frame-pointer"))
			working, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			u.testHookWork = func(what string) {
				if what == stage {
					once.Do(func() { close(working); <-release })
				}
			}
			type result struct {
				dwarf bool
				err   error
			}
			attached := make(chan result)
			go func() {
				dwarf, err := u.Attach(first, nil)
				attached <- result{dwarf, err}
			}()
			<-working
			asked := make(chan bool)
			go func() { asked <- u.NeedsWork(next) }()
			select {
			case needs := <-asked:
				if !needs {
					t.Error("NeedsWork(a process of a binary never analysed) = false")
				}
			case <-time.After(30 * time.Second):
				t.Errorf("NeedsWork waited for another binary's %s", stage)
			}
			close(release)
			if r := <-attached; !r.dwarf || r.err != nil {
				t.Fatalf("Attach(binary without frame pointers) = %v, %v; want true", r.dwarf, r.err)
			}
			if u.NeedsWork(first) {
				t.Error("NeedsWork(the process just attached) = true")
			}
		})
	}
}

// While Attach loads a new binary's table into the kernel, the exec and
// exit events (Detach) and the attaching of a process whose tables are
// loaded go on: before, they waited for the load, and a short-lived
// process's events were handled hundreds of milliseconds late. A second
// process of the binary being loaded waits for that load and shares its
// table: it is loaded once.
func TestDetachAndAttachDuringALoad(t *testing.T) {
	sym := symbolize.New(symbolize.Options{})
	u := New(openSampler(t, 19), sym, 64<<20, nil, zaptest.NewLogger(t))
	// -O1: another build of the same source, which would share the
	// known binary's table.
	knownBin, newBin := build(t, "known", "-O2", "-fomit-frame-pointer"), build(t, "new", "-O1", "-fomit-frame-pointer")
	known, sameBinary := start(t, sym, knownBin), start(t, sym, knownBin)
	first, second := start(t, sym, newBin), start(t, sym, newBin)
	if dwarf, err := u.Attach(known, nil); !dwarf || err != nil {
		t.Fatalf("Attach(known) = %v, %v", dwarf, err)
	}
	loaded := u.Stats()

	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	u.testHookWork = func(what string) {
		if what == "load" {
			once.Do(func() { close(loading); <-release })
		}
	}
	type result struct {
		dwarf bool
		err   error
	}
	attach := func(p *symbolize.Process) chan result {
		c := make(chan result, 1)
		go func() {
			dwarf, err := u.Attach(p, nil)
			c <- result{dwarf, err}
		}()
		return c
	}
	firstDone := attach(first)
	select {
	case <-loading:
	case r := <-firstDone:
		t.Fatalf("Attach(a process of a new binary) = %v, %v without loading a table", r.dwarf, r.err)
	}
	others := make(chan error)
	go func() {
		err := u.Detach(known.PID)
		if r := <-attach(sameBinary); err == nil && (!r.dwarf || r.err != nil) {
			err = fmt.Errorf("Attach(a process of a loaded binary) = %v, %v; want true, nil", r.dwarf, r.err)
		}
		others <- err
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Error("Detach and Attach of a process of loaded binaries waited for another binary's table load")
	}
	secondDone := attach(second)
	close(release)
	for name, c := range map[string]chan result{"first": firstDone, "second": secondDone} {
		if r := <-c; !r.dwarf || r.err != nil {
			t.Errorf("Attach(%s process of the new binary) = %v, %v; want true, nil", name, r.dwarf, r.err)
		}
	}
	st := u.Stats()
	if st.Tables != loaded.Tables+1 || st.Processes != 3 {
		t.Fatalf("after both processes of the new binary: %+v (%d tables before); want one more table, three processes", st, loaded.Tables)
	}
	if a, b := u.procs[uint32(first.PID)].users[0], u.procs[uint32(second.PID)].users[0]; a != b || !strings.HasSuffix(a.path, "/new") || a.users != 2 {
		t.Fatalf("first process's table %s (%d users), second's %s; want the new binary's, shared", a.path, a.users, b.path)
	}
}

// With a budget below glibc's table, nothing is loaded, the failure is
// counted and the process keeps frame pointers. A full budget evicts
// unused tables to make room, never ones the process being attached uses:
// those it maps already loaded stay, and a new table that does not fit
// beside them is left out.
func TestBudget(t *testing.T) {
	s := openSampler(t, 19)
	sym := symbolize.New(symbolize.Options{})

	tiny := New(s, sym, 4<<10, nil, zaptest.NewLogger(t))
	p := start(t, sym, build(t, "fp", "-O2", "-fno-omit-frame-pointer"))
	dwarf, err := tiny.Attach(p, nil)
	if dwarf || err == nil || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("Attach over budget = %v, %v; want false and a budget error", dwarf, err)
	}
	if st := tiny.Stats(); st.OverBudget == 0 || st.Tables != 0 || st.Processes != 0 || st.TableBytes != 0 {
		t.Fatalf("over budget: %+v", st)
	}

	// A budget of glibc's and ld.so's tables: the second process's own
	// table does not fit beside them, and they are its own too.
	one := New(s, sym, 0, nil, zaptest.NewLogger(t))
	one.maxBytes = 1 << 40
	if _, err := one.Attach(p, nil); err != nil {
		t.Fatal(err)
	}
	glibc := one.Stats().TableBytes
	one.maxBytes = glibc
	if err := one.Detach(p.PID); err != nil {
		t.Fatal(err)
	}
	q := start(t, sym, build(t, "nofp", "-O2", "-fomit-frame-pointer"))
	dwarf, err = one.Attach(q, nil)
	if !dwarf || err == nil || !strings.Contains(err.Error(), "/nofp") || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("Attach(nofp) = %v, %v; want glibc's and ld.so's tables, a budget error for its own", dwarf, err)
	}
	st := one.Stats()
	if st.Evicted != 0 || st.OverBudget != 1 || st.Tables != 2 || st.TableBytes != glibc {
		t.Fatalf("after nofp: %+v; want glibc's and ld.so's tables (%d bytes) kept and one table over budget", st, glibc)
	}
	if got := one.procs[uint32(q.PID)].users; len(got) != 2 || slices.ContainsFunc(got, func(b *binary) bool { return strings.HasSuffix(b.path, "/nofp") }) {
		t.Fatalf("tables of nofp: %v; want glibc's and ld.so's", got)
	}

	// Once nofp is gone, a static binary's table (glibc's code in it)
	// evicts the unused ones to fit.
	if err := one.Detach(q.PID); err != nil {
		t.Fatal(err)
	}
	r := startMapping(t, sym, exec.Command(build(t, "static", "-O2", "-fomit-frame-pointer", "-static")), "/static")
	if dwarf, err := one.Attach(r, nil); !dwarf || err != nil {
		t.Fatalf("Attach(static) = %v, %v; want its table, with room made", dwarf, err)
	}
	st = one.Stats()
	if st.Evicted == 0 || st.TableBytes > one.maxBytes || st.Tables == 0 {
		t.Fatalf("after the static binary: %+v; want unused tables evicted within the budget of %d bytes", st, one.maxBytes)
	}
	if got := one.procs[uint32(r.PID)].users; len(got) != 1 || !strings.HasSuffix(got[0].path, "/static") {
		t.Fatalf("tables of the static binary: %v", got)
	}
	t.Logf("glibc + ld.so tables %d bytes; with a budget of %d: %+v", glibc, one.maxBytes, st)
}

// Go binaries keep frame pointers: no tables, no entry.
func TestGoProcessStaysOnFramePointers(t *testing.T) {
	s := openSampler(t, 19)
	sym := symbolize.New(symbolize.Options{})
	u := New(s, sym, 64<<20, nil, zaptest.NewLogger(t))
	dir := t.TempDir()
	for name, text := range map[string]string{
		"main.go": "package main\n\nimport \"time\"\n\nfunc main() { time.Sleep(time.Hour) }\n",
		"go.mod":  "module sleeper\n\ngo 1.26\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "sleeper")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := exec.Command(bin)
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = run.Process.Kill(); _ = run.Wait() })
	p, err := sym.Snapshot(run.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dwarf, err := u.Attach(p, nil)
	if dwarf || err != nil {
		t.Fatalf("Attach(Go test binary) = %v, %v; want frame pointers", dwarf, err)
	}
	if st := u.Stats(); st.Tables != 0 || st.Processes != 0 {
		t.Fatalf("%+v", st)
	}
}

// After a restart, what was derived from each binary comes from the disk
// cache: the frame-pointer verdict without reading the binary's symbols, the
// rows of binaries without frame pointers without parsing .eh_frame again —
// and the kernel gets the same tables.
func TestDiskCacheAcrossRestart(t *testing.T) {
	s := openSampler(t, 19)
	dir := t.TempDir()
	fpBin := build(t, "fp", "-O2", "-fno-omit-frame-pointer")
	nofpBin := build(t, "nofp", "-O2", "-fomit-frame-pointer")

	attachBoth := func() (Stats, binarycache.Stats, symbolize.Stats) {
		disk, err := binarycache.Open(dir, 64<<20, zaptest.NewLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		sym := symbolize.New(symbolize.Options{})
		u := New(s, sym, 64<<20, disk, zaptest.NewLogger(t))
		for _, bin := range []string{fpBin, nofpBin} {
			p := start(t, sym, bin)
			if dwarf, err := u.Attach(p, nil); err != nil || !dwarf {
				t.Fatalf("Attach(%s) = %v, %v", bin, dwarf, err)
			}
			if err := u.Detach(p.PID); err != nil {
				t.Fatal(err)
			}
		}
		st := u.Stats()
		for _, b := range u.binaries { // unload, as a stopped agent would
			if b.loaded() {
				_ = s.DeleteUnwindTable(b.table.ID)
			}
		}
		return st, disk.Stats(), sym.Stats()
	}
	first, firstDisk, firstSym := attachBoth()
	second, secondDisk, secondSym := attachBoth()
	t.Logf("first run: %+v, disk %+v, symbol tables read %d; after restart: %+v, disk %+v, symbol tables read %d",
		first, firstDisk, firstSym.Loads, second, secondDisk, secondSym.Loads)
	if firstDisk.Writes == 0 || firstDisk.Hits != 0 {
		t.Fatalf("first run wrote nothing or hit an empty cache: %+v", firstDisk)
	}
	if secondDisk.Hits == 0 || secondDisk.Writes != 0 {
		t.Fatalf("after restart: %+v, want hits and no writes", secondDisk)
	}
	if second.Tables != first.Tables || second.TableBytes != first.TableBytes {
		t.Errorf("kernel tables after restart %d (%d bytes), first run %d (%d bytes)", second.Tables, second.TableBytes, first.Tables, first.TableBytes)
	}
	if secondSym.Loads >= firstSym.Loads {
		t.Errorf("symbol tables read: %d after restart, %d before; the frame-pointer binary's verdict should come from disk", secondSym.Loads, firstSym.Loads)
	}
}

// recordingKernel is the real sampler, with the process entries the
// unwinder writes and forgets, and the tables it unloads, noted.
type recordingKernel struct {
	*sampler.Sampler
	set, forgotten []uint32
	unloaded       []uint32
	exeSet         []fileid.ID
	exeUnloaded    []fileid.ID
	errs           []error
}

func (k *recordingKernel) SetExeUnwind(id fileid.ID, text sampler.FileText, t sampler.UnwindTable) error {
	k.exeSet = append(k.exeSet, id)
	return k.Sampler.SetExeUnwind(id, text, t)
}

func (k *recordingKernel) DeleteUnwindTable(id uint32) error {
	k.unloaded = append(k.unloaded, id)
	err := k.Sampler.DeleteUnwindTable(id)
	if err != nil {
		k.errs = append(k.errs, err)
	}
	return err
}

func (k *recordingKernel) DeleteExeUnwind(id fileid.ID) error {
	k.exeUnloaded = append(k.exeUnloaded, id)
	err := k.Sampler.DeleteExeUnwind(id)
	if err != nil {
		k.errs = append(k.errs, err)
	}
	return err
}

func (k *recordingKernel) SetProcessUnwind(pid uint32, ms []sampler.UnwindMapping) error {
	k.set = append(k.set, pid)
	return k.Sampler.SetProcessUnwind(pid, ms)
}

func (k *recordingKernel) DeleteProcessUnwindIfSet(pid uint32, ms []sampler.UnwindMapping) error {
	k.forgotten = append(k.forgotten, pid)
	return k.Sampler.DeleteProcessUnwindIfSet(pid, ms)
}

// A process that exec'd while it was being read is not written to the
// kernel (which gave the new image its own table at exec), and the tables
// taken for it are released; a later Detach forgets only what was written.
func TestAttachOfAnImageLeftBehindWritesNothing(t *testing.T) {
	k := &recordingKernel{Sampler: openSampler(t, 19)}
	sym := symbolize.New(symbolize.Options{})
	u := New(k, sym, 64<<20, nil, zaptest.NewLogger(t))
	nofp := start(t, sym, build(t, "nofp", "-O2", "-fomit-frame-pointer"))

	dwarf, err := u.Attach(nofp, func() bool { return false })
	if err != nil || dwarf {
		t.Fatalf("Attach of a process that exec'd meanwhile = %v, %v; want false, nil", dwarf, err)
	}
	if st := u.Stats(); len(k.set) != 0 || st.Processes != 0 || u.lru.Len() != st.Tables {
		t.Fatalf("after it: kernel writes for pids %v, %+v, %d unused tables; want no write, no process, every table unused", k.set, st, u.lru.Len())
	}
	if err := u.Detach(nofp.PID); err != nil || len(k.forgotten) != 0 {
		t.Fatalf("Detach of a process never written: %v, forgot %v", err, k.forgotten)
	}

	if dwarf, err := u.Attach(nofp, func() bool { return true }); err != nil || !dwarf || len(k.set) != 1 {
		t.Fatalf("Attach of the current image = %v, %v, writes %v; want one write", dwarf, err, k.set)
	}
	if err := u.Detach(nofp.PID); err != nil || len(k.forgotten) != 1 {
		t.Fatalf("Detach: %v, forgot %v; want the written entry forgotten", err, k.forgotten)
	}
}

// A table no live process has used for KeepUnused leaves the kernel, which
// charges it to the agent's memory cgroup, and takes the entry that gives
// it to a process at exec along; a table a live process uses stays however
// long, and the next process of an expired binary gets its table again.
// Binaries no process was attached with for KeepUnused are forgotten
// unless a live process uses their tables.
func TestExpireUnloadsTablesNoLiveProcessUses(t *testing.T) {
	k := &recordingKernel{Sampler: openSampler(t, 19)}
	sym := symbolize.New(symbolize.Options{})
	u := New(k, sym, 64<<20, nil, zaptest.NewLogger(t))
	nofpBin := build(t, "nofp", "-O2", "-fomit-frame-pointer")
	fp := start(t, sym, build(t, "fp", "-O2", "-fno-omit-frame-pointer"))
	nofp := start(t, sym, nofpBin)
	for _, p := range []*symbolize.Process{fp, nofp} {
		if dwarf, err := u.Attach(p, nil); err != nil || !dwarf {
			t.Fatalf("Attach(%d) = %v, %v; want tables", p.PID, dwarf, err)
		}
	}
	loaded := u.Stats()
	// The process's own binary comes first (lowest address).
	own := u.procs[uint32(nofp.PID)].users[0]
	ownID, ownTable, ownBytes := own.ids[0], own.table.ID, own.table.Bytes
	if loaded.Tables != 3 || !strings.HasSuffix(own.path, "/nofp") || !u.ExecTable(ownID) {
		t.Fatalf("after both: %+v, first table %s, at exec %v; want three tables (glibc and ld.so shared, nofp's own), nofp's given at exec",
			loaded, own.path, u.ExecTable(ownID))
	}
	if err := u.Detach(nofp.PID); err != nil {
		t.Fatal(err)
	}
	exited := time.Now()

	u.Expire(exited.Add(KeepUnused - time.Second))
	if st := u.Stats(); st.Tables != 3 || st.Expired != 0 || len(k.unloaded) != 0 {
		t.Fatalf("%v after the last user left: %+v, unloaded %v; want all three still loaded", KeepUnused-time.Second, st, k.unloaded)
	}
	// A day later: the frame-pointer process still runs on glibc's and
	// ld.so's tables.
	u.Expire(exited.Add(24 * time.Hour))
	st := u.Stats()
	if st.Tables != 2 || st.Expired != 1 || st.TableBytes != loaded.TableBytes-ownBytes || st.Binaries != 2 {
		t.Fatalf("a day after nofp exited: %+v (%d binaries before); want its table (%d bytes) unloaded, the two in use kept, and only their binaries remembered",
			st, loaded.Binaries, ownBytes)
	}
	if len(k.unloaded) != 1 || k.unloaded[0] != ownTable || len(k.exeUnloaded) != 1 || k.exeUnloaded[0] != ownID || u.ExecTable(ownID) {
		t.Fatalf("kernel: tables unloaded %v, exec-time entries %v (want table %d, file %v); given at exec still: %v",
			k.unloaded, k.exeUnloaded, ownTable, ownID, u.ExecTable(ownID))
	}

	again := start(t, sym, nofpBin)
	if !u.NeedsWork(again) {
		t.Error("NeedsWork(a process of a binary whose table expired) = false")
	}
	if dwarf, err := u.Attach(again, nil); err != nil || !dwarf {
		t.Fatalf("Attach(a new process of the expired binary) = %v, %v; want its table again", dwarf, err)
	}
	if st := u.Stats(); st.Tables != 3 || !u.ExecTable(ownID) {
		t.Fatalf("after the new process: %+v, at exec %v; want its table loaded again", st, u.ExecTable(ownID))
	}

	for _, p := range []*symbolize.Process{fp, again} {
		if err := u.Detach(p.PID); err != nil {
			t.Fatal(err)
		}
	}
	u.Expire(time.Now().Add(KeepUnused))
	if st := u.Stats(); st.Tables != 0 || st.TableBytes != 0 || st.Expired != 4 || len(k.unloaded) != 4 || st.Binaries != 0 {
		t.Fatalf("once no process is left: %+v, unloaded %v; want every table unloaded and every binary forgotten", st, k.unloaded)
	}
	if len(k.errs) != 0 {
		t.Fatalf("the kernel refused: %v", k.errs)
	}
}

// Attach looks a process's binaries up before it takes the lock Expire
// takes: a binary found loaded there and forgotten by an Expire in between
// gets its table again, compiled anew.
func TestExpireBetweenLookupAndLoad(t *testing.T) {
	sym := symbolize.New(symbolize.Options{})
	u := New(openSampler(t, 19), sym, 64<<20, nil, zaptest.NewLogger(t))
	bin := build(t, "nofp", "-O2", "-fomit-frame-pointer")
	first := start(t, sym, bin)
	if dwarf, err := u.Attach(first, nil); err != nil || !dwarf {
		t.Fatalf("Attach(first) = %v, %v", dwarf, err)
	}
	if err := u.Detach(first.PID); err != nil {
		t.Fatal(err)
	}
	loaded := u.Stats()
	next := start(t, sym, bin)
	var forgot Stats
	u.testHookWork = func(what string) {
		if what == "lock" && forgot.Expired == 0 {
			u.Expire(time.Now().Add(24 * time.Hour))
			forgot = u.Stats()
		}
	}
	if dwarf, err := u.Attach(next, nil); err != nil || !dwarf {
		t.Fatalf("Attach(next) = %v, %v; want its tables", dwarf, err)
	}
	if forgot.Tables != 0 || forgot.Binaries != 0 {
		t.Fatalf("Expire in between left %+v; want nothing loaded or known", forgot)
	}
	if st := u.Stats(); st.Tables != loaded.Tables || st.TableBytes != loaded.TableBytes || st.Processes != 1 {
		t.Fatalf("after Attach(next): %+v; want the %d tables (%d bytes) the first process had", st, loaded.Tables, loaded.TableBytes)
	}
}

// Files of one build under different identities (one image layer under each
// container's overlay mount, which gives each its own device number; here a
// copy) share one binary: analysed once, one table in the kernel, given at
// exec under each identity, and taken back under each when it is unloaded.
func TestFilesOfOneBuildShareATable(t *testing.T) {
	k := &recordingKernel{Sampler: openSampler(t, 19)}
	sym := symbolize.New(symbolize.Options{})
	u := New(k, sym, 64<<20, nil, zaptest.NewLogger(t))
	bin := build(t, "nofp", "-O2", "-fomit-frame-pointer")
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "nofp-copy")
	if err := os.WriteFile(cp, data, 0o755); err != nil {
		t.Fatal(err)
	}
	var procs []*symbolize.Process
	var loaded Stats
	for i, b := range []string{bin, cp} {
		p := start(t, sym, b)
		if dwarf, err := u.Attach(p, nil); err != nil || !dwarf {
			t.Fatalf("Attach(%s) = %v, %v; want tables", b, dwarf, err)
		}
		procs = append(procs, p)
		if i == 0 {
			loaded = u.Stats()
		}
	}
	st := u.Stats()
	if st.Tables != loaded.Tables || st.TableBytes != loaded.TableBytes {
		t.Errorf("after the copy: %d tables of %d bytes, want the original's %d of %d", st.Tables, st.TableBytes, loaded.Tables, loaded.TableBytes)
	}
	// Each process's own binary comes first (lowest address).
	orig, dup := u.procs[uint32(procs[0].PID)], u.procs[uint32(procs[1].PID)]
	if orig.users[0] != dup.users[0] || orig.ms[0].Table != dup.ms[0].Table {
		t.Fatalf("the copy has a binary or table of its own: %s table %d, %s table %d", orig.users[0].path, orig.ms[0].Table, dup.users[0].path, dup.ms[0].Table)
	}
	ids := orig.users[0].ids
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("shared binary's files: %v, want the original's and the copy's", ids)
	}
	for _, id := range ids {
		if !u.ExecTable(id) || !slices.Contains(k.exeSet, id) {
			t.Errorf("file %v: given at exec %v, entry written %v; want both", id, u.ExecTable(id), slices.Contains(k.exeSet, id))
		}
	}

	for _, p := range procs {
		if err := u.Detach(p.PID); err != nil {
			t.Fatal(err)
		}
	}
	u.Expire(time.Now().Add(24 * time.Hour))
	for _, id := range ids {
		if u.ExecTable(id) || !slices.Contains(k.exeUnloaded, id) {
			t.Errorf("file %v after its table expired: given at exec %v, entry deleted %v", id, u.ExecTable(id), slices.Contains(k.exeUnloaded, id))
		}
	}
	if len(u.byContent) != 0 || len(u.binaries) != 0 || len(k.errs) != 0 {
		t.Errorf("a day later: %d builds, %d files remembered, kernel errors %v; want none", len(u.byContent), len(u.binaries), k.errs)
	}
}

// Two containers of one image, each running the image's binary from an
// overlay mount of its own over the same lower layer (private to its mount
// namespace, so the files differ in device number): one table between them.
func TestOverlayMountsShareATable(t *testing.T) {
	k := &recordingKernel{Sampler: openSampler(t, 19)}
	sym := symbolize.New(symbolize.Options{})
	u := New(k, sym, 64<<20, nil, zaptest.NewLogger(t))
	im := overlaytest.NewImage(t, build(t, "nofp", "-O2", "-fomit-frame-pointer"), "nofp")
	var procs []*symbolize.Process
	for i := range 2 {
		p := startCommand(t, sym, im.Command(t, i, "nofp"), "/rootfs/nofp")
		if dwarf, err := u.Attach(p, nil); err != nil || !dwarf {
			t.Fatalf("Attach(container %d) = %v, %v; want tables", i, dwarf, err)
		}
		procs = append(procs, p)
	}
	orig, dup := u.procs[uint32(procs[0].PID)], u.procs[uint32(procs[1].PID)]
	ids := orig.users[0].ids
	if len(ids) != 2 || ids[0].Dev == ids[1].Dev || ids[0].Inode != ids[1].Inode {
		t.Fatalf("the binary's files: %v; want one inode under two devices, as containers of one image see it", ids)
	}
	if orig.users[0] != dup.users[0] || orig.ms[0].Table != dup.ms[0].Table || u.Stats().Tables != 3 {
		t.Errorf("containers: tables %d and %d, %d loaded; want one table for both and glibc's and ld.so's", orig.ms[0].Table, dup.ms[0].Table, u.Stats().Tables)
	}
}

// chainLibs is how many libraries without frame pointers the chain in
// TestMoreLibrariesThanTheProcessEntryHolds calls through: more than a
// process's kernel entry holds, with glibc and the loader besides.
const chainLibs = sampler.MaxUnwindMappings + 6

// TestMoreLibrariesThanTheProcessEntryHolds: a program whose stack runs
// through more libraries without frame pointers than the process's kernel
// entry has mappings for (a browser or a desktop program maps a hundred)
// unwinds through all of them: the tables of the libraries past the entry's
// MaxUnwindMappings are loaded and held for the process too, and the kernel
// finds them in the files the process mapped (the first 16) or through its
// memory map. Before, those libraries were left to frame pointers and every
// stack through one of them stopped there.
func TestMoreLibrariesThanTheProcessEntryHolds(t *testing.T) {
	s := openSampler(t, 499)
	sym := symbolize.New(symbolize.Options{})
	u := New(s, sym, 64<<20, nil, zaptest.NewLogger(t))

	// link_i calls link_{i+1} from a frame with locals and no frame
	// pointer; the last spins. Built from the last, which the others need.
	dir := t.TempDir()
	gcc := func(out, src string, args ...string) {
		t.Helper()
		gccIn(t, dir, out, src, append([]string{"-fomit-frame-pointer"}, args...)...)
	}
	for i := chainLibs - 1; i >= 0; i-- {
		src := fmt.Sprintf(`__attribute__((noinline)) long link_%d(long n) {
	volatile long s = 0;
	for (long i = 0; i < n; i++) s += i * i;
	return s;
}
`, i)
		args := []string{"-shared", "-fPIC"}
		if i < chainLibs-1 {
			src = fmt.Sprintf(`long link_%d(long);
__attribute__((noinline)) long link_%d(long n) {
	volatile long pad[4] = {n, n, n, n};
	return link_%d(pad[0]) + pad[3];
}
`, i+1, i, i+1)
			args = append(args, "-L"+dir, fmt.Sprintf("-llink%d", i+1), "-Wl,-rpath,"+dir)
		}
		gcc(fmt.Sprintf("liblink%d.so", i), src, args...)
	}
	gcc("chain", `#include <stdio.h>
long link_0(long);
int main(void) {
	long s = 0;
	puts("up");
	fflush(stdout);
	for (;;) s += link_0(100000 + (s & 1));
	return (int)s;
}
`, "-L"+dir, "-llink0", "-Wl,-rpath,"+dir)
	bin := filepath.Join(dir, "chain")

	p := startMapping(t, sym, exec.Command(bin), fmt.Sprintf("liblink%d.so", chainLibs-1), "libc.so")
	if dwarf, err := u.Attach(p, nil); err != nil || !dwarf {
		t.Fatalf("Attach = %v, %v; want tables and no error", dwarf, err)
	}
	var mainLo, mainHi, leafLo, leafHi uint64
	for _, m := range p.Mappings {
		switch filepath.Base(m.Path) {
		case "chain":
			mainLo, mainHi = m.Start, m.Limit
		case fmt.Sprintf("liblink%d.so", chainLibs-1):
			leafLo, leafHi = m.Start, m.Limit
		}
	}
	if mainHi == 0 || leafHi == 0 {
		t.Fatalf("no text mapping of the program or the last library in %+v", p.Mappings)
	}
	if st := u.Stats(); st.Tables < chainLibs {
		t.Fatalf("%d tables loaded, want at least %d (every library of the chain): %+v", st.Tables, chainLibs, st)
	}

	// The samples from before Attach are dropped, but not the counters
	// (countStacks): the first walk after Attach finds the libraries past
	// the entry and keeps them in the entry's found mappings, so later
	// walks look nothing up, and on a busy machine that walk may come
	// before the first drain. That drain also counts walks from before
	// Attach, so the counters say only that the kernel found libraries
	// this way; the whole stacks say that those past the entry were
	// unwound with their tables (nothing in the chain keeps a frame
	// pointer, so a frame-pointer walk stops at the first library).
	inLeaf, whole, stats := countStacks(t, s, p.PID,
		func(st []uint64) bool { return st[0] >= leafLo && st[0] < leafHi },
		func(st []uint64) bool {
			return slices.ContainsFunc(st, func(pc uint64) bool { return pc >= mainLo && pc < mainHi })
		})
	t.Logf("%d of %d stacks in link_%d reach main through %d libraries; found in mapped files %d, memory map lookups %d, with a table %d",
		whole, inLeaf, chainLibs-1, chainLibs, stats.MappedFiles, stats.VMALookups, stats.VMATables)
	if whole*10 < inLeaf*9 {
		t.Errorf("%d of %d stacks in link_%d reached main", whole, inLeaf, chainLibs-1)
	}
	if stats.VMATables+stats.MappedFiles == 0 {
		t.Errorf("no frame outside the process's entry was found by the kernel (memory map lookups %d)", stats.VMALookups)
	}
	if err := u.Detach(p.PID); err != nil {
		t.Fatal(err)
	}
	for _, b := range u.binaries {
		if b.users != 0 {
			t.Errorf("%s still has %d users after the process was detached", b.path, b.users)
		}
	}
}

// hotChainC is main → hot_middle → hot_leaf, each with a frame of its own
// (when built without frame pointers, one the frame-pointer chain does not
// describe).
const hotChainC = `#include <stdio.h>
__attribute__((noinline)) long hot_leaf(long n) {
	volatile long s = 0;
	for (long i = 0; i < n; i++) s += i * i;
	return s;
}
__attribute__((noinline)) long hot_middle(long n) {
	volatile long pad[4] = {n, n, n, n};
	long a = hot_leaf(pad[0]);
	return a + hot_leaf(pad[1] & 7) + pad[3];
}
int main(void) {
	long s = 0;
	puts("up");
	fflush(stdout);
	for (;;) s += hot_middle(100000 + (s & 1));
	return (int)s;
}
`

// TestProgramMixingFramePointerCodeGetsItsTable: a program most of whose
// functions keep frame pointers while its hot code does not (a Rust
// program: the standard library it links in is built with them, its own
// code is not) gets its table, and its stacks reach main. Before, most
// functions decided for the whole binary, it was walked by frame pointers,
// and its stacks broke off in its own code (0 of 203 reached main).
func TestProgramMixingFramePointerCodeGetsItsTable(t *testing.T) {
	dir := t.TempDir()
	// Forty functions with frames and frame pointers, as a library built
	// with them brings (none of them runs), and the program's own three
	// without.
	var lib strings.Builder
	lib.WriteString("__attribute__((noinline)) long keep(long n) { return n ^ 0x5a; }\n")
	for i := range 40 {
		fmt.Fprintf(&lib, "long fp_%d(long n) { long a = keep(n), b = keep(a + %d); return a * b + keep(b); }\n", i, i)
	}
	checkHotChainReachesMain(t, gccIn(t, dir, "mixed", hotChainC, "-fomit-frame-pointer",
		gccIn(t, dir, "lib.o", lib.String(), "-c", "-fno-omit-frame-pointer")))
}

// TestProgramLinkedByLLDUnwinds: lld packs a binary's segments into the
// file without aligning them, so the text's mapping starts in a page that
// the read-only segment before it starts in, at another address. Rust
// programs are linked so (rustc uses lld since 1.90), and their tables were
// searched a page off: no stack reached main.
func TestProgramLinkedByLLDUnwinds(t *testing.T) {
	checkHotChainReachesMain(t, gccIn(t, t.TempDir(), "lld", hotChainC, "-fomit-frame-pointer", "-fuse-ld=lld"))
}

// checkHotChainReachesMain runs bin (hotChainC), attaches it, and wants
// nine in ten of its stacks in hot_leaf to reach main, unwound with its
// table.
func checkHotChainReachesMain(t *testing.T, bin string) {
	t.Helper()
	s := openSampler(t, 499)
	sym := symbolize.New(symbolize.Options{})
	u := New(s, sym, 64<<20, nil, zaptest.NewLogger(t))
	p := startMapping(t, sym, exec.Command(bin), filepath.Base(bin), "libc.so")
	if _, err := u.Attach(p, nil); err != nil {
		t.Fatal(err)
	}
	for _, b := range u.binaries {
		if b.path == bin && !b.needs {
			t.Fatal("the program was judged to keep frame pointers: no table for it")
		}
	}
	// The first drain's samples, walked before the program's table was
	// loaded, are dropped (countStacks).
	var frames []symbolize.Frame
	names := func(st []uint64) []symbolize.Frame {
		frames = sym.User(p, st, frames[:0])
		return frames
	}
	inLeaf, whole, _ := countStacks(t, s, p.PID,
		func(st []uint64) bool { return names(st[:1])[0].Function == "hot_leaf" },
		func(st []uint64) bool {
			return slices.ContainsFunc(names(st), func(f symbolize.Frame) bool { return f.Function == "main" })
		})
	t.Logf("%d of %d stacks in hot_leaf reach main", whole, inLeaf)
	if whole*10 < inLeaf*9 {
		t.Errorf("%d of %d stacks in hot_leaf reached main", whole, inLeaf)
	}
}

// gccIn compiles src (a C file named out.c, written into dir) with -O2 and
// args into dir/out, and returns that path. Object files in args (other
// than out) are linked in.
func gccIn(t *testing.T, dir, out, src string, args ...string) string {
	t.Helper()
	file := filepath.Join(dir, strings.TrimSuffix(out, ".o")+".c")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, out)
	args = append([]string{"-O2", "-o", bin, file}, args...)
	if msg, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", out, err, msg)
	}
	return bin
}

// countStacks drains s until 200 of pid's samples have a user stack for
// which leaf holds, and returns how many did, how many of those whole says
// are whole, and the counters of every drain. The first drain's samples
// are dropped (taken before the test's Attach), its counters are not.
func countStacks(t *testing.T, s *sampler.Sampler, pid int, leaf, whole func(st []uint64) bool) (inLeaf, inWhole uint64, stats sampler.Stats) {
	t.Helper()
	count := func(b sampler.Batch) {
		stats.VMALookups += b.Stats.VMALookups
		stats.VMATables += b.Stats.VMATables
		stats.MappedFiles += b.Stats.MappedFiles
	}
	b, err := s.Drain()
	if err != nil {
		t.Fatal(err)
	}
	count(b)
	for deadline := time.Now().Add(60 * time.Second); inLeaf < 200; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d samples of pid %d in the leaf after 60 s", inLeaf, pid)
		}
		b, err := s.Drain()
		if err != nil {
			t.Fatal(err)
		}
		count(b)
		for _, smp := range b.Samples {
			if smp.PID != uint32(pid) || len(smp.UserStack) == 0 || !leaf(smp.UserStack) {
				continue
			}
			inLeaf += smp.Count
			if whole(smp.UserStack) {
				inWhole += smp.Count
			}
		}
	}
	return inLeaf, inWhole, stats
}
