package unwindtable

import (
	"bytes"
	"cmp"
	"debug/elf"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/ehframe"
	"github.com/hotpath-dev/hotpath/internal/ehframe/ehframetest"
)

const libc = "/lib/x86_64-linux-gnu/libc.so.6"

func build(t testing.TB, path string) *Table {
	t.Helper()
	data, addr := ehframetest.Section(t, path)
	tab, err := Build(data, addr)
	if err != nil {
		t.Fatalf("Build %s: %v", path, err)
	}
	if err := checkInvariants(tab); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tab
}

// checkInvariants checks what the in-kernel binary search relies on.
func checkInvariants(tab *Table) error {
	rows := tab.Rows
	if len(rows) == 0 {
		return errors.New("no rows")
	}
	if last := rows[len(rows)-1]; last != (Row{PC: last.PC, Kind: None}) {
		return fmt.Errorf("last row %+v is not a None row", last)
	}
	for i, r := range rows {
		switch kind := r.Kind & KindMask; kind {
		case RSP, RBP, PLT, RBX:
			if r.Kind&RBPLost != 0 && r.RBPOffset != 0 {
				return fmt.Errorf("row %d %+v: rbp both lost and at an offset", i, r)
			}
			if kind == PLT && (r.CFAOffset == 0 || r.CFAOffset > 15) {
				return fmt.Errorf("row %d %+v: PLT threshold out of range", i, r)
			}
		case None, End, Signal:
			if r != (Row{PC: r.PC, Kind: kind}) {
				return fmt.Errorf("row %d %+v: a None, End or Signal row with offsets or flags", i, r)
			}
		default:
			return fmt.Errorf("row %d %+v: unknown kind", i, r)
		}
		if i == 0 {
			continue
		}
		p := rows[i-1]
		if p.PC >= r.PC {
			return fmt.Errorf("rows %d and %d not in increasing PC order: %+v, %+v", i-1, i, p, r)
		}
		if p.Kind == r.Kind && p.RBPOffset == r.RBPOffset && p.CFAOffset == r.CFAOffset {
			return fmt.Errorf("rows %d and %d have the same rule: %+v, %+v", i-1, i, p, r)
		}
	}
	if !(0 <= tab.FramePointerFDEs && tab.FramePointerFDEs <= tab.PushingFDEs && tab.PushingFDEs <= tab.FDEs && tab.FDEs > 0) {
		return fmt.Errorf("counts: %d FDEs, %d pushing, %d with frame pointers", tab.FDEs, tab.PushingFDEs, tab.FramePointerFDEs)
	}
	if tab.Bytes() != len(rows)*RowBytes {
		return fmt.Errorf("Bytes() = %d for %d rows", tab.Bytes(), len(rows))
	}
	return nil
}

// lookup is the kernel's search: the last row with PC <= pc.
func lookup(rows []Row, pc uint64) (Row, bool) {
	i := sort.Search(len(rows), func(i int) bool { return uint64(rows[i].PC) > pc })
	if i == 0 {
		return Row{}, false
	}
	return rows[i-1], true
}

func TestHasFramePointers(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  bool
	}{
		{[]string{"-O2", "-fomit-frame-pointer"}, false},
		{[]string{"-Os", "-fomit-frame-pointer"}, false},
		{[]string{"-O0"}, true},
		{[]string{"-O2", "-fno-omit-frame-pointer"}, true},
		{[]string{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"}, true},
	} {
		t.Run(strings.Join(tc.flags, ""), func(t *testing.T) {
			tab := build(t, ehframetest.BuildC(t, ehframetest.Program, tc.flags...))
			if got := tab.HasFramePointers(); got != tc.want {
				t.Errorf("HasFramePointers() = %v, want %v (%d FDEs, %d pushing, %d with frame pointers)",
					got, tc.want, tab.FDEs, tab.PushingFDEs, tab.FramePointerFDEs)
			}
		})
	}
	t.Run("libc", func(t *testing.T) {
		// Debian 12's glibc is built without frame pointers.
		tab := build(t, libc)
		if tab.HasFramePointers() {
			t.Errorf("HasFramePointers() = true (%d FDEs, %d pushing, %d with frame pointers)",
				tab.FDEs, tab.PushingFDEs, tab.FramePointerFDEs)
		}
		if tab.Malformed != 0 {
			t.Errorf("%d malformed FDEs in libc", tab.Malformed)
		}
	})
}

// TestRowInvariants: rows strictly increasing, a None row last, no two
// consecutive rows with the same rule, for real binaries.
func TestRowInvariants(t *testing.T) {
	paths := map[string]string{"libc": libc}
	for _, flags := range [][]string{{"-O0"}, {"-O2"}, {"-O2", "-fno-omit-frame-pointer"}, {"-Os"}} {
		paths[strings.Join(flags, "")] = ehframetest.BuildC(t, ehframetest.Program, flags...)
	}
	for name, path := range paths {
		t.Run(name, func(t *testing.T) {
			tab := build(t, path) // checks the invariants
			ntab, err := ehframe.New(ehframetest.Section(t, path))
			if err != nil {
				t.Fatal(err)
			}
			// Gap rows and merging: never more rows than FDE rows plus one
			// gap row per function, and never fewer than functions.
			var fdeRows int
			ntab.Rows(func(lo, hi uint64, rows []ehframe.Row) { fdeRows += len(rows) })
			if len(tab.Rows) > fdeRows+tab.FDEs || len(tab.Rows) < 2 {
				t.Errorf("%d rows from %d FDE rows of %d FDEs", len(tab.Rows), fdeRows, tab.FDEs)
			}
			if tab.FDEs != ntab.FDEs() {
				t.Errorf("%d FDEs compiled of %d", tab.FDEs, ntab.FDEs())
			}
			t.Logf("%d FDEs, %d FDE rows, %d table rows (%d bytes)", tab.FDEs, fdeRows, len(tab.Rows), tab.Bytes())
		})
	}
}

// fdeIndex is every row of every FDE, to find the full state at a PC
// (ehframe's CFA gives only the CFA rule).
type fdeIndex struct {
	fdes []fdeRows
}

type fdeRows struct {
	lo, hi uint64
	rows   []ehframe.Row
}

func newFDEIndex(t testing.TB, eh *ehframe.Table) *fdeIndex {
	x := &fdeIndex{}
	if bad := eh.Rows(func(lo, hi uint64, rows []ehframe.Row) {
		x.fdes = append(x.fdes, fdeRows{lo, hi, slices.Clone(rows)})
	}); bad != 0 {
		t.Fatalf("%d malformed FDEs", bad)
	}
	return x
}

// state returns the state at pc and whether an FDE covers pc.
func (x *fdeIndex) state(pc uint64) (ehframe.State, bool) {
	i := sort.Search(len(x.fdes), func(i int) bool { return x.fdes[i].lo > pc })
	if i == 0 || pc >= x.fdes[i-1].hi {
		return ehframe.State{}, false
	}
	rows := x.fdes[i-1].rows
	j := sort.Search(len(rows), func(j int) bool { return rows[j].PC > pc })
	if j == 0 {
		return ehframe.State{}, false
	}
	return rows[j-1].State, true
}

// coverage counts the checked PCs by the kind of row found.
type coverage map[string]int

// checkPC checks that the row the kernel finds for pc describes the same
// frame as the CFI: the CFA (from ehframe's CFA), where rbp was saved and
// whether there is a caller (from the FDE's rows).
func checkPC(t *testing.T, tab *Table, eh *ehframe.Table, x *fdeIndex, pc uint64, cov coverage) {
	t.Helper()
	row, found := lookup(tab.Rows, pc)
	rule, covered, err := eh.CFA(pc)
	if err != nil {
		t.Fatalf("CFA(%#x): %v", pc, err)
	}
	st, covered2 := x.state(pc)
	if covered != covered2 || (covered && st.CFA != rule) {
		t.Fatalf("%#x: CFA says %v %v, the FDE's rows %v %v", pc, rule, covered, st.CFA, covered2)
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%#x: row %+v (found %v) for CFA %v, rbp %+v, rbx %+v, ra undefined %v: %s",
			pc, row, found, rule, st.RBP, st.RBX, st.RAUndefined, fmt.Sprintf(format, args...))
	}
	kind := row.Kind & KindMask
	if !covered {
		if found && kind != None {
			fail("no FDE covers the PC, but the row has a rule")
		}
		cov["uncovered"]++
		return
	}
	if !found {
		fail("an FDE covers the PC, but no row does")
	}
	if st.RAUndefined {
		if kind != End {
			fail("want End: the outermost frame")
		}
		cov["End"]++
		return
	}
	switch {
	case rule.Expr && rule.Signal:
		if kind != Signal {
			fail("want Signal: a signal trampoline")
		}
		cov["Signal"]++
		return
	case rule.Expr && rule.PLT != 0:
		if kind != PLT || row.CFAOffset != uint16(rule.PLT) {
			fail("want PLT %d", rule.PLT)
		}
		cov["PLT"]++
	case rule.Expr,
		rule.Register != ehframe.RegRSP && rule.Register != ehframe.RegRBP && rule.Register != ehframe.RegRBX,
		rule.Offset < 0 || rule.Offset > 0xffff:
		if kind != None {
			fail("want None: a rule the kernel cannot follow")
		}
		cov["None"]++
		return
	case rule.Register == ehframe.RegRSP:
		if kind != RSP || int64(row.CFAOffset) != rule.Offset {
			fail("want RSP %+d", rule.Offset)
		}
		cov["RSP"]++
	case rule.Register == ehframe.RegRBX:
		if kind != RBX || int64(row.CFAOffset) != rule.Offset {
			fail("want RBX %+d", rule.Offset)
		}
		cov["RBX"]++
	default:
		if kind != RBP || int64(row.CFAOffset) != rule.Offset {
			fail("want RBP %+d", rule.Offset)
		}
		cov["RBP"]++
	}
	// Where the caller's rbx is.
	switch k := row.RBXRule(); st.RBX.Kind {
	case ehframe.RegSame:
		if k != 0 {
			fail("rbx unchanged")
		}
	case ehframe.RegAtCFA:
		if off := -st.RBX.Offset; off%8 == 0 && off >= 16 && off <= 56 {
			if k == 0 || k == RBXLost || -8*int64(k+1) != st.RBX.Offset {
				fail("rbx saved at CFA%+d", st.RBX.Offset)
			}
			cov["rbx saved"]++
		} else if k != RBXLost {
			fail("rbx at CFA%+d: want RBXLost", st.RBX.Offset)
		}
	default:
		if k != RBXLost {
			fail("want RBXLost: rbx rule the kernel cannot follow")
		}
	}
	// Where the caller's rbp is.
	lost := row.Kind&RBPLost != 0
	switch st.RBP.Kind {
	case ehframe.RegSame:
		if lost || row.RBPOffset != 0 {
			fail("rbp unchanged")
		}
	case ehframe.RegAtCFA:
		if lost {
			if off := st.RBP.Offset; off%8 == 0 && off != 0 && off >= -128*8 && off <= 127*8 {
				fail("rbp at CFA%+d representable but marked lost", off)
			}
			cov["rbp lost"]++
		} else {
			if 8*int64(row.RBPOffset) != st.RBP.Offset || row.RBPOffset == 0 {
				fail("rbp saved at CFA%+d", st.RBP.Offset)
			}
			cov["rbp saved"]++
		}
	default:
		if !lost || row.RBPOffset != 0 {
			fail("want RBPLost: rbp rule the kernel cannot follow")
		}
		cov["rbp lost"]++
	}
}

// TestLookupMatchesCFI: for every PC of every function and PLT entry of the
// compiled program, the kernel's lookup in the compact table finds the rule
// the CFI gives: the compaction (merging, gap rows) loses nothing.
func TestLookupMatchesCFI(t *testing.T) {
	for _, flags := range [][]string{
		{"-O0"},
		{"-O2", "-fomit-frame-pointer"},
		{"-O2", "-fno-omit-frame-pointer"},
		{"-Os", "-fasynchronous-unwind-tables"},
	} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			path := ehframetest.BuildC(t, ehframetest.Program, flags...)
			tab := build(t, path)
			eh, err := ehframe.New(ehframetest.Section(t, path))
			if err != nil {
				t.Fatal(err)
			}
			x := newFDEIndex(t, eh)
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			syms, err := ef.Symbols()
			if err != nil {
				t.Fatal(err)
			}
			cov := coverage{}
			funcs := 0
			for _, s := range syms {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 {
					continue
				}
				funcs++
				for pc := s.Value; pc < s.Value+s.Size; pc++ {
					checkPC(t, tab, eh, x, pc, cov)
				}
			}
			if funcs < 9 {
				t.Fatalf("only %d functions with a size in the symbol table", funcs)
			}
			// The PLT has no symbols; its entries use binutils' expression.
			var pltPCs int
			for _, sec := range ef.Sections {
				if strings.HasPrefix(sec.Name, ".plt") {
					for pc := sec.Addr; pc < sec.Addr+sec.Size; pc++ {
						checkPC(t, tab, eh, x, pc, cov)
						pltPCs++
					}
				}
			}
			if plt := ef.Section(".plt"); plt != nil && plt.Size > 16 && cov["PLT"] == 0 {
				t.Errorf("a %d-byte .plt but no PC with a PLT row", plt.Size)
			}
			for _, k := range []string{"RSP", "End", "rbp saved"} {
				if cov[k] == 0 {
					t.Errorf("no PC with %s checked", k)
				}
			}
			if tab.HasFramePointers() && cov["RBP"] == 0 {
				t.Error("frame pointers but no PC with an RBP row")
			}
			t.Logf("%d functions, %d PLT bytes: %v", funcs, pltPCs, cov)
		})
	}
}

// TestLookupMatchesCFILibc runs the same check over every PC of libc's
// .text: functions and the padding between them.
func TestLookupMatchesCFILibc(t *testing.T) {
	// Signal: __restore_rt, the trampoline a handler returns into.
	cov := checkText(t, libc)
	for _, k := range []string{"RSP", "End", "rbp saved", "None", "uncovered", "Signal", "rbx saved"} {
		if cov[k] == 0 {
			t.Errorf("no PC with %s checked", k)
		}
	}
}

// TestLookupMatchesCFILdSo runs it over the dynamic loader's: its
// lazy-binding trampolines compute their CFA from rbx.
func TestLookupMatchesCFILdSo(t *testing.T) {
	cov := checkText(t, "/lib64/ld-linux-x86-64.so.2")
	for _, k := range []string{"RSP", "RBX", "rbx saved"} {
		if cov[k] == 0 {
			t.Errorf("no PC with %s checked", k)
		}
	}
}

// checkText checks every PC of path's .text (every seventh with -short).
func checkText(t *testing.T, path string) coverage {
	tab := build(t, path)
	eh, err := ehframe.New(ehframetest.Section(t, path))
	if err != nil {
		t.Fatal(err)
	}
	x := newFDEIndex(t, eh)
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	text := ef.Section(".text")
	if text == nil {
		t.Fatalf("%s has no .text", path)
	}
	step := uint64(1)
	if testing.Short() {
		step = 7
	}
	cov := coverage{}
	for pc := text.Addr; pc < text.Addr+text.Size; pc += step {
		checkPC(t, tab, eh, x, pc, cov)
	}
	t.Logf("%s: %d rows: %v", path, len(tab.Rows), cov)
	return cov
}

// TestPaddingBetweenFunctions: a PC in the alignment padding after a
// function, which no FDE covers, finds a None row, not the rule of the
// function before.
func TestPaddingBetweenFunctions(t *testing.T) {
	path := ehframetest.BuildC(t, ehframetest.Program, "-O2")
	tab := build(t, path)
	eh, err := ehframe.New(ehframetest.Section(t, path))
	if err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var funcs []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size != 0 {
			funcs = append(funcs, s)
		}
	}
	slices.SortFunc(funcs, func(a, b elf.Symbol) int { return cmp.Compare(a.Value, b.Value) })
	gaps := 0
	for i := 0; i+1 < len(funcs); i++ {
		a, b := funcs[i], funcs[i+1]
		end := a.Value + a.Size
		if end >= b.Value {
			continue
		}
		// The function before has a rule at its last byte.
		if _, ok, _ := eh.CFA(end - 1); !ok {
			continue
		}
		for pc := end; pc < b.Value; pc++ {
			if _, ok, _ := eh.CFA(pc); ok {
				t.Fatalf("%#x: padding between %s and %s covered by an FDE", pc, a.Name, b.Name)
			}
			row, found := lookup(tab.Rows, pc)
			if !found || row.Kind != None {
				t.Errorf("%#x: padding after %s finds %+v (found %v), want a None row", pc, a.Name, row, found)
			}
			gaps++
		}
	}
	if gaps == 0 {
		t.Fatal("no padding between functions in the test program")
	}
	// Before the first row and past the last function: nothing.
	if _, found := lookup(tab.Rows, uint64(tab.Rows[0].PC)-1); found {
		t.Error("a row below the first one")
	}
	last := tab.Rows[len(tab.Rows)-1]
	if row, _ := lookup(tab.Rows, uint64(last.PC)+100); row.Kind != None {
		t.Errorf("past the last function: %+v", row)
	}
	t.Logf("%d padding bytes checked", gaps)
}

// buildEHFrame assembles a section with gcc's usual CIE (def_cfa rsp+8,
// return address at cfa-8).
func buildEHFrame(addr uint64, fdes ...ehframetest.FDE) []byte {
	return ehframetest.Assemble(addr, ehframetest.CIEDefault, fdes...)
}

// pltExpr is DW_CFA_def_cfa_expression with binutils' PLT rule.
var pltExpr = append([]byte{0x0f, byte(len(ehframetest.PLTExpr))}, ehframetest.PLTExpr...)

// handBuilt has four FDEs: one with a frame pointer, one without
// instructions right after it (its rule merges with the previous row), one
// after a gap with every rule kind, and one overlapping the third.
func handBuilt() []byte {
	fde3 := append(slices.Clone(pltExpr),
		0x46,                         // advance 6
		0x0c, 0x07, 0x80, 0x80, 0x04, // def_cfa rsp+0x10000: offset too large
		0x42,             // advance 2
		0x0c, 0x0a, 0x00, // def_cfa r10+0
		0x42,             // advance 2
		0x0c, 0x07, 0x10, // def_cfa rsp+16
		0x86, 0xc8, 0x01, // offset r6 at cfa-1600: beyond an int8 of words
		0x42,       // advance 2
		0x86, 0x01, // offset r6 at cfa-8
		0x42,             // advance 2
		0x11, 0x06, 0x7f, // offset_extended_sf r6 at cfa+8
		0x42,             // advance 2
		0x09, 0x06, 0x03, // register r6 in rbx
		0x42,       // advance 2
		0x07, 0x10, // undefined r16
		0x42,       // advance 2
		0x0e, 0x18, // def_cfa_offset 24: still the outermost frame
	)
	return buildEHFrame(0x400000,
		ehframetest.FDE{Lo: 0x1000, N: 0x10, Ins: []byte{
			0x41,       // advance 1
			0x0e, 0x10, // def_cfa_offset 16
			0x86, 0x02, // offset r6 at cfa-16
			0x43,       // advance 3
			0x0d, 0x06, // def_cfa_register rbp
			0x48,             // advance 8
			0x0c, 0x07, 0x08, // def_cfa rsp+8
			0xc6, // restore r6
		}},
		ehframetest.FDE{Lo: 0x1010, N: 0x10},
		ehframetest.FDE{Lo: 0x1048, N: 0x10, Ins: []byte{0x0e, 0x10}}, // overlaps the next: dropped
		ehframetest.FDE{Lo: 0x1030, N: 0x20, Ins: fde3},
	)
}

// TestBuildHandBuilt checks the compiled rows exactly.
func TestBuildHandBuilt(t *testing.T) {
	tab, err := Build(handBuilt(), 0x400000)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{0x1000, RSP, 0, 8},
		{0x1001, RSP, -2, 16},
		{0x1004, RBP, -2, 16},
		{0x100c, RSP, 0, 8}, // and the next function, 0x1010..0x1020
		{0x1020, None, 0, 0},
		{0x1030, PLT, 0, 11},
		{0x1036, None, 0, 0}, // offset too large, then CFA from r10
		{0x103a, RSP | RBPLost, 0, 16},
		{0x103c, RSP, -1, 16},
		{0x103e, RSP, 1, 16},
		{0x1040, RSP | RBPLost, 0, 16},
		{0x1042, End, 0, 0},
		{0x1050, None, 0, 0},
	}
	if !slices.Equal(tab.Rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", tab.Rows, want)
	}
	if err := checkInvariants(tab); err != nil {
		t.Error(err)
	}
	// The third FDE has binutils' PLT rule: a PLT, no function, counted
	// neither as pushing nor as using rbp.
	if tab.FDEs != 3 || tab.PushingFDEs != 1 || tab.FramePointerFDEs != 1 || tab.Malformed != 0 {
		t.Errorf("%d FDEs, %d pushing, %d with frame pointers, %d malformed; want 3, 1, 1, 0",
			tab.FDEs, tab.PushingFDEs, tab.FramePointerFDEs, tab.Malformed)
	}
	if !tab.HasFramePointers() {
		t.Error("HasFramePointers() = false with the one pushing function using rbp and a PLT")
	}
}

// TestHasFramePointersThreshold: frame pointers when all but at most one in
// a hundred of the functions that push anything use rbp as the CFA register
// at some point; functions that push nothing (rsp+8 throughout) do not
// count. Before, half was enough, and a binary mixing code built both ways
// (a Rust program's own code and its standard library) was walked by frame
// pointers through functions that have none.
func TestHasFramePointersThreshold(t *testing.T) {
	var (
		withFP = []byte{0x41, 0x0e, 0x10, 0x86, 0x02, 0x43, 0x0d, 0x06} // push rbp; mov rbp, rsp
		noFP   = []byte{0x41, 0x0e, 0x10}                               // push rbx
		leaf   = []byte(nil)                                            // pushes nothing
	)
	for _, tc := range []struct {
		fp, nofp, leaves int
		want             bool
	}{
		{1, 0, 0, true},
		{5, 0, 9, true},
		{99, 1, 0, true},
		{98, 2, 0, false},
		{410, 41, 0, false}, // a small Rust release build: its own code, and the standard library's
		{1, 1, 0, false},
		{1, 2, 5, false},
		{0, 1, 0, false},
		{0, 0, 3, false},
	} {
		var fdes []ehframetest.FDE
		lo := uint64(0x1000)
		for i, n := range []int{tc.fp, tc.nofp, tc.leaves} {
			for range n {
				fdes = append(fdes, ehframetest.FDE{Lo: lo, N: 0x10, Ins: [][]byte{withFP, noFP, leaf}[i]})
				lo += 0x10
			}
		}
		tab, err := Build(buildEHFrame(0x400000, fdes...), 0x400000)
		if err != nil {
			t.Fatal(err)
		}
		if tab.FramePointerFDEs != tc.fp || tab.PushingFDEs != tc.fp+tc.nofp || tab.FDEs != len(fdes) {
			t.Errorf("%+v: %d FDEs, %d pushing, %d with frame pointers", tc, tab.FDEs, tab.PushingFDEs, tab.FramePointerFDEs)
		}
		if got := tab.HasFramePointers(); got != tc.want {
			t.Errorf("%+v: HasFramePointers() = %v", tc, got)
		}
	}
}

// TestBuildErrors: bad input gives an error, never a panic; whatever
// builds satisfies the invariants.
func TestBuildErrors(t *testing.T) {
	for name, data := range map[string][]byte{
		"nil":        nil,
		"empty":      {},
		"terminator": {0, 0, 0, 0},
		"short":      {1, 2},
		"ff":         bytes.Repeat([]byte{0xff}, 64),
		"cie only":   buildEHFrame(0x400000),
		"len past":   {0x40, 0, 0, 0, 0, 0, 0, 0},
		// A 64-bit length of 2^64-1: body+length wrapped around (panicked).
		"huge length": bytes.Repeat([]byte{0xff}, 12),
		// Only an FDE whose range is "negative" (sdata4 -0x800): it is
		// skipped (hi < lo gave a gap row below the rows before it), which
		// leaves nothing.
		"range wraps": buildEHFrame(0x400000, ehframetest.FDE{Lo: 0x1010, N: 0xffff_f800}),
	} {
		if tab, err := Build(data, 0x400000); err == nil {
			t.Errorf("%s: no error, %d rows", name, len(tab.Rows))
		}
	}
	if _, err := Build(buildEHFrame(0x400000), 0x400000); !errors.Is(err, ErrNoUnwindInfo) {
		t.Errorf("CIE only: %v, want ErrNoUnwindInfo", err)
	}
	// Up to 4 GiB: the rows have 32-bit PCs, and the None row after the
	// last function must fit too.
	for _, f := range []ehframetest.FDE{
		{Lo: 0x1_0000_0000, N: 0x10},
		{Lo: 0xffff_fff0, N: 0x20},
		{Lo: 0xffff_ff00, N: 0x100}, // ends at 4 GiB: the None row after it would be at 0
	} {
		addr := f.Lo - 0x10000
		data := buildEHFrame(addr, ehframetest.FDE{Lo: f.Lo - 0x1000, N: 0x10}, f)
		if tab, err := Build(data, addr); err == nil {
			t.Errorf("FDE %#x..%#x: no error, rows %+v", f.Lo, f.Lo+f.N, tab.Rows)
		}
	}
	// Just below 4 GiB is fine.
	addr := uint64(0xfff0_0000)
	buildAndCheck(t, buildEHFrame(addr, ehframetest.FDE{Lo: 0xffff_0000, N: 0x10}, ehframetest.FDE{Lo: 0xffff_ff00, N: 0xff}), addr)
	if _, err := Build(buildEHFrame(addr, ehframetest.FDE{Lo: 0xffff_ff00, N: 0xff}), addr); err != nil {
		t.Errorf("FDE ending at 4 GiB - 1: %v", err)
	}

	// A location moving backwards (DW_CFA_set_loc below the current one, or
	// an advance wrapping around) makes the FDE malformed: its rows would
	// be out of order. The other functions keep their rules.
	for name, ins := range map[string][]byte{
		"set_loc": {0x44, 0x0e, 0x10, 0x01, 0xf0, 0x0f, 0, 0, 0, 0, 0, 0, 0x0e, 0x18, 0x41},
		"advance wraps": {0x44, 0x0e, 0x10, 0x01, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			0x0e, 0x18, 0x7f, 0x0e, 0x20, 0x41},
	} {
		data := buildEHFrame(0x400000, ehframetest.FDE{Lo: 0x1000, N: 0x10}, ehframetest.FDE{Lo: 0x2000, N: 0x20, Ins: ins})
		tab, err := Build(data, 0x400000)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if err := checkInvariants(tab); err != nil {
			t.Errorf("%s: %v (rows %+v)", name, err, tab.Rows)
		}
		want := []Row{{0x1000, RSP, 0, 8}, {0x1010, None, 0, 0}}
		if tab.Malformed != 1 || !slices.Equal(tab.Rows, want) {
			t.Errorf("%s: %d malformed, rows %+v; want 1, %+v", name, tab.Malformed, tab.Rows, want)
		}
	}

	// Random bytes, and a real section cut short or with one byte changed.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		data := make([]byte, rng.IntN(256))
		for j := range data {
			data[j] = byte(rng.UintN(256))
		}
		buildAndCheck(t, data, rng.Uint64N(1<<33))
	}
	data, addr := ehframetest.Section(t, ehframetest.BuildC(t, ehframetest.Program, "-O2"))
	for _, d := range [][]byte{data, handBuilt()} {
		for n := range len(d) {
			buildAndCheck(t, d[:n], addr)
		}
		for i := range d {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(d)
				bad[i] ^= x
				buildAndCheck(t, bad, addr)
			}
		}
	}
}

func buildAndCheck(t testing.TB, data []byte, addr uint64) {
	t.Helper()
	tab, err := Build(data, addr)
	if err != nil {
		return
	}
	if err := checkInvariants(tab); err != nil {
		t.Fatalf("Build(%x, %#x): %v\nrows %+v", data, addr, err, tab.Rows)
	}
}

// FuzzBuild: any input gives an error or a table the kernel can search.
func FuzzBuild(f *testing.F) {
	f.Add(handBuilt(), uint64(0x400000))
	f.Add([]byte{}, uint64(0))
	data, addr := ehframetest.Section(f, ehframetest.BuildC(f, ehframetest.Program, "-O2"))
	f.Add(data, addr)
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		buildAndCheck(t, data, addr)
	})
}
