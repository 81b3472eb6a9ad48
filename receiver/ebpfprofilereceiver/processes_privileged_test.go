//go:build privileged

// Tests that need root: they run the receiver, which loads BPF programs.

package ebpfprofilereceiver

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// With the one-time budget spent, a small process's new binaries wait: no
// unwind tables attached, no symbol table read (its frames keep address and
// mapping); a heavy process is served all the same, and the deferred work is
// counted.
func TestOneTimeWorkDeferredOverBudget(t *testing.T) {
	bin := buildNoFP(t, "chain", chainC, "main", "level1", "level2", "level3", "level4", "level5", "level6")
	work := spentBudget()
	if !work.overBudget() {
		t.Fatal("budget not spent")
	}
	table, sym := newTestTable(t, work, true)
	cmd := testworkload.Start(t, bin, "5")
	pid := cmd.Process.Pid

	table.seen(pid, 0, eventView{})
	e := table.lookup(pid)
	if e.snapshot == nil {
		t.Fatalf("pid %d not read", pid)
	}
	// The unwind worker takes the new binary's table work, finds the
	// budget spent and defers it.
	waitFor(t, 10*time.Second, "the unwind worker to defer the process", func() bool { return table.isUnwindDeferred(e) })
	if e.dwarf.Load() {
		t.Fatalf("over budget, a small process got its tables (deferred %v, dwarf %v)", table.isUnwindDeferred(e), e.dwarf.Load())
	}
	// The control endpoint says its unwinding is not decided yet.
	if tg := targetOf(t, table, pid); tg.Unwinding != "frame_pointer" || !tg.UnwindPending {
		t.Errorf("deferred process in /v1/targets: %+v, want frame_pointer, pending", tg)
	}
	// Symbols: an address in level3, resolved only once loads are allowed.
	addr := symbolAddress(t, e.snapshot, bin, "level3")
	e.snapshot.DeferLoads.Store(true)
	frames := sym.User(e.snapshot, []uint64{addr}, nil)
	if len(frames) != 1 || frames[0].Function != "" || frames[0].Mapping < 0 {
		t.Fatalf("deferred load: frames %+v, want one unresolved frame with its mapping", frames)
	}
	if sym.Stats().Deferred == 0 {
		t.Error("deferred symbol load not counted")
	}
	e.snapshot.DeferLoads.Store(false)
	if frames = sym.User(e.snapshot, []uint64{addr}, nil); len(frames) == 0 || frames[0].Function != "level3" {
		t.Fatalf("after the deferral: frames %+v, want level3", frames)
	}

	table.attachUnwind(e, true)
	if table.isUnwindDeferred(e) || !e.dwarf.Load() {
		t.Fatalf("a heavy process was not served (deferred %v, dwarf %v)", table.isUnwindDeferred(e), e.dwarf.Load())
	}
	if tg := targetOf(t, table, pid); tg.Unwinding != "dwarf" || tg.UnwindPending {
		t.Errorf("served process in /v1/targets: %+v, want dwarf, not pending", tg)
	}
	counts, _ := work.endInterval()
	if counts[workCount{workUnwindTable, workDeferred}] == 0 || counts[workCount{workProcessRead, workDone}] != 1 {
		t.Errorf("work counts %v: want a deferred unwind table and one process read", counts)
	}
}

// deferredChain is a process of chainC (built without frame pointers),
// read with the one-time budget spent: the unwind worker deferred its
// tables.
type deferredChain struct {
	bin   string
	pid   int
	work  *binaryWork
	table *processTable
	sym   *symbolize.Symbolizer
	e     *processEntry
}

func startDeferredChain(t *testing.T) deferredChain {
	t.Helper()
	d := deferredChain{bin: buildNoFP(t, "chain", chainC, "main", "level1", "level2", "level3", "level4", "level5", "level6"), work: spentBudget()}
	d.table, d.sym = newTestTable(t, d.work, true)
	d.pid = testworkload.Start(t, d.bin, "60").Process.Pid
	d.table.seen(d.pid, 0, eventView{})
	if d.e = d.table.lookup(d.pid); d.e.snapshot == nil {
		t.Fatalf("pid %d not read", d.pid)
	}
	waitFor(t, 10*time.Second, "the unwind worker to defer the process", func() bool { return d.table.isUnwindDeferred(d.e) })
	return d
}

// An attach that goes ahead (a heavy process, a capture, the worker in a
// new budget interval) while the last drain's plan deferred the process's
// symbol loads still gets a table for each of its binaries: the unwinder
// reads the binaries through their symbol tables, and one it did not get
// was left out of the process's tables until the process was read again,
// its stacks cut at that binary's frames for as long as it ran.
func TestAttachNotDeferredWithTheSymbolLoads(t *testing.T) {
	d := startDeferredChain(t)
	table, sym, e, bin := d.table, d.sym, d.e, d.bin
	e.snapshot.DeferLoads.Store(true)
	table.attachUnwind(e, true)
	if table.isUnwindDeferred(e) || !e.dwarf.Load() {
		t.Fatalf("attached while its symbol loads were deferred: deferred %v, dwarf %v (want its binaries' tables)", table.isUnwindDeferred(e), e.dwarf.Load())
	}
	// Symbolization is still deferred for binaries not read; the attach
	// read the program's, so its frames are named.
	addr := symbolAddress(t, e.snapshot, bin, "level3")
	if frames := sym.User(e.snapshot, []uint64{addr}, nil); len(frames) != 1 || frames[0].Function != "level3" {
		t.Errorf("after the attach: frames %+v, want level3", frames)
	}
}

// A small process read while the budget was spent, and sampled since, gets
// its unwind tables as the next budget interval begins, not only once it has
// many samples: until then its stacks through binaries without frame
// pointers are cut, and a long-lived service with little CPU (most of a
// node's) never becomes heavy.
func TestDeferredTablesAttachedInTheNextBudgetInterval(t *testing.T) {
	d := startDeferredChain(t)
	table, work, e, pid := d.table, d.work, d.e, d.pid

	metrics, _ := testSelfMetrics(t)
	r := &profileReceiver{procs: table, work: work, metrics: metrics}
	r.set.Logger = zap.NewNop()
	// The interval's drain met one sample of it, with the budget spent:
	// it waits. Then the next budget interval begins.
	r.mu.Lock()
	r.planOneTimeWorkLocked([]sampler.Sample{{PID: uint32(pid), Count: 1}}, time.Now())
	waited := table.isUnwindDeferred(e) && !e.dwarf.Load()
	r.recordWorkLocked(context.Background())
	r.mu.Unlock()
	if !waited {
		t.Fatal("a small process got its tables while the budget was spent")
	}
	waitFor(t, 30*time.Second, "the deferred process's tables in the next budget interval", func() bool {
		return !table.isUnwindDeferred(e) && e.dwarf.Load()
	})
	if tg := targetOf(t, table, pid); tg.Unwinding != "dwarf" || tg.UnwindPending {
		t.Errorf("served process in /v1/targets: %+v, want dwarf, not pending", tg)
	}
	if counts, _ := work.endInterval(); counts[workCount{workUnwindTable, workDone}] != 1 {
		t.Errorf("work counts %v: want the unwind table's work done once, in the new interval", counts)
	}
}

// targetOf is pid as the control endpoint lists it.
func targetOf(t *testing.T, table *processTable, pid int) controlapi.Target {
	t.Helper()
	for _, tg := range table.targets() {
		if tg.PID == pid {
			return tg
		}
	}
	t.Fatalf("pid %d not in the targets", pid)
	return controlapi.Target{}
}

// The first sample's event can come before the exec and the read after it
// (the process was sampled inside execve): the read is the new image, and
// the exec event, handled after it, keeps it and the unwind tables it got.
// Dropping it left the process without tables until its next read. The new
// image's own first-sample event still reads it again (the kept read may
// predate the libraries the loader maps), replacing the tables in place.
func TestExecEventKeepsAReadOfTheNewImage(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), true)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	waitKernelExec(t, table, pid, "sleep", 0)

	table.seen(pid, 0, eventView{}) // read after the exec
	table.mu.Lock()
	e := table.entries[pid]
	table.mu.Unlock()
	if e == nil || !strings.HasSuffix(e.resource.ExePath, "/sleep") {
		t.Fatalf("entry after the read: %+v", e)
	}
	// libc has no frame pointers: sleep is unwound with tables once the
	// worker has analysed it.
	waitFor(t, 10*time.Second, "sleep's unwinding decided", e.unwindDecided.Load)
	u := table.unwind.Load()
	if !e.dwarf.Load() || u.Stats().Processes != 1 {
		t.Fatalf("sleep not unwound with tables: dwarf %v, %+v", e.dwarf.Load(), u.Stats())
	}
	if dropped := table.execed(pid, eventView{}); dropped {
		t.Fatal("the exec event dropped a read of the image the process exec'd")
	}
	table.mu.Lock()
	kept, execs, unsettled := table.entries[pid], table.execs[pid], e.unsettled
	table.mu.Unlock()
	if kept != e || e.execs != execs || !unsettled {
		t.Fatalf("entry %p (execs %d, unsettled %v) after the exec event; want %p with execs %d, unsettled", kept, e.execs, unsettled, e, execs)
	}
	if u.Stats().Processes != 1 {
		t.Fatalf("the exec event took the kept read's tables away: %+v", u.Stats())
	}

	table.seen(pid, 0, eventView{}) // the new image's first sample
	table.mu.Lock()
	reread := table.entries[pid]
	table.mu.Unlock()
	if reread == nil || reread == e {
		t.Fatalf("the kept entry was not read again: %p", reread)
	}
	waitFor(t, 10*time.Second, "the re-read's unwinding decided", reread.unwindDecided.Load)
	if !reread.dwarf.Load() || u.Stats().Processes != 1 {
		t.Fatalf("after the new image's first sample: entry %p (was %p), %+v", reread, e, u.Stats())
	}
}

// A read that began before the exec is the image the process left: its
// tables are not given to the kernel even when the exec event has not
// arrived yet (the kernel gave the new image its own at exec), and the
// event, when it comes, drops the read.
func TestAttachOfAReadFromBeforeTheExecIsRefused(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), true)
	cmd := exec.Command("sh", "-c", "read line; exec sleep 30")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	shExec := waitKernelExec(t, table, pid, "sh", 0)

	// sh's libc has no frame pointers and was never analysed here, so the
	// read leaves the attach to later (the worker).
	e := table.read(pid, 0, eventView{})
	if e.snapshot == nil || !strings.HasSuffix(e.resource.ExePath, "/sh") && !strings.HasSuffix(e.resource.ExePath, "/dash") {
		t.Fatalf("read of sh: %+v", e.resource)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	waitKernelExec(t, table, pid, "sleep", shExec)
	table.attachUnwind(e, true) // before the exec event is handled
	u := table.unwind.Load()
	if e.dwarf.Load() || u.Stats().Processes != 0 {
		t.Fatalf("the old image's tables were given to the kernel after the exec (dwarf %v, %+v)", e.dwarf.Load(), u.Stats())
	}
	table.store(pid, e, e.execs)
	if dropped := table.execed(pid, eventView{}); !dropped || table.tracked(pid) {
		t.Fatalf("a read from before the exec survived the exec event (dropped %v)", dropped)
	}
}

// waitKernelExec waits until pid runs a program named exe and the kernel
// has recorded an exec later than after (what it returned for an earlier
// exec of pid, or 0), and returns that record. The path alone is not
// enough: /proc/pid/exe names the new program before the exec's tracepoint
// records it, and a CI run under load read "sleep" there while the kernel
// still held sh's exec.
func waitKernelExec(t *testing.T, table *processTable, pid int, exe string, after uint64) uint64 {
	t.Helper()
	lastExec := *table.lastExec.Load()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		path, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		base := path[strings.LastIndexByte(path, '/')+1:]
		if at, ok := lastExec(pid); err == nil && ok && at > after && (base == exe || exe == "sh" && base == "dash") {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: no exec of %s seen in 10 s (exe %q, %v)", pid, exe, path, err)
		}
	}
}
