//go:build privileged

// Tests that need root: they run the receiver, which loads BPF programs.

package ebpfprofilereceiver

import (
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
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

	table.seen(pid)
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
