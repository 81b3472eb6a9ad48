//go:build linux

package sampler

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
)

// MaxUnwindMappings is how many mappings with unwind tables one process can
// have (MAX_UNWIND_MAPPINGS in cpu_profile.bpf.c); frames in others fall
// back to the frame pointer.
const MaxUnwindMappings = 64

// Defaults for the unwind maps (Config.DWARFUnwind).
const (
	DefaultMaxUnwindProcesses = 4096
	DefaultMaxUnwindTables    = 1024
)

// UnwindMapping gives one executable mapping of a process an unwind table:
// a PC in [Start, End) is at ELF address PC - Bias in the table's binary.
type UnwindMapping struct {
	Start, End, Bias uint64
	Table            UnwindTable
}

// UnwindTable is a table loaded into the kernel.
type UnwindTable struct {
	ID    uint32
	Rows  uint32
	Bytes uint64 // kernel memory, as the kernel accounts it
}

// StackEnd says why a user stack ended.
type StackEnd uint8

// Values of StackEnd (enum stack_end in cpu_profile.bpf.c).
const (
	StackComplete    StackEnd = 0 // reached the outermost frame
	StackTruncated   StackEnd = 1 // maximum depth
	StackUnreadable  StackEnd = 2 // a stack word could not be read
	StackInvalidRule StackEnd = 3 // no usable rule or frame pointer, or no progress
)

func (e StackEnd) String() string {
	switch e {
	case StackComplete:
		return "complete"
	case StackTruncated:
		return "truncated"
	case StackUnreadable:
		return "unreadable_memory"
	case StackInvalidRule:
		return "no_unwind_rule"
	}
	return fmt.Sprintf("stack_end_%d", uint8(e))
}

// StackUnwind is how a user stack was unwound.
type StackUnwind struct {
	// DWARF: with the process's unwind tables (else frame pointers).
	DWARF bool
	// LeafFromTable: frame 0 was unwound with a table row, so its caller
	// is already right and leaf-caller recovery must not run.
	LeafFromTable bool
	End           StackEnd
}

// Flag bits of stack_trace.flags.
const (
	stackDWARF   = 1
	stackLeafCFI = 2
)

func stackUnwind(flags, end uint8) StackUnwind {
	return StackUnwind{DWARF: flags&stackDWARF != 0, LeafFromTable: flags&stackLeafCFI != 0, End: StackEnd(end)}
}

var (
	errNoDWARF       = errors.New("unwind tables: the sampler was opened without DWARF unwinding")
	errSamplerClosed = errors.New("unwind table: sampler is closed")
)

// LoadUnwindTable loads a binary's rows into the kernel as a map of its own
// size and returns its handle. The rows must be sorted by PC. The map is
// created and its rows written without s.mu: a large C++ binary's table
// takes milliseconds, and the process events (LastExec) and the drain must
// not wait for it.
func (s *Sampler) LoadUnwindTable(rows []unwindtable.Row) (UnwindTable, error) {
	if len(rows) == 0 || len(rows) >= 1<<24 {
		return UnwindTable{}, fmt.Errorf("unwind table: %d rows (must be 1 to %d)", len(rows), 1<<24-1)
	}
	s.mu.Lock()
	closed, dwarf := s.closed, s.dwarf
	s.mu.Unlock()
	if closed {
		return UnwindTable{}, errSamplerClosed
	}
	if !dwarf {
		return UnwindTable{}, errNoDWARF
	}
	inner := s.spec.Maps[cpuProfileMapUnwindTables].InnerMap.Copy()
	inner.Name = "unwind_rows"
	inner.MaxEntries = uint32(len(rows))
	m, err := ebpf.NewMap(inner)
	if err != nil {
		return UnwindTable{}, fmt.Errorf("unwind table: create map of %d rows: %w", len(rows), err)
	}
	defer m.Close() // the outer map holds its own reference
	if s.testHookRows != nil {
		s.testHookRows()
	}
	if err := writeRows(m, rows); err != nil {
		return UnwindTable{}, fmt.Errorf("unwind table: write %d rows: %w", len(rows), err)
	}
	bytes, err := mapMemory(m)
	if err != nil {
		return UnwindTable{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return UnwindTable{}, errSamplerClosed
	}
	s.nextTable++
	id := s.nextTable
	if err := s.objs.UnwindTables.Update(id, m, ebpf.UpdateNoExist); err != nil {
		return UnwindTable{}, fmt.Errorf("unwind table: install: %w", err)
	}
	return UnwindTable{ID: id, Rows: uint32(len(rows)), Bytes: bytes}, nil
}

// The rows are copied into the map's memory as an array of
// cpuProfileUnwindRow, where an array map puts its elements
// unwindtable.RowBytes (a multiple of 8) apart: the two sizes must agree.
var (
	_ [unwindtable.RowBytes - unsafe.Sizeof(cpuProfileUnwindRow{})]struct{}
	_ [unsafe.Sizeof(cpuProfileUnwindRow{}) - unwindtable.RowBytes]struct{}
)

// writeRows copies rows into m, a BPF_F_MMAPABLE array of len(rows)
// elements, through a mapping of its memory. Written with the map
// update syscalls instead (batched or not), every row costs the kernel an
// update of its own: 0.2 s of CPU for a large C++ binary's 667 k rows on
// a 2-vCPU VM, against 5 ms for the copy (BenchmarkLoadUnwindTable). The
// mapping is unmapped at once, not left to the garbage collector as
// ebpf.Map.Memory does: mapped, the table's pages would count in the
// agent's RSS.
func writeRows(m *ebpf.Map, rows []unwindtable.Row) error {
	// The kernel maps whole pages: the last one's tail is the map's too.
	mem, err := unix.Mmap(m.FD(), 0, len(rows)*unwindtable.RowBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("map the table's memory: %w", err)
	}
	dst := unsafe.Slice((*cpuProfileUnwindRow)(unsafe.Pointer(unsafe.SliceData(mem))), len(rows))
	for i, r := range rows {
		dst[i] = cpuProfileUnwindRow{Pc: r.PC, Kind: r.Kind, RbpOff8: r.RBPOffset, CfaOff: r.CFAOffset}
	}
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("unmap the table's memory: %w", err)
	}
	return nil
}

// DeleteUnwindTable frees a table. Processes still pointing at it unwind
// those frames with the frame pointer until they are updated.
func (s *Sampler) DeleteUnwindTable(id uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	if err := s.objs.UnwindTables.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwind table %d: delete: %w", id, err)
	}
	return nil
}

// SetProcessUnwind makes the sampler unwind pid's user stacks with the
// given mappings' tables (and frame pointers elsewhere). At most
// MaxUnwindMappings mappings; they must not overlap.
func (s *Sampler) SetProcessUnwind(pid uint32, ms []UnwindMapping) error {
	if len(ms) == 0 {
		return s.DeleteProcessUnwind(pid)
	}
	v, err := procUnwindValue(pid, ms)
	if err != nil {
		return err
	}
	return s.setProcess(s.objs.ProcUnwinds, "unwind tables", pid, &v, s.maxUnwindProcesses)
}

// setProcess writes pid's entry v of m, a per-process map of the in-kernel
// walk (what: its errors' words); limit is the map's size.
func (s *Sampler) setProcess(m *ebpf.Map, what string, pid uint32, v any, limit int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: sampler is closed", what)
	}
	if !s.dwarf {
		return errNoDWARF
	}
	if err := m.Update(pid, v, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("%s of pid %d: %d processes have them already (the limit)", what, pid, limit)
		}
		return fmt.Errorf("%s of pid %d: %w", what, pid, err)
	}
	return nil
}

// procUnwindValue is the kernel's entry for pid's mappings ms.
func procUnwindValue(pid uint32, ms []UnwindMapping) (cpuProfileProcUnwind, error) {
	var v cpuProfileProcUnwind
	if len(ms) > MaxUnwindMappings {
		return v, fmt.Errorf("unwind tables of pid %d: %d mappings (at most %d)", pid, len(ms), MaxUnwindMappings)
	}
	sorted := slices.Clone(ms)
	slices.SortFunc(sorted, func(a, b UnwindMapping) int { return cmp.Compare(a.Start, b.Start) })
	v.N = uint32(len(sorted))
	for i, m := range sorted {
		if m.End <= m.Start || (i > 0 && m.Start < sorted[i-1].End) {
			return v, fmt.Errorf("unwind tables of pid %d: mapping %#x-%#x empty or overlapping", pid, m.Start, m.End)
		}
		v.M[i] = cpuProfileUnwindMapping{Start: m.Start, End: m.End, Bias: m.Bias, Table: m.Table.ID, Rows: m.Table.Rows}
	}
	return v, nil
}

// LastExec returns when pid last exec'd (CLOCK_MONOTONIC nanoseconds, the
// clock of MonotonicNow), as the kernel recorded it at the exec; ok is false
// when it did not exec while DWARF unwinding was on, or has exited. The
// kernel's exec event reaches user space later: this tells a read of the
// process that began after the exec (it saw the new image) from one that
// began before.
func (s *Sampler) LastExec(pid uint32) (ns uint64, ok bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf {
		return 0, false, nil
	}
	if err := s.objs.ExecTimes.Lookup(pid, &ns); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("exec time of pid %d: %w", pid, err)
	}
	return ns, true, nil
}

// MonotonicNow is CLOCK_MONOTONIC in nanoseconds, the clock of LastExec.
func MonotonicNow() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // cannot fail on Linux (the vDSO clock exists since 2.6)
	}
	return uint64(ts.Nano())
}

// DeleteProcessUnwindIfSet returns pid to frame-pointer unwinding if the
// kernel still holds the mappings ms that SetProcessUnwind wrote. At exec
// and exit the kernel drops the entry itself, and at exec gives the new
// image its executable's table (when loaded): a forget that comes after
// must not delete that.
func (s *Sampler) DeleteProcessUnwindIfSet(pid uint32, ms []UnwindMapping) error {
	want, err := procUnwindValue(pid, ms)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf {
		return nil
	}
	var got cpuProfileProcUnwind
	if err := s.objs.ProcUnwinds.Lookup(pid, &got); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		return fmt.Errorf("unwind tables of pid %d: look up: %w", pid, err)
	}
	// Only what user space wrote is compared: walks add the mappings they
	// found to the entry (found_n, found[], found_maps), which would make
	// an entry in use never match, and leave it pointing at tables the
	// caller is about to release.
	if got.N != want.N || got.M != want.M {
		return nil
	}
	if err := s.objs.ProcUnwinds.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwind tables of pid %d: delete: %w", pid, err)
	}
	return nil
}

// FileText is where a binary's code lies: Vaddr, the lowest ELF address of
// its executable segments, and Offset, the file offset at Vaddr (valid when
// OffsetKnown: every executable segment lies at the same distance from its
// file offsets).
type FileText struct {
	Vaddr, Offset uint64
	OffsetKnown   bool
}

// SetExeUnwind makes table t the file id's in the kernel: a process that
// execs the file unwinds its own code with it from its first sample on, and
// a process unwound with tables that maps the file (a library) finds it
// through its memory map before user space has given it the process (with
// text.OffsetKnown).
func (s *Sampler) SetExeUnwind(id fileid.ID, text FileText, t UnwindTable) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("unwind tables: sampler is closed")
	}
	if !s.dwarf {
		return errNoDWARF
	}
	k := exeKey(id)
	v := cpuProfileExeUnwind{TextVaddr: text.Vaddr, TextOff: noTextOff, Table: t.ID, Rows: t.Rows}
	if text.OffsetKnown {
		v.TextOff = text.Offset
	}
	if err := s.objs.ExeUnwinds.Update(&k, &v, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("exec-time unwind table of %s: %w", id, err)
	}
	return nil
}

// noTextOff is NO_TEXT_OFF in cpu_profile.bpf.c.
const noTextOff = ^uint64(0)

// DeleteExeUnwind undoes SetExeUnwind (the table is being unloaded).
func (s *Sampler) DeleteExeUnwind(id fileid.ID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf {
		return nil
	}
	k := exeKey(id)
	if err := s.objs.ExeUnwinds.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("exec-time unwind table of %s: delete: %w", id, err)
	}
	return nil
}

func exeKey(id fileid.ID) cpuProfileExeKey {
	return cpuProfileExeKey{Dev: kernelDev(id.Dev), Ino: id.Inode, MtimeNs: id.Mtime}
}

// kernelDev turns a device number as stat and /proc/PID/maps give it (the
// userspace encoding) into the kernel's internal dev_t (major << 20 | minor),
// which is what the exec program reads from the superblock.
func kernelDev(dev uint64) uint64 {
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return major<<20 | minor
}

// DeleteProcessUnwind returns pid to frame-pointer unwinding.
func (s *Sampler) DeleteProcessUnwind(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf {
		return nil
	}
	if err := s.objs.ProcUnwinds.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("unwind tables of pid %d: delete: %w", pid, err)
	}
	return nil
}

// ProgramStats is the kernel's run-time accounting of the sampling program
// (total time, runs). It counts only while BPF statistics are enabled
// (sysctl kernel.bpf_stats_enabled, or ebpf.EnableStats).
func (s *Sampler) ProgramStats() (time.Duration, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, 0, errors.New("program stats: sampler is closed")
	}
	st, err := s.objs.CpuSample.Stats()
	if err != nil {
		return 0, 0, fmt.Errorf("program stats: %w", err)
	}
	return st.Runtime, st.RunCount, nil
}

// An interpreted Java frame's entry in a user stack, in place of its pc
// (bpf/cpu_profile.bpf.c, hotspot_interpreted): bit 63 (no code address
// has it), the bytecode index at bit 47 (javaNoBCI: unknown), the Method*
// below.
const (
	javaInterpreted = 1 << 63
	javaBCIShift    = 47
	javaNoBCI       = 0xffff
)

// JavaInterpreted decodes a user stack's entry for an interpreted Java
// frame: the Method* and the bytecode index (-1 when unknown); ok is false
// for any other entry (a code address).
func JavaInterpreted(entry uint64) (method uint64, bci int, ok bool) {
	if entry&javaInterpreted == 0 {
		return 0, 0, false
	}
	bci = int(entry >> javaBCIShift & javaNoBCI)
	if bci == javaNoBCI {
		bci = -1
	}
	return entry & (1<<javaBCIShift - 1), bci, true
}

// A JavaScript frame's entry in a user stack, in place of its pc
// (bpf/cpu_profile.bpf.c, v8_function): bit 62 (no code address has it;
// a Java entry has bit 63) and the function's SharedFunctionInfo, a
// tagged pointer.
const v8Function = 1 << 62

// V8Function decodes a user stack's entry for a JavaScript frame: the
// function's SharedFunctionInfo as V8 stores it (tagged); ok is false for
// any other entry.
func V8Function(entry uint64) (sfi uint64, ok bool) {
	if entry&(javaInterpreted|v8Function) != v8Function {
		return 0, false
	}
	return entry &^ v8Function, true
}

// MaxJVMHeaps is how many code heaps of a JVM the kernel's walk knows
// (JDK 9+ segments its code cache into three).
const MaxJVMHeaps = len(cpuProfileJvmUnwind{}.Heap)

// SetJVMUnwind makes the sampler unwind the compiled frames of the HotSpot
// JVM pid (HotSpot's code keeps no frame pointer) with the frame sizes its
// code cache records. The kernel forgets it at the process's exec or exit.
func (s *Sampler) SetJVMUnwind(pid uint32, u hotspot.Unwind) error {
	if len(u.Heaps) == 0 || len(u.Heaps) > MaxJVMHeaps {
		return fmt.Errorf("JVM unwinding of pid %d: %d code heaps (1 to %d)", pid, len(u.Heaps), MaxJVMHeaps)
	}
	v := cpuProfileJvmUnwind{N: uint32(len(u.Heaps)), BlockHeader: u.BlockHeader, OffSize: u.Size, OffFrameSize: u.FrameSize,
		OffFrameComplete: u.FrameComplete, OffCode: u.Code}
	if u.CodeIsOffset {
		v.CodeIsOffset = 1
	}
	v.InterpLo, v.InterpHi, v.ConstMethod, v.ConstMethodSize = u.InterpreterLow, u.InterpreterHigh, u.ConstMethod, u.ConstMethodSize
	for i, h := range u.Heaps {
		v.Heap[i].Low, v.Heap[i].High, v.Heap[i].Segmap, v.Heap[i].Shift = h.Low, h.High, h.Segmap, h.SegmentShift
	}
	return s.setProcess(s.objs.JvmUnwinds, "JVM unwinding", pid, &v, int(s.objs.JvmUnwinds.MaxEntries()))
}

// TakeMappedFiles returns the executable file mappings the kernel kept for
// pid (those of its last address space, up to 16; by file identity, whose
// size the kernel does not record) and
// forgets them. The kernel leaves a sampled process's list to user space at
// its exit: call it at each exit event, also to free the entry. Nothing
// when the list is not kept (no DWARF unwinding, or no tp_btf/ma_write).
func (s *Sampler) TakeMappedFiles(pid uint32) ([]symbolize.KnownMapping, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf || s.mappingsErr != nil {
		return nil, nil
	}
	var mf cpuProfileMappedFiles
	if err := s.objs.MappedFiles.LookupAndDelete(&pid, &mf); err != nil {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("mapped files of pid %d: %w", pid, err)
	}
	var out []symbolize.KnownMapping
	for _, f := range mf.F[:min(int(mf.N), len(mf.F))] {
		if f.Check == 0 || f.Check != mappedCheck(f.Start, f.End, f.Pgoff, f.Key) {
			continue // being written when the process ended
		}
		out = append(out, symbolize.KnownMapping{Start: f.Start, Limit: f.End, Offset: f.Pgoff * uint64(os.Getpagesize()),
			File: fileid.ID{Dev: unix.Mkdev(uint32(f.Key.Dev>>20), uint32(f.Key.Dev&(1<<20-1))), Inode: f.Key.Ino, Mtime: f.Key.MtimeNs}})
	}
	return out, nil
}

// mappedCheck is mapped_check in cpu_profile.bpf.c: a slot's hash of the
// rest, which tells a whole slot from one a writer had not finished.
func mappedCheck(start, end, pgoff uint64, k cpuProfileExeKey) uint32 {
	h := (start ^ (end << 7) ^ (pgoff << 13) ^ (k.Ino << 29) ^ k.Dev ^ uint64(k.MtimeNs)) * 0x9e3779b97f4a7c15
	return uint32(h>>32) | 1
}
