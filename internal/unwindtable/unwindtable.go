// Package unwindtable compiles a binary's .eh_frame into the compact rows
// the in-kernel unwinder searches: one 8-byte row per change of the CFA,
// rbp or rbx rule, sorted by address, with explicit "no rule" rows in the gaps
// between functions so a binary search never lands on a neighbour's rule.
//
// Only what an x86-64 unwinder needs survives: how to compute the CFA (rsp,
// rbp or rbx plus an offset, or the PLT expression), where the caller's rbp
// and rbx were saved, whether the frame is the outermost one, and whether
// it is a signal trampoline (the interrupted code's registers are in the
// ucontext). The return address is always at CFA-8. Rules the kernel side cannot follow
// (other expressions, offsets out of range) become Kind None: that frame
// falls back to the frame pointer, as it would without tables.
package unwindtable

import (
	"errors"
	"fmt"

	"github.com/hotpath-dev/hotpath/internal/ehframe"
)

// Row kinds (the low four bits of Row.Kind, KindMask); the same values as
// enum cfa_kind in bpf/cpu_profile.bpf.c.
const (
	None = 0 // no rule: unwind this frame with the frame pointer
	RSP  = 1 // CFA = rsp + CFAOffset
	RBP  = 2 // CFA = rbp + CFAOffset
	PLT  = 3 // CFA = rsp + 8 + ((rip & 15) >= CFAOffset ? 8 : 0)
	End  = 4 // outermost frame: no caller
	// Signal: a signal trampoline (glibc's __restore_rt): the interrupted
	// code's rip, rsp and rbp are in the ucontext at rsp, as the kernel
	// saved them (ehframe.Rule.Signal).
	Signal = 5
	// RBX: CFA = rbx + CFAOffset. glibc's lazy-binding trampoline
	// (_dl_runtime_resolve_xsavec and its siblings in ld.so) realigns the
	// stack for the registers it saves and keeps its frame in rbx; a sample
	// in the symbol lookup it calls had its callers cut off there.
	RBX = 6

	KindMask = 0x0f

	// Where the caller's rbx is (bits 4-6 of Kind, RBXShift): 0 unchanged;
	// 1 to 6 saved at CFA - 8*(k+1), CFA-16 to CFA-56 (where a prologue's
	// pushes put it); RBXLost anywhere else. Needed only to compute an RBX
	// row's CFA further up the stack.
	RBXShift = 4
	RBXMask  = 0x70
	RBXLost  = 7

	// RBPLost (flag in Kind): the caller's rbp is somewhere the unwinder
	// does not follow; frame-pointer steps above this frame are not
	// trusted.
	RBPLost = 0x80
)

// RBXRule is the rbx rule of a row's Kind: 0 unchanged, 1 to 6 saved at
// CFA - 8*(k+1), RBXLost not followed.
func (r Row) RBXRule() uint8 { return (r.Kind & RBXMask) >> RBXShift }

// Row is one rule, valid from PC (an ELF virtual address) up to the next
// row's PC. The layout matches struct unwind_row in the BPF program.
type Row struct {
	PC        uint32
	Kind      uint8
	RBPOffset int8 // 0: rbp unchanged; else saved at CFA + 8*RBPOffset
	CFAOffset uint16
}

// RowBytes is the kernel memory one row takes.
const RowBytes = 8

// Table is the compiled unwind information of one binary.
type Table struct {
	Rows []Row
	// FDEs is the number of functions described; FramePointerFDEs how many
	// of those that push anything compute the CFA from rbp at some point,
	// PushingFDEs how many push anything (CFA offset above 8). A PLT's FDE
	// (binutils' PLT rule) is no function and counts in neither.
	FDEs, FramePointerFDEs, PushingFDEs int
	// Malformed FDEs were skipped (their functions fall back to the frame
	// pointer).
	Malformed int
}

// HasFramePointers reports whether the binary's frame-pointer chain can be
// walked: all but at most one in a hundred of the functions that have a
// frame address it with rbp (a few hand-written assembly routines). Binaries
// built with -fomit-frame-pointer (most distribution libraries before 2024)
// have almost none. A binary that mixes the two needs its table: a Rust
// program's own code has no frame pointers while the standard library it
// links in has them (410 of 451 functions with a frame in a small release
// build), and every stack through its own functions broke off or skipped
// frames when most functions decided for the whole binary.
func (t *Table) HasFramePointers() bool {
	return t.PushingFDEs > 0 && (t.PushingFDEs-t.FramePointerFDEs)*100 <= t.PushingFDEs
}

// Bytes is the kernel memory the table takes once loaded.
func (t *Table) Bytes() int { return len(t.Rows) * RowBytes }

// ErrNoUnwindInfo means the section has no usable FDE.
var ErrNoUnwindInfo = errors.New("no .eh_frame unwind information")

// Build compiles section, the contents of .eh_frame loaded at ELF address
// addr. Addresses must fit in 32 bits (true of every shared library and
// non-PIE executable below 4 GiB).
func Build(section []byte, addr uint64) (*Table, error) {
	eh, err := ehframe.New(section, addr)
	if err != nil {
		return nil, fmt.Errorf("parse .eh_frame: %w", err)
	}
	if eh.FDEs() == 0 {
		return nil, ErrNoUnwindInfo
	}
	t := &Table{Rows: make([]Row, 0, eh.FDEs()*4)}
	var prevHi uint64
	var tooHigh bool
	t.Malformed = eh.Rows(func(lo, hi uint64, rows []ehframe.Row) {
		// Not hi > 1<<32: a function ending at exactly 4 GiB left the
		// None row after it at uint32(1<<32) = 0, out of order.
		if hi >= 1<<32 {
			tooHigh = true
			return
		}
		if lo < prevHi {
			return // overlaps the previous function: keep the first
		}
		t.FDEs++
		if len(t.Rows) > 0 && lo > prevHi {
			t.add(Row{PC: uint32(prevHi), Kind: None})
		}
		fp, pushes, plt := false, false, false
		for _, r := range rows {
			c := compile(r.State)
			if r.CFA.Offset > 8 || r.CFA.Register == ehframe.RegRBP {
				pushes = true
			}
			if !r.CFA.Expr && r.CFA.Register == ehframe.RegRBP {
				fp = true
			}
			plt = plt || r.CFA.PLT != 0
			c.PC = uint32(r.PC)
			t.add(c)
		}
		if pushes && !plt {
			t.PushingFDEs++
			if fp {
				t.FramePointerFDEs++
			}
		}
		prevHi = hi
	})
	if tooHigh {
		return nil, errors.New("unwind table: addresses above 4 GiB are not supported")
	}
	if t.FDEs == 0 {
		return nil, ErrNoUnwindInfo
	}
	t.add(Row{PC: uint32(prevHi), Kind: None})
	return t, nil
}

// add appends r unless it repeats the previous rule. PCs arrive strictly
// increasing: ehframe emits a row only when the location moves up, and
// Build skips overlapping functions.
func (t *Table) add(r Row) {
	if n := len(t.Rows); n > 0 && sameRule(t.Rows[n-1], r) {
		return
	}
	t.Rows = append(t.Rows, r)
}

func sameRule(a, b Row) bool {
	return a.Kind == b.Kind && a.RBPOffset == b.RBPOffset && a.CFAOffset == b.CFAOffset
}

// rbxRule encodes where the caller's rbx is (Row.RBXRule).
func rbxRule(rule ehframe.RegRule) uint8 {
	switch rule.Kind {
	case ehframe.RegSame:
		return 0
	case ehframe.RegAtCFA:
		if off := -rule.Offset; off%8 == 0 && off >= 16 && off <= 56 {
			return uint8(off/8 - 1)
		}
	}
	return RBXLost
}

// compile turns one CFI state into a row (PC left unset).
func compile(s ehframe.State) Row {
	if s.RAUndefined {
		return Row{Kind: End}
	}
	var r Row
	switch {
	case s.CFA.Expr && s.CFA.Signal:
		return Row{Kind: Signal}
	case s.CFA.Expr && s.CFA.PLT != 0:
		r.Kind, r.CFAOffset = PLT, uint16(s.CFA.PLT)
	case s.CFA.Expr:
		return Row{Kind: None}
	case s.CFA.Register == ehframe.RegRSP || s.CFA.Register == ehframe.RegRBP || s.CFA.Register == ehframe.RegRBX:
		if s.CFA.Offset < 0 || s.CFA.Offset > 0xffff {
			return Row{Kind: None}
		}
		r.CFAOffset = uint16(s.CFA.Offset)
		switch s.CFA.Register {
		case ehframe.RegRSP:
			r.Kind = RSP
		case ehframe.RegRBP:
			r.Kind = RBP
		default:
			r.Kind = RBX
		}
	default:
		// CFA from another register (r10 in GCC's stack-realigning
		// prologues, until rbp takes over): not recoverable.
		return Row{Kind: None}
	}
	r.Kind |= rbxRule(s.RBX) << RBXShift
	switch s.RBP.Kind {
	case ehframe.RegSame:
	case ehframe.RegAtCFA:
		if off := s.RBP.Offset; off%8 == 0 && off/8 >= -128 && off/8 <= 127 && off != 0 {
			r.RBPOffset = int8(off / 8)
		} else {
			r.Kind |= RBPLost
		}
	default:
		r.Kind |= RBPLost
	}
	return r
}
