package ehframe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/ehframe/ehframetest"
)

// TestCFAMatchesReadelf compares the CFA rule at every row boundary (first
// and last byte of each row) with what binutils computes, for binaries the
// test builds at several optimization levels and for the system's libc.
func TestCFAMatchesReadelf(t *testing.T) {
	for _, flags := range [][]string{
		{"-O0"},
		{"-O2"},
		{"-O2", "-fno-omit-frame-pointer"},
		{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"},
		{"-Os", "-fasynchronous-unwind-tables"},
	} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			bin := ehframetest.BuildC(t, ehframetest.Program, flags...)
			checkAgainstReadelf(t, bin)
		})
	}
	t.Run("libc", func(t *testing.T) {
		checkAgainstReadelf(t, systemLibc(t))
	})
}

// systemLibc is the path of the libc the compiler links against.
func systemLibc(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		t.Fatalf("locate libc: %v", err)
	}
	libc, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("locate libc: %v", err)
	}
	return libc
}

// Open reads .eh_frame of the ELF file at path.
func open(t testing.TB, path string) *Table {
	t.Helper()
	tab, err := New(ehframetest.Section(t, path))
	if err != nil {
		t.Fatalf("index .eh_frame of %s: %v", path, err)
	}
	return tab
}

// row is one row of readelf's interpreted table: its location range, the
// CFA column and the rbp, rbx and return address columns as printed (""
// when readelf shows no such column for the entry).
type row struct {
	lo, hi            uint64
	cfa, rbp, rbx, ra string
	fdeLo, fdeHi      uint64 // the FDE the row belongs to
}

var (
	cieLine = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE `)
	fdeLine = regexp.MustCompile(`^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	rowLine = regexp.MustCompile(`^([0-9a-f]{16}) (\S+)`)
	colLine = regexp.MustCompile(`^\s+LOC\s+CFA\b`)
	// A value is one word, except "r9 (r9)" for a register saved in another.
	valWord = regexp.MustCompile(`r\d+ \([^)]*\)|\S+`)
)

// readelfRows parses readelf --debug-dump=frames-interp: per FDE, rows of
// (location, CFA, rbp, ra); an FDE without rows keeps its CIE's initial
// row.
func readelfRows(t *testing.T, path string) []row {
	t.Helper()
	out, err := exec.Command("readelf", "--debug-dump=no-follow-links", "--debug-dump=frames-interp", path).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	cieRow := map[string]row{}
	var rows []row
	var cur []row // rows of the entry being read
	var curCIE string
	var inFDE bool
	var fdeLo, fdeHi uint64
	var fdeCIE string
	var cols []string // register columns of the entry being read
	flush := func() {
		switch {
		case inFDE && len(cur) == 0:
			r, ok := cieRow[fdeCIE]
			if !ok {
				t.Fatalf("FDE refers to unknown CIE %s", fdeCIE)
			}
			r.lo, r.hi, r.fdeLo, r.fdeHi = fdeLo, fdeHi, fdeLo, fdeHi
			rows = append(rows, r)
		case inFDE:
			for i := range cur {
				cur[i].hi = fdeHi
				if i+1 < len(cur) {
					cur[i].hi = cur[i+1].lo
				}
				cur[i].fdeLo, cur[i].fdeHi = fdeLo, fdeHi
			}
			rows = append(rows, cur...)
		case curCIE != "" && len(cur) > 0:
			cieRow[curCIE] = cur[0]
		}
		cur, inFDE, curCIE, cols = nil, false, "", nil
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := cieLine.FindStringSubmatch(line); m != nil {
			flush()
			curCIE = m[1]
			continue
		}
		if m := fdeLine.FindStringSubmatch(line); m != nil {
			flush()
			inFDE, fdeCIE = true, m[1]
			fdeLo, _ = strconv.ParseUint(m[2], 16, 64)
			fdeHi, _ = strconv.ParseUint(m[3], 16, 64)
			continue
		}
		if colLine.MatchString(line) {
			cols = strings.Fields(line)[2:]
			continue
		}
		if m := rowLine.FindStringSubmatch(line); m != nil && (inFDE || curCIE != "") {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			r := row{lo: loc, cfa: m[2]}
			vals := valWord.FindAllString(line, -1)[2:]
			if len(vals) != len(cols) {
				t.Fatalf("readelf row %q does not match the columns %q", line, cols)
			}
			for i, c := range cols {
				switch c {
				case "rbp":
					r.rbp = vals[i]
				case "rbx":
					r.rbx = vals[i]
				case "ra":
					r.ra = vals[i]
				}
			}
			cur = append(cur, r)
		}
	}
	flush()
	return rows
}

func checkAgainstReadelf(t *testing.T, path string) {
	tab := open(t, path)
	rows := readelfRows(t, path)
	if len(rows) < 5 {
		t.Fatalf("readelf gave only %d rows for %s", len(rows), path)
	}
	checked := 0
	for _, r := range rows {
		if r.hi <= r.lo {
			continue // an empty row (advance by 0)
		}
		for _, pc := range []uint64{r.lo, r.lo + (r.hi-r.lo)/2, r.hi - 1} {
			rule, ok, err := tab.CFA(pc)
			if err != nil || !ok {
				t.Fatalf("%s: CFA(%#x) = ok %v, err %v; readelf says %s", path, pc, ok, err, r.cfa)
			}
			if got := rule.String(); got != r.cfa {
				t.Fatalf("%s: CFA(%#x) = %s, readelf says %s", path, pc, got, r.cfa)
			}
			checked++
		}
	}
	t.Logf("%s: %d FDEs, %d rows, %d PCs agree", path, tab.FDEs(), len(rows), checked)
}

func TestCFAOutsideAnyFDE(t *testing.T) {
	tab := open(t, ehframetest.BuildC(t, ehframetest.Program, "-O2"))
	for _, pc := range []uint64{0, 1, ^uint64(0)} {
		if _, ok, err := tab.CFA(pc); ok || err != nil {
			t.Errorf("CFA(%#x) = ok %v, err %v; want not found", pc, ok, err)
		}
	}
}

// TestFunctionStart: every byte of a function the compiler described (a
// function symbol with a size and an FDE at its address) maps to the
// function's first byte, in a test binary built here. In the system's libc,
// whose hand-written assembly may split a function into several FDEs
// (__clone's child part has one of its own), a byte maps to the start of
// the part that holds it: within the function, at or below the byte.
func TestFunctionStart(t *testing.T) {
	for _, bin := range []struct {
		path   string
		strict bool // one FDE a function
	}{
		{ehframetest.BuildC(t, ehframetest.Program, "-O2"), true},
		{systemLibc(t), false},
	} {
		tab := open(t, bin.path)
		ef, err := elf.Open(bin.path)
		if err != nil {
			t.Fatal(err)
		}
		syms, err := ef.Symbols()
		if err != nil {
			syms, err = ef.DynamicSymbols() // libc keeps only .dynsym
		}
		ef.Close()
		if err != nil {
			t.Fatalf("%s: symbols: %v", bin.path, err)
		}
		checked, split := 0, 0
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 {
				continue
			}
			if start, ok := tab.FunctionStart(s.Value); !ok || start != s.Value {
				continue // no FDE of its own (aliases of one body are checked once)
			}
			whole := true
			for _, pc := range []uint64{s.Value + s.Size/2, s.Value + s.Size - 1} {
				start, ok := tab.FunctionStart(pc)
				if ok && start == s.Value {
					continue
				}
				whole = false
				if bin.strict || !ok || start < s.Value || start > pc {
					t.Fatalf("%s: FunctionStart(%#x) in %s [%#x, %#x) = %#x, %v", bin.path, pc, s.Name, s.Value, s.Value+s.Size, start, ok)
				}
			}
			checked++
			if !whole {
				split++
			}
		}
		if checked < 5 {
			t.Fatalf("%s: only %d functions with an FDE at their symbol; the test proves nothing", bin.path, checked)
		}
		t.Logf("%s: %d functions, %d of them in several FDEs", bin.path, checked, split)
		for _, pc := range []uint64{0, ^uint64(0)} {
			if _, ok := tab.FunctionStart(pc); ok {
				t.Errorf("%s: FunctionStart(%#x) found a function", bin.path, pc)
			}
		}
	}
}

// TestMalformed feeds truncated and corrupted sections: errors, never panics.
func TestMalformed(t *testing.T) {
	bin := ehframetest.BuildC(t, ehframetest.Program, "-O2")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	sec := ef.Section(".eh_frame")
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(data[:len(data)/2+3], sec.Addr); err == nil {
		t.Error("half a section: no error")
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0xa5
		tab, err := New(bad, sec.Addr)
		if err != nil {
			continue
		}
		for _, f := range tab.fdes {
			_, _, _ = tab.CFA(f.lo)
			_, _, _ = tab.CFA(f.hi - 1)
		}
	}
}

func BenchmarkCFA(b *testing.B) {
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		b.Fatal(err)
	}
	tab := open(b, strings.TrimSpace(string(out)))
	pcs := make([]uint64, 0, len(tab.fdes))
	for _, f := range tab.fdes {
		pcs = append(pcs, f.lo+(f.hi-f.lo)/2)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := tab.CFA(pcs[i%len(pcs)]); err != nil {
			b.Fatal(fmt.Errorf("CFA: %w", err))
		}
	}
}

// FuzzTable: any section gives an index or an error, and any lookup a rule
// or an error, never a panic or a hang. Seeded with a real section.
func FuzzTable(f *testing.F) {
	ef, err := elf.Open(ehframetest.BuildC(f, ehframetest.Program, "-O2"))
	if err == nil {
		if data, err := ef.Section(".eh_frame").Data(); err == nil {
			f.Add(data, uint64(0x1000))
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		tab, err := New(data, 0)
		if err != nil {
			return
		}
		_, _, _ = tab.CFA(pc)
		for _, fd := range tab.fdes {
			_, _, _ = tab.CFA(fd.lo)
		}
	})
}

// TestRowsMatchReadelf compares every row Rows returns, all three columns
// the unwinder uses (CFA, rbp, return address), with readelf's interpreted
// table.
func TestRowsMatchReadelf(t *testing.T) {
	for _, flags := range [][]string{
		{"-O2", "-fno-omit-frame-pointer"},
		{"-O2", "-fomit-frame-pointer"},
	} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			c := checkRowsAgainstReadelf(t, ehframetest.BuildC(t, ehframetest.Program, flags...))
			c.require(t, "rbp saved", "other rbp rule", "ra undefined")
		})
	}
	t.Run("libc", func(t *testing.T) {
		c := checkRowsAgainstReadelf(t, "/lib/x86_64-linux-gnu/libc.so.6")
		c.require(t, "rbp saved", "other rbp rule", "ra undefined", "rbx saved")
	})
	// ld.so: its lazy-binding trampolines keep their CFA in rbx.
	t.Run("ld.so", func(t *testing.T) {
		c := checkRowsAgainstReadelf(t, "/lib64/ld-linux-x86-64.so.2")
		c.require(t, "rbp saved", "rbx saved")
	})
}

// rowCounts counts the compared rows by the kind of rule they hold.
type rowCounts map[string]int

// require fails the test unless each kind was compared at least once.
func (c rowCounts) require(t *testing.T, kinds ...string) {
	t.Helper()
	for _, k := range kinds {
		if c[k] == 0 {
			t.Errorf("no row with %s compared: the test covers too little (%v)", k, c)
		}
	}
}

// wantReg maps readelf's column of a callee-saved register (rbp, rbx) to a
// rule. readelf prints "u" both for DW_CFA_undefined and for a column the
// FDE mentions but has not set yet (or has restored to the CIE's, which
// never mentions it), which is the same-value rule for a callee-saved
// register; so "u" may mean RegUndefined only in a file that undefines the
// register somewhere.
func wantReg(col string, undefinesReg bool) (RegRule, bool) {
	switch {
	case col == "" || col == "s":
		return RegRule{Kind: RegSame}, false
	case col == "u":
		return RegRule{Kind: RegSame}, undefinesReg
	case col[0] == 'c':
		off, err := strconv.ParseInt(col[1:], 10, 64)
		if err != nil {
			return RegRule{Kind: RegOther}, false
		}
		return RegRule{Kind: RegAtCFA, Offset: off}, false
	}
	// "v+8", "exp", "vexp", "r9 (r9)": rules the unwinder does not follow.
	return RegRule{Kind: RegOther}, false
}

// checkRowsAgainstReadelf compares every row of path's FDEs with
// readelf's and counts them by rule.
func checkRowsAgainstReadelf(t *testing.T, path string) rowCounts {
	t.Helper()
	raw, err := exec.Command("readelf", "--debug-dump=no-follow-links", "--debug-dump=frames", path).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	undefinesRBP := bytes.Contains(raw, []byte("DW_CFA_undefined: r6 "))
	undefinesRBX := bytes.Contains(raw, []byte("DW_CFA_undefined: r3 "))

	type key struct{ lo, hi uint64 }
	want := map[key][]row{}
	for _, r := range readelfRows(t, path) {
		k := key{r.fdeLo, r.fdeHi}
		if _, ok := want[k]; !ok {
			want[k] = nil
		}
		if r.hi > r.lo { // drop empty rows (advance by 0, or past the end)
			want[k] = append(want[k], r)
		}
	}
	if len(want) < 5 {
		t.Fatalf("readelf gave only %d FDEs for %s", len(want), path)
	}

	tab := open(t, path)
	seen := map[key]bool{}
	var prevLo uint64
	nrows, c := 0, rowCounts{}
	bad := tab.Rows(func(lo, hi uint64, rows []Row) {
		k := key{lo, hi}
		if seen[k] {
			t.Errorf("FDE %#x..%#x reported twice", lo, hi)
		}
		seen[k] = true
		if lo < prevLo {
			t.Errorf("FDE %#x..%#x after one at %#x: not in PC order", lo, hi, prevLo)
		}
		prevLo = lo
		exp, ok := want[k]
		if !ok {
			t.Errorf("FDE %#x..%#x: readelf has no such FDE", lo, hi)
			return
		}
		if len(rows) != len(exp) {
			t.Errorf("FDE %#x..%#x: %d rows, readelf has %d:\n got %v\nwant %v", lo, hi, len(rows), len(exp), rows, exp)
			return
		}
		for i, r := range rows {
			e := exp[i]
			if r.PC != e.lo {
				t.Errorf("FDE %#x..%#x row %d at %#x, readelf's at %#x", lo, hi, i, r.PC, e.lo)
				continue
			}
			if got := r.CFA.String(); got != e.cfa {
				t.Errorf("%#x: CFA %s, readelf says %s", r.PC, got, e.cfa)
			}
			rbp, either := wantReg(e.rbp, undefinesRBP)
			if r.RBP != rbp && !(either && r.RBP.Kind == RegUndefined) {
				t.Errorf("%#x: rbp rule %+v, readelf says %q", r.PC, r.RBP, e.rbp)
			}
			rbx, either := wantReg(e.rbx, undefinesRBX)
			if r.RBX != rbx && !(either && r.RBX.Kind == RegUndefined) {
				t.Errorf("%#x: rbx rule %+v, readelf says %q", r.PC, r.RBX, e.rbx)
			}
			if r.RBX.Kind == RegAtCFA {
				c["rbx saved"]++
			}
			if r.RAUndefined != (e.ra == "u") {
				t.Errorf("%#x: RAUndefined %v, readelf's ra column %q", r.PC, r.RAUndefined, e.ra)
			}
			nrows++
			switch r.RBP.Kind {
			case RegAtCFA:
				c["rbp saved"]++
			case RegOther:
				c["other rbp rule"]++
			}
			if r.RAUndefined {
				c["ra undefined"]++
			}
		}
	})
	if bad != 0 {
		t.Errorf("%d malformed FDEs", bad)
	}
	for k := range want {
		if !seen[k] {
			t.Errorf("readelf's FDE %#x..%#x missing from Rows", k.lo, k.hi)
		}
	}
	t.Logf("%s: %d FDEs, %d rows agree: %v", path, len(seen), nrows, c)
	return c
}

// TestRowsHandBuilt runs instructions gcc emits rarely or never on a
// hand-built section and checks every row exactly, and CFA at every PC
// against the rows.
func TestRowsHandBuilt(t *testing.T) {
	const addr = 0x400000
	cieIns := []byte{
		0x0c, 0x07, 0x08, // def_cfa rsp+8
		0x90, 0x01, // offset r16 at cfa-8
	}
	ins := []byte{
		0x40,       // advance 0: no row
		0x41,       // advance 1
		0x0e, 0x10, // def_cfa_offset 16
		0x86, 0x02, // offset r6 at cfa-16
		0x43,       // advance 3
		0x0d, 0x06, // def_cfa_register rbp
		0x44,             // advance 4
		0x0a,             // remember_state
		0x0c, 0x07, 0x08, // def_cfa rsp+8
		0xc6,       // restore r6 (the CIE does not mention it: same value)
		0x42,       // advance 2
		0x0b,       // restore_state: rbp+16 and rbp at cfa-16 again
		0x42,       // advance 2
		0x07, 0x10, // undefined r16
		0x42,       // advance 2
		0x06, 0x10, // restore_extended r16: back to cfa-8
		0x0f, byte(len(ehframetest.PLTExpr)), // def_cfa_expression (the PLT rule)
	}
	ins = append(ins, ehframetest.PLTExpr...)
	ins = append(ins,
		0x44,             // advance 4
		0x0c, 0x07, 0x10, // def_cfa rsp+16
		0x07, 0x06, // undefined r6
		0x02, 0x04, // advance_loc1 4
		0x08, 0x06, // same_value r6
		0x0f, 0x02, 0x77, 0x08, // def_cfa_expression breg7 8: not the PLT one
		0x03, 0x10, 0x00, // advance_loc2 16
		0x0c, 0x07, 0x08, // def_cfa rsp+8
		0x09, 0x06, 0x03, // register r6 in rbx
		0x04, 0x04, 0, 0, 0, // advance_loc4 4
		0x0a, 0x0a, 0x0b, // remember twice, restore once
		0x02, 0x40, // advance_loc1 64: past the end; the rows from here are dropped
		0x0e, 0x20, // def_cfa_offset 32
	)
	data := ehframetest.Assemble(addr, cieIns,
		ehframetest.FDE{Lo: 0x401000, N: 0x40, Ins: ins},
		ehframetest.FDE{Lo: 0x400f00, N: 0x20}, // no instructions: the CIE's row
	)

	var (
		sp8   = Rule{Register: RegRSP, Offset: 8}
		sp16  = Rule{Register: RegRSP, Offset: 16}
		bp16  = Rule{Register: RegRBP, Offset: 16}
		plt   = Rule{Expr: true, PLT: 11}
		expr  = Rule{Expr: true}
		same  = RegRule{Kind: RegSame}
		atm16 = RegRule{Kind: RegAtCFA, Offset: -16}
		undef = RegRule{Kind: RegUndefined}
		inReg = RegRule{Kind: RegOther}
		want  = []Row{
			{0x401000, State{CFA: sp8, RBP: same}},
			{0x401001, State{CFA: sp16, RBP: atm16}},
			{0x401004, State{CFA: bp16, RBP: atm16}},
			{0x401008, State{CFA: sp8, RBP: same}},
			{0x40100a, State{CFA: bp16, RBP: atm16}},
			{0x40100c, State{CFA: bp16, RBP: atm16, RAUndefined: true}},
			{0x40100e, State{CFA: plt, RBP: atm16}},
			{0x401012, State{CFA: sp16, RBP: undef}},
			{0x401016, State{CFA: expr, RBP: same}},
			{0x401026, State{CFA: sp8, RBP: inReg}},
			// remember, remember, restore change nothing, but the advance
			// still starts a row (readelf prints it too).
			{0x40102a, State{CFA: sp8, RBP: inReg}},
		}
		wantOther = []Row{{0x400f00, State{CFA: sp8, RBP: same}}}
	)

	tab, err := New(data, addr)
	if err != nil {
		t.Fatal(err)
	}
	type fde struct {
		lo, hi uint64
		rows   []Row
	}
	var got []fde
	if bad := tab.Rows(func(lo, hi uint64, rows []Row) {
		got = append(got, fde{lo, hi, slices.Clone(rows)})
	}); bad != 0 {
		t.Fatalf("%d malformed FDEs", bad)
	}
	if len(got) != 2 {
		t.Fatalf("%d FDEs, want 2", len(got))
	}
	if got[0].lo != 0x400f00 || got[0].hi != 0x400f20 || !slices.Equal(got[0].rows, wantOther) {
		t.Errorf("first FDE %#x..%#x rows %+v, want 0x400f00..0x400f20 %+v", got[0].lo, got[0].hi, got[0].rows, wantOther)
	}
	if got[1].lo != 0x401000 || got[1].hi != 0x401040 {
		t.Errorf("second FDE %#x..%#x, want 0x401000..0x401040", got[1].lo, got[1].hi)
	}
	if !slices.Equal(got[1].rows, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", got[1].rows, want)
	}

	// CFA evaluates up to the PC instead of to the end: the same rules.
	for _, f := range got {
		for pc := f.lo; pc < f.hi; pc++ {
			i := 0
			for i+1 < len(f.rows) && f.rows[i+1].PC <= pc {
				i++
			}
			rule, ok, err := tab.CFA(pc)
			if err != nil || !ok || rule != f.rows[i].CFA {
				t.Errorf("CFA(%#x) = %+v, %v, %v; want %+v", pc, rule, ok, err, f.rows[i].CFA)
			}
		}
	}
	for _, pc := range []uint64{0x400eff, 0x400f20, 0x400fff, 0x401040} {
		if _, ok, err := tab.CFA(pc); ok || err != nil {
			t.Errorf("CFA(%#x) = ok %v, err %v; want not covered", pc, ok, err)
		}
	}
}

// TestRestoreToCIERule: DW_CFA_restore and restore_extended of rbp and the
// return address go back to the CIE's rules, not to "same value".
func TestRestoreToCIERule(t *testing.T) {
	cieIns := []byte{
		0x0c, 0x07, 0x18, // def_cfa rsp+24
		0x90, 0x01, // offset r16 at cfa-8
		0x86, 0x03, // offset r6 at cfa-24
		0x07, 0x10, // undefined r16
	}
	ins := []byte{
		0x86, 0x02, // offset r6 at cfa-16
		0x90, 0x01, // offset r16 at cfa-8
		0x41,       // advance 1
		0xc6,       // restore r6
		0xd0,       // restore r16
		0x41,       // advance 1
		0x08, 0x06, // same_value r6
		0x41,       // advance 1
		0x06, 0x06, // restore_extended r6
	}
	tab, err := New(ehframetest.Assemble(0x400000, cieIns, ehframetest.FDE{Lo: 0x401000, N: 0x10, Ins: ins}), 0x400000)
	if err != nil {
		t.Fatal(err)
	}
	sp24 := Rule{Register: RegRSP, Offset: 24}
	want := []Row{
		{0x401000, State{CFA: sp24, RBP: RegRule{Kind: RegAtCFA, Offset: -16}}},
		{0x401001, State{CFA: sp24, RBP: RegRule{Kind: RegAtCFA, Offset: -24}, RAUndefined: true}},
		{0x401002, State{CFA: sp24, RBP: RegRule{Kind: RegSame}, RAUndefined: true}},
		{0x401003, State{CFA: sp24, RBP: RegRule{Kind: RegAtCFA, Offset: -24}, RAUndefined: true}},
	}
	var got []Row
	if bad := tab.Rows(func(lo, hi uint64, rows []Row) { got = append(got, rows...) }); bad != 0 {
		t.Fatalf("%d malformed FDEs", bad)
	}
	if !slices.Equal(got, want) {
		t.Errorf("rows:\n got %+v\nwant %+v", got, want)
	}
}

// TestPLTThreshold: only binutils' PLT expression, with DW_OP_lit1..lit15 as
// the threshold, yields one.
func TestPLTThreshold(t *testing.T) {
	if n := pltThreshold(ehframetest.PLTExpr); n != 11 {
		t.Errorf("PLT expression: %d, want 11", n)
	}
	lit10 := slices.Clone(ehframetest.PLTExpr)
	lit10[6] = 0x3a // DW_OP_lit10
	if n := pltThreshold(lit10); n != 10 {
		t.Errorf("DW_OP_lit10: %d, want 10", n)
	}
	for i := range ehframetest.PLTExpr {
		bad := slices.Clone(ehframetest.PLTExpr)
		bad[i] ^= 0x40
		if n := pltThreshold(bad); n != 0 {
			t.Errorf("byte %d changed to %#x: %d, want 0", i, bad[i], n)
		}
	}
	if n := pltThreshold(ehframetest.PLTExpr[:10]); n != 0 {
		t.Errorf("truncated: %d, want 0", n)
	}
	if n := pltThreshold(append(slices.Clone(ehframetest.PLTExpr), 0x96)); n != 0 { // trailing DW_OP_nop
		t.Errorf("longer: %d, want 0", n)
	}
}

// TestHugeLength: a 64-bit entry length near 2^64 is an error (body+length
// used to wrap around to a small end that passed the bounds check, and
// reading the CIE pointer panicked).
func TestHugeLength(t *testing.T) {
	for _, data := range [][]byte{
		bytes.Repeat([]byte{0xff}, 12),
		bytes.Repeat([]byte{0xff}, 15),
		append(ehframetest.Assemble(0x400000, nil, ehframetest.FDE{Lo: 0x401000, N: 0x10})[:0x1c:0x1c], bytes.Repeat([]byte{0xff}, 12)...),
	} {
		if _, err := New(data, 0x400000); err == nil {
			t.Errorf("New(%x): no error", data)
		}
	}
}

// TestRangeWraps: an FDE whose range runs past the top of the address
// space (sdata4 ranges are sign-extended) is skipped, not kept with
// hi < lo; the other FDEs stay.
func TestRangeWraps(t *testing.T) {
	data := ehframetest.Assemble(0x400000, nil, ehframetest.FDE{Lo: 0x401000, N: 0x10}, ehframetest.FDE{Lo: 0x401010, N: 0xffff_f800})
	tab, err := New(data, 0x400000)
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.fdes) != 1 || tab.fdes[0].lo != 0x401000 || tab.fdes[0].hi != 0x401010 {
		t.Errorf("FDEs %+v, want only the well-formed one", tab.fdes)
	}
}

// TestLocationBackwards: a location below the current one (a corrupt
// DW_CFA_set_loc, or an advance wrapping around the address space) makes
// the FDE malformed, as rows out of order would break binary searches.
// The rows before it are still usable by CFA.
func TestLocationBackwards(t *testing.T) {
	cieIns := []byte{0x0c, 0x07, 0x08, 0x90, 0x01}
	for name, ins := range map[string][]byte{
		"set_loc": {0x44, 0x0e, 0x10, 0x01, 0xf0, 0x0f, 0x40, 0, 0, 0, 0, 0, 0x0e, 0x18, 0x41},
		"advance wraps": {0x44, 0x0e, 0x10, 0x01, 0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
			0x0e, 0x18, 0x7f, 0x0e, 0x20, 0x41},
	} {
		data := ehframetest.Assemble(0x400000, cieIns, ehframetest.FDE{Lo: 0x401000, N: 0x10}, ehframetest.FDE{Lo: 0x402000, N: 0x20, Ins: ins})
		tab, err := New(data, 0x400000)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var los []uint64
		bad := tab.Rows(func(lo, hi uint64, rows []Row) {
			los = append(los, lo)
			for i := 1; i < len(rows); i++ {
				if rows[i].PC <= rows[i-1].PC || rows[i].PC < lo || rows[i].PC >= hi {
					t.Errorf("%s: FDE %#x..%#x rows out of order: %+v", name, lo, hi, rows)
				}
			}
		})
		if bad != 1 || !slices.Equal(los, []uint64{0x401000}) {
			t.Errorf("%s: %d malformed, FDEs at %#x; want 1, [0x401000]", name, bad, los)
		}
		if rule, ok, err := tab.CFA(0x402003); err != nil || !ok || rule != (Rule{Register: RegRSP, Offset: 8}) {
			t.Errorf("%s: CFA before the bad location = %v, %v, %v; want rsp+8", name, rule, ok, err)
		}
		// The set_loc to 2^64-16 passes any PC before the advance wraps.
		if _, _, err := tab.CFA(0x402010); (err == nil) != (name == "advance wraps") {
			t.Errorf("%s: CFA after the bad location: error %v", name, err)
		}
	}
}

// TestSignalTrampoline: glibc's __restore_rt FDE (a "zRS" CIE, CFA
// *(rsp+160)) is a signal trampoline; the same expression under a CIE
// without 'S', or another expression under one with it, is not.
func TestSignalTrampoline(t *testing.T) {
	const addr = 0x3000
	cieIns := []byte{0x0c, 0x07, 0x08, 0x90, 0x01}
	sigCFA := append([]byte{0x0f, byte(len(signalCFAExpr))}, signalCFAExpr...)
	other := []byte{0x0f, 0x04, 0x77, 0xa8, 0x01, 0x06} // *(rsp+168)
	for _, c := range []struct {
		name, aug string
		ins       []byte
		want      Rule
	}{
		{"zRS, *(rsp+160)", "S", sigCFA, Rule{Expr: true, Signal: true}},
		{"zR, *(rsp+160)", "", sigCFA, Rule{Expr: true}},
		{"zRS, *(rsp+168)", "S", other, Rule{Expr: true}},
		{"zRS, rsp+8", "S", nil, Rule{Register: RegRSP, Offset: 8}},
	} {
		data := ehframetest.AssembleAugmented(addr, c.aug, cieIns, ehframetest.FDE{Lo: 0x401000, N: 0x10, Ins: c.ins})
		tab, err := New(data, addr)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		rule, ok, err := tab.CFA(0x401008)
		if err != nil || !ok || rule != c.want {
			t.Errorf("%s: CFA %+v (found %v, %v), want %+v", c.name, rule, ok, err, c.want)
		}
	}
}
