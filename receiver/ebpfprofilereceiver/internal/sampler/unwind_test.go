//go:build linux && privileged

package sampler

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
)

func TestUnwindTablesAPI(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	if _, err := s.LoadUnwindTable(nil); err == nil {
		t.Error("an empty table was accepted")
	}
	rows := []unwindtable.Row{{PC: 0x1000, Kind: unwindtable.RSP, CFAOffset: 8}, {PC: 0x1004, Kind: unwindtable.RSP, CFAOffset: 16}, {PC: 0x1040}}
	tab, err := s.LoadUnwindTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Rows != 3 || tab.Bytes < 3*unwindtable.RowBytes || tab.ID == 0 {
		t.Fatalf("loaded table %+v", tab)
	}
	// The kernel holds what was written.
	inner := tableInKernel(t, s, tab)
	var row cpuProfileUnwindRow
	if err := inner.Lookup(uint32(1), &row); err != nil {
		t.Fatal(err)
	}
	if row.Pc != 0x1004 || row.Kind != unwindtable.RSP || row.CfaOff != 16 || inner.MaxEntries() != 3 {
		t.Fatalf("row 1 in the kernel: %+v (map of %d)", row, inner.MaxEntries())
	}

	m := UnwindMapping{Start: 0x400000, End: 0x401000, Bias: 0x3ff000, Table: tab}
	if err := s.SetProcessUnwind(1234, []UnwindMapping{m}); err != nil {
		t.Fatal(err)
	}
	var got cpuProfileProcUnwind
	if err := s.objs.ProcUnwinds.Lookup(uint32(1234), &got); err != nil {
		t.Fatal(err)
	}
	if got.N != 1 || got.M[0].Start != m.Start || got.M[0].End != m.End || got.M[0].Bias != m.Bias || got.M[0].Table != tab.ID || got.M[0].Rows != 3 {
		t.Fatalf("kernel entry %+v", got.M[0])
	}

	overlap := m
	overlap.Start, overlap.End = 0x400800, 0x402000
	if err := s.SetProcessUnwind(1234, []UnwindMapping{m, overlap}); err == nil || !strings.Contains(err.Error(), "overlapping") {
		t.Errorf("overlapping mappings: %v", err)
	}
	many := make([]UnwindMapping, MaxUnwindMappings+1)
	for i := range many {
		many[i] = UnwindMapping{Start: uint64(i+1) << 20, End: uint64(i+1)<<20 + 4096, Table: tab}
	}
	if err := s.SetProcessUnwind(1234, many); err == nil {
		t.Error("more mappings than the kernel side holds were accepted")
	}
	// Forgetting mappings the kernel no longer holds (an exec replaced
	// them) leaves its entry; forgetting the ones it holds deletes it.
	other := m
	other.Start, other.End = 0x500000, 0x501000
	if err := s.DeleteProcessUnwindIfSet(1234, []UnwindMapping{other}); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.ProcUnwinds.Lookup(uint32(1234), &got); err != nil {
		t.Fatalf("entry deleted by a forget of other mappings: %v", err)
	}
	// Walks add what they found to the entry: it is still the one written.
	got.FoundN, got.FoundMaps = 1, 3
	got.Found[0] = cpuProfileFoundMapping{Start: 0x600000, End: 0x601000, Check: 1}
	if err := s.objs.ProcUnwinds.Update(uint32(1234), &got, ebpf.UpdateExist); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProcessUnwindIfSet(1234, []UnwindMapping{m}); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.ProcUnwinds.Lookup(uint32(1234), &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Fatalf("entry after a forget of its own mappings (with mappings a walk found): %v, want gone", err)
	}
	if err := s.DeleteProcessUnwindIfSet(1234, []UnwindMapping{m}); err != nil {
		t.Errorf("forgetting twice: %v", err)
	}
	if err := s.SetProcessUnwind(1234, []UnwindMapping{m}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProcessUnwind(1234); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProcessUnwind(1234); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
	if err := s.DeleteUnwindTable(tab.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUnwindTable(tab.ID); err != nil {
		t.Errorf("deleting twice: %v", err)
	}

	fp := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second})
	if _, err := fp.LoadUnwindTable(rows); err == nil {
		t.Error("a frame-pointer-only sampler accepted a table")
	}
	if err := fp.SetProcessUnwind(1234, []UnwindMapping{m}); err == nil {
		t.Error("a frame-pointer-only sampler accepted a process")
	}
}

// TestEveryRowIsInTheKernel reads back, with the map lookup syscall, every
// row of a table of 1,000 rows and one of 1,025 (the copy into the map's
// memory spans two and three pages, the last one part-filled): each must be
// the row written at its index.
func TestEveryRowIsInTheKernel(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	for _, n := range []int{1000, 1025} {
		rows := syntheticRows(n)
		tab, err := s.LoadUnwindTable(rows)
		if err != nil {
			t.Fatal(err)
		}
		inner := tableInKernel(t, s, tab)
		if inner.MaxEntries() != uint32(n) {
			t.Errorf("table of %d rows: map of %d", n, inner.MaxEntries())
		}
		for i, want := range rows {
			var got cpuProfileUnwindRow
			if err := inner.Lookup(uint32(i), &got); err != nil {
				t.Fatal(err)
			}
			if got.Pc != want.PC || got.Kind != want.Kind || got.RbpOff8 != want.RBPOffset || got.CfaOff != want.CFAOffset {
				t.Fatalf("table of %d rows: row %d in the kernel is %+v, want %+v", n, i, got, want)
			}
		}
	}
}

// tableInKernel opens the map the kernel holds for tab: the outer map
// gives the inner map's id. It is closed when the test ends.
func tableInKernel(t *testing.T, s *Sampler, tab UnwindTable) *ebpf.Map {
	t.Helper()
	var innerID uint32
	if err := s.objs.UnwindTables.Lookup(tab.ID, &innerID); err != nil {
		t.Fatal(err)
	}
	inner, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { inner.Close() })
	return inner
}

// syntheticRows are n sorted rows whose every field differs from its
// neighbours'.
func syntheticRows(n int) []unwindtable.Row {
	rows := make([]unwindtable.Row, n)
	for i := range rows {
		rows[i] = unwindtable.Row{PC: 0x1000 + uint32(i)*4, Kind: uint8(i%3) + 1, RBPOffset: -int8(i % 7), CFAOffset: uint16(8 + i%4000)}
	}
	return rows
}

// TestVerifierWork keeps the DWARF unwinder cheap to load: the verifier's
// work (instructions it processed, a count, not a time) decides how long
// the agent takes to start sampling. A binary search indexed by a computed
// value, or a frame index read back from the loop state, made it explore
// every depth and path: 294 k instructions and 0.37 s at load, where the
// frame-pointer program takes 7 k and 0.02 s.
func TestVerifierWork(t *testing.T) {
	spec, err := loadCpuProfile()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dwarf uint32
		max   int
	}{{0, 20_000}, {1, 120_000}} {
		sp := spec.Copy()
		if err := sp.Variables[cpuProfileVarDwarfUnwind].Set(tc.dwarf); err != nil {
			t.Fatal(err)
		}
		if tc.dwarf == 1 {
			// unwinding: auto walks Python frames too.
			if err := enablePythonWalk(sp); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []string{cpuProfileMapTracesCtxV1, cpuProfileMapGoTraces} {
			sp.Maps[n].Pinning = ebpf.PinNone
			sp.Maps[n].MaxEntries = 1
		}
		var objs struct {
			CpuSample *ebpf.Program `ebpf:"cpu_sample"`
		}
		if err := sp.LoadAndAssign(&objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}); err != nil {
			t.Fatalf("%+v", err)
		}
		log := objs.CpuSample.VerifierLog
		objs.CpuSample.Close()
		m := regexp.MustCompile(`processed (\d+) insns`).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no instruction count in the verifier log:\n%s", log)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("dwarf_unwind=%d: verifier processed %d instructions", tc.dwarf, n)
		if n > tc.max {
			t.Errorf("dwarf_unwind=%d: the verifier processed %d instructions (budget %d): load time grows with it", tc.dwarf, n, tc.max)
		}
	}
}

// TestExeUnwindAtExec: a process that execs a file with a registered table
// gets that table for its own code at exec, in the kernel, before it was ever
// sampled or read by user space: the mapping is the executable segment where
// the ELF loader put it, biased to the file's ELF addresses. The same path
// with another modification time (a rebuilt binary that reused the inode) gets
// nothing, and the entry goes when the process exits.
// A table's rows are written without the lock the process events and the
// drain take: a large C++ binary's take tens of milliseconds, and an exec
// event handled meanwhile (LastExec) or a drain must not wait for them. The
// table is installed once they are written, and a sampler closed meanwhile
// refuses it.
func TestRowsAreWrittenWithoutTheSamplersLock(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	writing, release := make(chan struct{}), make(chan struct{})
	s.testHookRows = func() { close(writing); <-release }
	type result struct {
		tab UnwindTable
		err error
	}
	loaded := make(chan result)
	rows := []unwindtable.Row{{PC: 0x1000, Kind: unwindtable.RSP, CFAOffset: 8}, {PC: 0x1040}}
	go func() {
		tab, err := s.LoadUnwindTable(rows)
		loaded <- result{tab, err}
	}()
	<-writing
	answered := make(chan error)
	go func() {
		_, _, err := s.LastExec(uint32(os.Getpid()))
		if err == nil {
			_, err = s.Drain()
		}
		answered <- err
	}()
	select {
	case err := <-answered:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Error("LastExec and Drain waited for a table's rows to be written")
	}
	close(release)
	if r := <-loaded; r.err != nil || r.tab.ID == 0 || r.tab.Rows != 2 {
		t.Fatalf("LoadUnwindTable = %+v, %v", r.tab, r.err)
	}

	writing, release = make(chan struct{}), make(chan struct{})
	go func() {
		tab, err := s.LoadUnwindTable(rows)
		loaded <- result{tab, err}
	}()
	<-writing
	closed := make(chan error)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		close(release)
		<-loaded
		t.Fatal("Close waited for a table's rows to be written")
	}
	close(release)
	if r := <-loaded; !errors.Is(r.err, errSamplerClosed) {
		t.Fatalf("LoadUnwindTable of a sampler closed while it wrote the rows = %+v, %v; want errSamplerClosed", r.tab, r.err)
	}
}

func TestExeUnwindAtExec(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	bin := sleeperBinary(t)
	id, err := fileid.Of(bin)
	if err != nil {
		t.Fatal(err)
	}
	textVaddr, textEnd := elfText(t, bin)
	tab, err := s.LoadUnwindTable([]unwindtable.Row{{PC: uint32(textVaddr), Kind: unwindtable.RSP, CFAOffset: 8}, {PC: uint32(textEnd)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetExeUnwind(id, FileText{Vaddr: textVaddr}, tab); err != nil {
		t.Fatal(err)
	}
	stale := id
	stale.Mtime++
	if err := s.SetExeUnwind(stale, FileText{Vaddr: textVaddr}, tab); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteExeUnwind(stale); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	beforeExec := MonotonicNow()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	// It prints once it is running, then sleeps: never sampled.
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	afterExec := MonotonicNow()
	pid := uint32(cmd.Process.Pid)
	// The kernel recorded the exec, on the clock user space reads.
	if at, ok, err := s.LastExec(pid); err != nil || !ok || at < beforeExec || at > afterExec {
		t.Errorf("LastExec(%d) = %d, %v, %v; want within [%d, %d]", pid, at, ok, err, beforeExec, afterExec)
	}
	var got cpuProfileProcUnwind
	if err := s.objs.ProcUnwinds.Lookup(pid, &got); err != nil {
		t.Fatalf("no unwind entry for pid %d after exec: %v", pid, err)
	}
	start, end := execText(t, int(pid), bin)
	m := got.M[0]
	if got.N != 1 || m.Table != tab.ID || m.Rows != tab.Rows || m.Start != start || m.End > end || m.End <= m.Start || m.Start-m.Bias != textVaddr {
		t.Fatalf("entry at exec %+v (n %d); want [%#x, ≤%#x) with ELF text at %#x, table %d", m, got.N, start, end, textVaddr, tab.ID)
	}
	// User space forgetting what it wrote for the image before the exec
	// (the process was read as the forked parent) leaves the exec's entry.
	before := []UnwindMapping{{Start: 0x10000, End: 0x20000, Bias: 0x10000, Table: tab}}
	if err := s.DeleteProcessUnwindIfSet(pid, before); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.ProcUnwinds.Lookup(pid, &got); err != nil || got.M[0].Start != start {
		t.Fatalf("the exec's entry after a forget of the old image: %+v, %v", got.M[0], err)
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := s.objs.ProcUnwinds.Lookup(pid, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("unwind entry of exited pid %d: %v, want gone", pid, err)
	}
	if _, ok, err := s.LastExec(pid); ok || err != nil {
		t.Errorf("exec time of exited pid %d: %v, %v, want none", pid, ok, err)
	}

	// A binary with no registered table: nothing at exec.
	if err := os.Chtimes(bin, time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	other := exec.Command(bin)
	stdout, _ = other.StdoutPipe()
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.ProcUnwinds.Lookup(uint32(other.Process.Pid), &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("a binary whose modification time changed got the old table at exec (%v)", err)
	}
}

// sleeperBinary builds a C program that prints a line and sleeps.
func sleeperBinary(t *testing.T) string {
	t.Helper()
	return buildC(t, "sleeper", "#include <stdio.h>\n#include <unistd.h>\nint main(void){puts(\"up\");fflush(stdout);sleep(60);return 0;}\n", "-O2")
}

// elfText is the lowest and highest ELF address of bin's executable segments.
func elfText(t *testing.T, bin string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lo = ^uint64(0)
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			lo, hi = min(lo, p.Vaddr), max(hi, p.Vaddr+p.Filesz)
		}
	}
	if hi == 0 {
		t.Fatalf("%s has no executable segment", bin)
	}
	return lo, hi
}

// execText is the runtime range of the executable mapping of bin in pid.
func execText(t *testing.T, pid int, bin string) (start, end uint64) {
	t.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[5] == bin && strings.Contains(f[1], "x") {
			lo, hi, _ := strings.Cut(f[0], "-")
			s, _ := strconv.ParseUint(lo, 16, 64)
			e, _ := strconv.ParseUint(hi, 16, 64)
			return s, e
		}
	}
	t.Fatalf("no executable mapping of %s in pid %d:\n%s", bin, pid, raw)
	return 0, 0
}

// TestJVMUnwindForgottenAtExecAndExit: a JVM's entry (SetJVMUnwind) is
// the kernel's to drop: at the process's exec (the code heaps are gone
// with the old image) and at its exit (a later process with its pid is no
// JVM). Entries with no heap or more than the walk knows are refused.
func TestJVMUnwindForgottenAtExecAndExit(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	bin := sleeperBinary(t)
	u := hotspot.Unwind{Heaps: []hotspot.CodeHeap{{Low: 0x7f0000000000, High: 0x7f0000100000, Segmap: 0x7f1000000000, SegmentShift: 7}},
		BlockHeader: 16, Size: 12, FrameSize: 28, FrameComplete: 20, Code: 32}
	for _, bad := range []hotspot.Unwind{{}, {Heaps: make([]hotspot.CodeHeap, MaxJVMHeaps+1)}} {
		if err := s.SetJVMUnwind(1, bad); err == nil {
			t.Errorf("SetJVMUnwind with %d heaps: no error", len(bad.Heaps))
		}
	}
	cmd := exec.Command("/bin/sh", "-c", "read line; exec "+bin)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	var got cpuProfileJvmUnwind
	if err := s.SetJVMUnwind(pid, u); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.JvmUnwinds.Lookup(pid, &got); err != nil || got.N != 1 || got.Heap[0].Low != u.Heaps[0].Low || got.OffFrameSize != u.FrameSize {
		t.Fatalf("entry of pid %d: %+v, %v", pid, got, err)
	}
	// The shell execs the sleeper, which prints once it runs.
	if _, err := fmt.Fprintln(stdin, "go"); err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(stdout).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := s.objs.JvmUnwinds.Lookup(pid, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("entry of pid %d after its exec: %v, want gone", pid, err)
	}
	if err := s.SetJVMUnwind(pid, u); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := s.objs.JvmUnwinds.Lookup(pid, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("entry of exited pid %d: %v, want gone", pid, err)
	}
	// Without the in-kernel walk there is nothing to give it to.
	fp := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second})
	if err := fp.SetJVMUnwind(pid, u); !errors.Is(err, errNoDWARF) {
		t.Errorf("SetJVMUnwind without DWARF unwinding: %v, want errNoDWARF", err)
	}
}
