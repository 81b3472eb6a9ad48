// Package ehframe evaluates the call frame information in an ELF binary's
// .eh_frame: the CFA (canonical frame address) rule at one PC, which tells
// leaf-caller recovery whether a function has set up its frame yet, and
// every row of every function, from which the in-kernel unwinder's tables
// are built. On x86-64 a CFA of rsp+8 means the
// return address is still the word at the stack pointer (function entry, or
// a leaf without a frame), so the frame-pointer chain skips the caller.
//
// Of the register columns only rbp and the return address are tracked (all
// an x86-64 unwinder restores); the others are parsed and skipped.
// Layout: the LSB "Exception Frame" chapter and DWARF 5 section 6.4.
package ehframe

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// DWARF register numbers on x86-64.
const (
	RegRBX = 3
	RegRBP = 6
	RegRSP = 7
)

// Rule is how the CFA is computed at one PC: Register + Offset, or a DWARF
// expression (Expr; Register and Offset are then meaningless).
type Rule struct {
	Register uint64
	Offset   int64
	Expr     bool
	// PLT is N when the expression is binutils' PLT rule,
	// rsp + 8 + ((rip & 15) >= N ? 8 : 0); 0 for any other.
	PLT uint8
	// Signal: the frame is a signal trampoline (glibc's __restore_rt),
	// whose FDE's CIE has the 'S' augmentation and whose CFA is the
	// interrupted code's rsp as the kernel saved it in the ucontext at
	// rsp, *(rsp + 160): that code's registers are all there (ucontext's
	// mcontext, in the kernel's x86-64 layout), not in a frame.
	Signal bool
}

// String prints the rule as readelf --debug-dump=frames-interp does for
// x86-64 ("rsp+8", "rbp+16", "exp").
func (r Rule) String() string {
	if r.Expr {
		return "exp"
	}
	return fmt.Sprintf("%s%+d", regName(r.Register), r.Offset)
}

func regName(r uint64) string {
	names := [...]string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip"}
	if r < uint64(len(names)) {
		return names[r]
	}
	return fmt.Sprintf("r%d", r)
}

// Table indexes the FDEs of one .eh_frame section by PC range. The section
// bytes are read in place (they may be a file mapping); the index costs
// 24 bytes per FDE.
type Table struct {
	data []byte
	addr uint64 // virtual address of data[0]
	fdes []fdeRef
	cies map[uint64]*cie
}

type fdeRef struct {
	lo, hi uint64
	off    uint64 // offset of the FDE in data
	// before is the start of the FDE emitted just before this one in the
	// section, when both share a CIE (0: none), for Fragment.
	before uint64
}

type cie struct {
	codeAlign uint64
	dataAlign int64
	fdeEnc    byte
	hasZ      bool   // 'z' augmentation: FDEs carry augmentation data
	signal    bool   // 'S' augmentation: its FDEs are signal trampolines
	initial   []byte // initial instructions
}

var errTruncated = errors.New("truncated .eh_frame")

// New indexes section, the contents of .eh_frame loaded at address addr.
func New(section []byte, addr uint64) (*Table, error) {
	t := &Table{data: section, addr: addr, cies: map[uint64]*cie{}}
	// The last FDE's start and CIE, in section order: the compiler emits a
	// function's split-off part right after it, under the same CIE (one
	// per compilation unit, or one the linker merged identical ones into).
	var before, beforeCIE uint64
	for off := uint64(0); off < uint64(len(section)); {
		length, hdr, err := t.entryLength(off)
		if err != nil {
			return nil, err
		}
		if length == 0 {
			break // zero terminator
		}
		body := off + hdr
		// Compare the length with the room left, not body+length with the
		// size: a 64-bit length near 2^64 wrapped the sum around to a
		// small end that passed, and section[body:] then panicked.
		// entryLength checked body <= len(section).
		if length > uint64(len(section))-body || length < 4 {
			return nil, fmt.Errorf("entry at %#x: %w", off, errTruncated)
		}
		end := body + length
		id := binary.LittleEndian.Uint32(section[body:])
		if id != 0 {
			// FDE: id is the distance back to its CIE.
			cieOff := body - uint64(id)
			if uint64(id) > body {
				return nil, fmt.Errorf("FDE at %#x: CIE pointer out of range", off)
			}
			c, err := t.cieAt(cieOff)
			if err != nil {
				return nil, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			r := reader{b: section[:end], p: body + 4}
			lo, err := t.readPointer(&r, c.fdeEnc)
			if err != nil {
				return nil, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			n, err := t.readPointer(&r, c.fdeEnc&0x0f) // the range is never relative
			if err != nil {
				return nil, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			// A range past the top of the address space (sdata4 ranges
			// are sign-extended, so any "negative" one) would give hi < lo:
			// rows out of order, gap rows below earlier ones. Such an FDE
			// is skipped; the rest of the section stays usable.
			if n > 0 && lo+n > lo {
				f := fdeRef{lo: lo, hi: lo + n, off: off}
				if cieOff == beforeCIE {
					f.before = before
				}
				t.fdes = append(t.fdes, f)
				before, beforeCIE = lo, cieOff
			}
		}
		off = end
	}
	slices.SortFunc(t.fdes, func(a, b fdeRef) int { return cmp.Compare(a.lo, b.lo) })
	return t, nil
}

// FDEs is the number of functions (FDEs) the table covers.
func (t *Table) FDEs() int { return len(t.fdes) }

// Size is the index's heap footprint in bytes (the section is not counted).
func (t *Table) Size() int { return len(t.fdes)*32 + len(t.cies)*64 + 64 }

// entryLength reads the length field at off: the length of the rest of the
// entry and the size of the length field itself.
func (t *Table) entryLength(off uint64) (length, hdr uint64, err error) {
	if off+4 > uint64(len(t.data)) {
		return 0, 0, fmt.Errorf("entry at %#x: %w", off, errTruncated)
	}
	l := binary.LittleEndian.Uint32(t.data[off:])
	if l != 0xffffffff {
		return uint64(l), 4, nil
	}
	// 64-bit DWARF: only the length grows; .eh_frame CIE pointers stay 4 bytes.
	if off+12 > uint64(len(t.data)) {
		return 0, 0, fmt.Errorf("entry at %#x: %w", off, errTruncated)
	}
	return binary.LittleEndian.Uint64(t.data[off+4:]), 12, nil
}

func (t *Table) cieAt(off uint64) (*cie, error) {
	if c, ok := t.cies[off]; ok {
		return c, nil
	}
	length, hdr, err := t.entryLength(off)
	if err != nil {
		return nil, err
	}
	// As in New: off+hdr+length may wrap around, the room left cannot.
	if length > uint64(len(t.data))-(off+hdr) || length < 4 {
		return nil, fmt.Errorf("CIE at %#x: %w", off, errTruncated)
	}
	end := off + hdr + length
	r := reader{b: t.data[:end], p: off + hdr}
	if id, err := r.u32(); err != nil || id != 0 {
		return nil, fmt.Errorf("CIE at %#x: not a CIE", off)
	}
	version, err := r.u8()
	if err != nil {
		return nil, err
	}
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("CIE at %#x: unsupported version %d", off, version)
	}
	aug := r.cstring()
	if version == 4 {
		r.p += 2 // address_size, segment_selector_size
	}
	c := &cie{fdeEnc: 0} // absptr unless 'R' says otherwise
	if c.codeAlign, err = r.uleb(); err != nil {
		return nil, err
	}
	if c.dataAlign, err = r.sleb(); err != nil {
		return nil, err
	}
	if version == 1 {
		_, err = r.u8() // return address register
	} else {
		_, err = r.uleb()
	}
	if err != nil {
		return nil, err
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasZ = true
		augLen, err := r.uleb()
		if err != nil {
			return nil, err
		}
		if augLen > end-r.p {
			return nil, fmt.Errorf("CIE at %#x: %w", off, errTruncated)
		}
		augEnd := r.p + augLen
		for _, a := range aug[1:] {
			switch a {
			case 'R':
				if c.fdeEnc, err = r.u8(); err != nil {
					return nil, err
				}
			case 'P':
				enc, err := r.u8()
				if err != nil {
					return nil, err
				}
				if _, err := t.readPointer(&r, enc); err != nil {
					return nil, err
				}
			case 'L':
				if _, err := r.u8(); err != nil {
					return nil, err
				}
			case 'S':
				c.signal = true
			case 'B':
			default:
				// Unknown augmentation: the length lets us skip the rest.
			}
		}
		r.p = augEnd
	} else if len(aug) > 0 {
		return nil, fmt.Errorf("CIE at %#x: unsupported augmentation %q", off, aug)
	}
	if r.p > end {
		return nil, fmt.Errorf("CIE at %#x: %w", off, errTruncated)
	}
	c.initial = t.data[r.p:end]
	t.cies[off] = c
	return c, nil
}

// Pointer encodings (DW_EH_PE_*).
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peOmit    = 0xff
)

// readPointer decodes an encoded pointer at r. pcrel is relative to the
// pointer's own address; datarel to the section (as glibc does for
// .eh_frame_hdr); indirect pointers are returned unresolved.
func (t *Table) readPointer(r *reader, enc byte) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	at := t.addr + r.p
	var v uint64
	var err error
	switch enc & 0x0f {
	case peAbsptr, peUdata8, peSdata8:
		v, err = r.u64()
	case peUleb128:
		v, err = r.uleb()
	case peUdata2:
		var x uint16
		x, err = r.u16()
		v = uint64(x)
	case peSdata2:
		var x uint16
		x, err = r.u16()
		v = uint64(int64(int16(x)))
	case peUdata4:
		var x uint32
		x, err = r.u32()
		v = uint64(x)
	case peSdata4:
		var x uint32
		x, err = r.u32()
		v = uint64(int64(int32(x)))
	case peSleb128:
		var x int64
		x, err = r.sleb()
		v = uint64(x)
	default:
		return 0, fmt.Errorf("unsupported pointer encoding %#x", enc)
	}
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += at
	case peDatarel:
		v += t.addr
	default:
		return 0, fmt.Errorf("unsupported pointer application %#x", enc)
	}
	return v, nil
}

// CFA returns the CFA rule in effect at pc. ok is false when no FDE covers
// pc; err reports a malformed FDE.
func (t *Table) CFA(pc uint64) (rule Rule, ok bool, err error) {
	f, ok := t.fde(pc)
	if !ok {
		return Rule{}, false, nil
	}
	st, err := t.eval(f, pc, nil)
	if err != nil {
		return Rule{}, false, fmt.Errorf("FDE at %#x: %w", f.off, err)
	}
	return st.CFA, true, nil
}

// FunctionStart returns where the function holding pc begins: the start of
// the FDE whose range covers pc. ok is false when no FDE covers pc.
func (t *Table) FunctionStart(pc uint64) (start uint64, ok bool) {
	f, ok := t.fde(pc)
	return f.lo, ok
}

// Fragment reports whether the FDE covering pc describes a piece of a
// function that does not begin there, and returns the start of the FDE
// emitted just before it. A function's own entry has its return address
// on top of the stack (the CFA is rsp+8 at its first instruction); a piece
// split off a function starts in the middle of its frame. GCC splits the
// rarely run blocks of a function into a separate part (name.cold, in
// .text.unlikely, with an FDE of its own emitted right after the
// function's), and a profile-guided build can put most of a function
// there: Debian's CPython 3.14 runs its eval loop in
// _PyEval_EvalFrameDefault.cold. Only an FDE under the same CIE as the one
// before it counts.
func (t *Table) Fragment(pc uint64) (before uint64, ok bool, err error) {
	f, ok := t.fde(pc)
	if !ok || f.before == 0 {
		return 0, false, nil
	}
	st, err := t.eval(f, f.lo, nil)
	if err != nil {
		return 0, false, fmt.Errorf("FDE at %#x: %w", f.off, err)
	}
	if entry := !st.CFA.Expr && st.CFA.Register == RegRSP && st.CFA.Offset == 8; entry {
		return 0, false, nil
	}
	return f.before, true, nil
}

// fde returns the FDE whose range covers pc.
func (t *Table) fde(pc uint64) (fdeRef, bool) {
	i, _ := slices.BinarySearchFunc(t.fdes, pc, func(f fdeRef, pc uint64) int {
		if f.lo > pc {
			return 1
		}
		return -1
	})
	// i is the first FDE starting above pc; the one before may contain it.
	if i == 0 || pc >= t.fdes[i-1].hi {
		return fdeRef{}, false
	}
	return t.fdes[i-1], true
}

// eval runs the CIE's initial instructions, then the FDE's up to pc (all
// of them with pc = ^0). emit, when set, sees every row as it ends.
func (t *Table) eval(f fdeRef, pc uint64, emit func(loc uint64, s State)) (State, error) {
	length, hdr, err := t.entryLength(f.off)
	if err != nil {
		return State{}, err
	}
	body := f.off + hdr
	end := body + length
	id := binary.LittleEndian.Uint32(t.data[body:])
	c, err := t.cieAt(body - uint64(id))
	if err != nil {
		return State{}, err
	}
	r := reader{b: t.data[:end], p: body + 4}
	if _, err := t.readPointer(&r, c.fdeEnc); err != nil {
		return State{}, err
	}
	if _, err := t.readPointer(&r, c.fdeEnc&0x0f); err != nil {
		return State{}, err
	}
	if c.hasZ {
		n, err := r.uleb()
		if err != nil {
			return State{}, err
		}
		if err := r.skip(n); err != nil {
			return State{}, err
		}
	}
	if r.p > end {
		return State{}, errTruncated
	}
	m := machine{cie: c, loc: f.lo}
	if _, err := m.run(c.initial, ^uint64(0), nil); err != nil {
		return State{}, fmt.Errorf("CIE instructions: %w", err)
	}
	m.initial = m.state
	return m.run(t.data[r.p:end], pc, emit)
}

// Row is the unwind state from PC up to the next row's PC (or the end of
// the function).
type Row struct {
	PC uint64
	State
}

// Rows calls fn once per FDE, in PC order, with the function's range and
// its rows (rows is reused between calls). A malformed FDE is skipped and
// counted in bad; the rest of the table stays usable.
func (t *Table) Rows(fn func(lo, hi uint64, rows []Row)) (bad int) {
	var rows []Row
	for _, f := range t.fdes {
		rows = rows[:0]
		_, err := t.eval(f, ^uint64(0), func(loc uint64, s State) {
			if loc >= f.hi {
				return
			}
			rows = append(rows, Row{PC: loc, State: s})
		})
		if err != nil {
			bad++
			continue
		}
		fn(f.lo, f.hi, rows)
	}
	return bad
}

// RegKind says where a register's value of the caller is found.
type RegKind uint8

const (
	// RegSame: the register still holds the caller's value.
	RegSame RegKind = iota
	// RegAtCFA: saved at CFA + Offset.
	RegAtCFA
	// RegUndefined: not recoverable (for the return address: the
	// outermost frame).
	RegUndefined
	// RegOther: another register, a value or an expression; the unwinder
	// does not follow these.
	RegOther
)

// RegRule is the rule for one callee-saved register.
type RegRule struct {
	Kind   RegKind
	Offset int64
}

// State is what an unwinder needs at one PC on x86-64: the CFA, where the
// caller's rbp and rbx are, and whether there is a caller at all (the
// return address column is undefined in the outermost frame, e.g. _start
// or a thread's start routine). The return address itself is always at
// CFA-8. rbx matters where a caller's CFA is computed from it (glibc's
// lazy-binding trampoline realigns the stack and keeps its frame in rbx).
type State struct {
	CFA         Rule
	RBP         RegRule
	RBX         RegRule
	RAUndefined bool
}

// machine executes call frame instructions.
type machine struct {
	cie     *cie
	loc     uint64
	state   State
	initial State   // after the CIE's instructions, for DW_CFA_restore
	stack   []State // remember_state
}

const regRA = 16 // x86-64 DWARF column of the return address

// run executes ins until the location passes pc, returning the state at
// pc. emit, when set, is called with the start and state of each row that
// ends.
func (m *machine) run(ins []byte, pc uint64, emit func(loc uint64, s State)) (State, error) {
	r := reader{b: ins}
	for r.p < uint64(len(ins)) {
		op, _ := r.u8()
		var err error
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			err = m.advance(uint64(op&0x3f), pc, emit)
			if err == errPast {
				return m.state, nil
			}
		case 2: // DW_CFA_offset
			var off uint64
			if off, err = r.uleb(); err == nil {
				m.setSaved(uint64(op&0x3f), int64(off)*m.cie.dataAlign)
			}
		case 3: // DW_CFA_restore
			m.restore(uint64(op & 0x3f))
		default:
			err = m.extended(op, &r, pc, emit)
			if err == errPast {
				return m.state, nil
			}
		}
		if err != nil {
			return State{}, err
		}
	}
	if emit != nil {
		emit(m.loc, m.state)
	}
	return m.state, nil
}

// advance moves the location by delta code units; errPast when it passed
// pc.
func (m *machine) advance(delta, pc uint64, emit func(uint64, State)) error {
	return m.moveTo(m.loc+delta*m.cie.codeAlign, pc, emit)
}

// errBackwards: the location moved below the current one. Rows must come
// in address order (DWARF 5 6.4.2.1: the new location of DW_CFA_set_loc "is
// always greater than the current one"; advances are unsigned), but a
// corrupt DW_CFA_set_loc or an advance wrapping around the address space
// did move back, and Rows then reported rows out of order, below the
// FDE's start, which the unwind table's binary search cannot use.
var errBackwards = errors.New("CFA location moves backwards")

func (m *machine) moveTo(loc, pc uint64, emit func(uint64, State)) error {
	if loc < m.loc {
		return errBackwards
	}
	if emit != nil && loc != m.loc {
		emit(m.loc, m.state)
	}
	m.loc = loc
	if m.loc > pc {
		return errPast
	}
	return nil
}

func (m *machine) setSaved(reg uint64, off int64) {
	switch reg {
	case RegRBP:
		m.state.RBP = RegRule{Kind: RegAtCFA, Offset: off}
	case RegRBX:
		m.state.RBX = RegRule{Kind: RegAtCFA, Offset: off}
	case regRA:
		m.state.RAUndefined = false
	}
}

func (m *machine) setKind(reg uint64, k RegKind) {
	switch reg {
	case RegRBP:
		m.state.RBP = RegRule{Kind: k}
	case RegRBX:
		m.state.RBX = RegRule{Kind: k}
	case regRA:
		m.state.RAUndefined = k == RegUndefined
	}
}

func (m *machine) restore(reg uint64) {
	switch reg {
	case RegRBP:
		m.state.RBP = m.initial.RBP
	case RegRBX:
		m.state.RBX = m.initial.RBX
	case regRA:
		m.state.RAUndefined = m.initial.RAUndefined
	}
}

var errPast = errors.New("past pc")

func (m *machine) extended(op byte, r *reader, pc uint64, emit func(uint64, State)) error {
	var err error
	uleb := func() uint64 {
		var v uint64
		if err == nil {
			v, err = r.uleb()
		}
		return v
	}
	sleb := func() int64 {
		var v int64
		if err == nil {
			v, err = r.sleb()
		}
		return v
	}
	switch op {
	case 0x00: // DW_CFA_nop
	case 0x01: // DW_CFA_set_loc (absptr encoding only; gcc and clang never emit it)
		var v uint64
		if v, err = r.u64(); err == nil {
			err = m.moveTo(v, pc, emit)
		}
	case 0x02, 0x03, 0x04: // DW_CFA_advance_loc1/2/4
		var d uint64
		switch op {
		case 0x02:
			var x byte
			x, err = r.u8()
			d = uint64(x)
		case 0x03:
			var x uint16
			x, err = r.u16()
			d = uint64(x)
		default:
			var x uint32
			x, err = r.u32()
			d = uint64(x)
		}
		if err == nil {
			err = m.advance(d, pc, emit)
		}
	case 0x05: // DW_CFA_offset_extended
		reg, off := uleb(), uleb()
		m.setSaved(reg, int64(off)*m.cie.dataAlign)
	case 0x06: // DW_CFA_restore_extended
		m.restore(uleb())
	case 0x07: // DW_CFA_undefined
		m.setKind(uleb(), RegUndefined)
	case 0x08: // DW_CFA_same_value
		m.setKind(uleb(), RegSame)
	case 0x09: // DW_CFA_register
		reg := uleb()
		uleb()
		m.setKind(reg, RegOther)
	case 0x0a: // DW_CFA_remember_state
		m.stack = append(m.stack, m.state)
	case 0x0b: // DW_CFA_restore_state
		if len(m.stack) == 0 {
			return errors.New("restore_state without remember_state")
		}
		m.state = m.stack[len(m.stack)-1]
		m.stack = m.stack[:len(m.stack)-1]
	case 0x0c: // DW_CFA_def_cfa
		reg, off := uleb(), uleb()
		m.state.CFA = Rule{Register: reg, Offset: int64(off)}
	case 0x0d: // DW_CFA_def_cfa_register
		m.state.CFA.Register, m.state.CFA.Expr, m.state.CFA.PLT = uleb(), false, 0
	case 0x0e: // DW_CFA_def_cfa_offset
		m.state.CFA.Offset = int64(uleb())
	case 0x0f: // DW_CFA_def_cfa_expression
		n := uleb()
		if err == nil {
			if err = r.need(n); err == nil {
				expr := r.b[r.p : r.p+n]
				m.state.CFA = Rule{Expr: true, PLT: pltThreshold(expr), Signal: m.cie.signal && bytes.Equal(expr, signalCFAExpr)}
				r.p += n
			}
		}
	case 0x10, 0x16: // DW_CFA_expression, DW_CFA_val_expression
		reg, n := uleb(), uleb()
		if err == nil {
			err = r.skip(n)
		}
		m.setKind(reg, RegOther)
	case 0x11: // DW_CFA_offset_extended_sf
		reg, off := uleb(), sleb()
		m.setSaved(reg, off*m.cie.dataAlign)
	case 0x14, 0x15: // DW_CFA_val_offset, val_offset_sf
		reg := uleb()
		if op == 0x14 {
			uleb()
		} else {
			sleb()
		}
		m.setKind(reg, RegOther)
	case 0x12: // DW_CFA_def_cfa_sf
		reg, off := uleb(), sleb()
		m.state.CFA = Rule{Register: reg, Offset: off * m.cie.dataAlign}
	case 0x13: // DW_CFA_def_cfa_offset_sf
		m.state.CFA.Offset = sleb() * m.cie.dataAlign
	case 0x2e: // DW_CFA_GNU_args_size
		uleb()
	case 0x2f: // DW_CFA_GNU_negative_offset_extended
		reg, off := uleb(), uleb()
		m.setSaved(reg, -int64(off)*m.cie.dataAlign)
	default:
		return fmt.Errorf("unknown CFA instruction %#x", op)
	}
	if err == nil && r.p > uint64(len(r.b)) {
		err = errTruncated
	}
	return err
}

// signalCFAExpr is the CFA expression of an x86-64 Linux signal
// trampoline's FDE: DW_OP_breg7 (rsp) 160; DW_OP_deref, the rsp the kernel
// saved in the ucontext (uc_mcontext.rsp) that rsp points at once the
// handler returned into the trampoline.
var signalCFAExpr = []byte{0x77, 0xa0, 0x01, 0x06}

// pltThreshold recognizes the CFA expression binutils emits for PLT
// entries, rsp + 8 + ((rip & 15) >= N ? 8 : 0), and returns N (0 for any
// other expression):
//
//	DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and;
//	DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
func pltThreshold(expr []byte) uint8 {
	want := []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0, 0x2a, 0x33, 0x24, 0x22}
	if len(expr) != len(want) {
		return 0
	}
	for i, b := range want {
		if i != 6 && expr[i] != b {
			return 0
		}
	}
	if expr[6] < 0x30 || expr[6] > 0x3f { // DW_OP_lit0..lit15
		return 0
	}
	return expr[6] - 0x30
}

// reader decodes little-endian values from b at p; reads past the end fail.
type reader struct {
	b []byte
	p uint64
}

func (r *reader) need(n uint64) error {
	if r.p+n > uint64(len(r.b)) || r.p+n < r.p {
		return errTruncated
	}
	return nil
}

// skip moves past n bytes; the reader never moves backwards, so a corrupt
// length cannot make an instruction loop.
func (r *reader) skip(n uint64) error {
	if err := r.need(n); err != nil {
		return err
	}
	r.p += n
	return nil
}

func (r *reader) u8() (byte, error) {
	if err := r.need(1); err != nil {
		return 0, err
	}
	v := r.b[r.p]
	r.p++
	return v, nil
}

func (r *reader) u16() (uint16, error) {
	if err := r.need(2); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint16(r.b[r.p:])
	r.p += 2
	return v, nil
}

func (r *reader) u32() (uint32, error) {
	if err := r.need(4); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint32(r.b[r.p:])
	r.p += 4
	return v, nil
}

func (r *reader) u64() (uint64, error) {
	if err := r.need(8); err != nil {
		return 0, err
	}
	v := binary.LittleEndian.Uint64(r.b[r.p:])
	r.p += 8
	return v, nil
}

func (r *reader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *reader) sleb() (int64, error) {
	var v int64
	var shift uint
	for {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

func (r *reader) cstring() string {
	start := r.p
	for r.p < uint64(len(r.b)) && r.b[r.p] != 0 {
		r.p++
	}
	s := string(r.b[start:r.p])
	r.p++ // the NUL
	return s
}
