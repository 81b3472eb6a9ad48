package symbolize

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// manyUnitsLib builds a shared library with -g from units generated C files
// of funcs functions each. A function spans several source lines, so a unit
// has hundreds of line rows: more than one block of lineBlockRows.
func manyUnitsLib(tb testing.TB, units, funcs int) string {
	return built(tb, fmt.Sprintf("units-%d-%d.so", units, funcs), func(out string) error {
		dir := out + ".src"
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		args := []string{"-O1", "-g", "-shared", "-fPIC", "-o", out}
		for u := range units {
			var b strings.Builder
			fmt.Fprintf(&b, "int g%d;\n", u)
			for f := range funcs {
				fmt.Fprintf(&b, "int u%d_f%d(int x) {\n\tx = x * %d + g%d;\n\tif (x & 1)\n\t\tx += %d;\n\tg%d ^= x;\n\treturn x >> 1;\n}\n",
					u, f, 2*f+3, u, f+7, u)
			}
			src := filepath.Join(dir, fmt.Sprintf("u%d.c", u))
			if err := os.WriteFile(src, []byte(b.String()), 0o644); err != nil {
				return err
			}
			args = append(args, src)
		}
		return run(".", "gcc", args...)
	})
}

// unitFuncs returns the generated functions of unit u.
func unitFuncs(t *testing.T, lib string, u int) []elf.Symbol {
	t.Helper()
	prefix := fmt.Sprintf("u%d_f", u)
	fs := funcSyms(t, lib, func(name string) bool { return strings.HasPrefix(name, prefix) })
	if len(fs) == 0 {
		t.Fatalf("no functions of unit %d in %s", u, lib)
	}
	return fs
}

// TestLinesMatchAddr2line looks up every byte of every function of three
// units, each encoded in many blocks, and compares file:line with binutils'
// addr2line.
func TestLinesMatchAddr2line(t *testing.T) {
	lib := manyUnitsLib(t, 3, 150)
	tab, err := OpenSymbolTable(lib)
	if err != nil {
		t.Fatal(err)
	}
	if tab.lines == nil {
		t.Fatal("no DWARF lines in a library built with -g")
	}
	var pcs []uint64
	for u := range 3 {
		for _, s := range unitFuncs(t, lib, u) {
			for pc := s.Value; pc < s.Value+s.Size; pc++ {
				pcs = append(pcs, pc)
			}
		}
	}
	var in bytes.Buffer
	for _, pc := range pcs {
		fmt.Fprintf(&in, "%x\n", pc)
	}
	cmd := exec.Command("addr2line", "-e", lib)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	want := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(want) != len(pcs) {
		t.Fatalf("addr2line gave %d lines for %d PCs", len(want), len(pcs))
	}
	bad := 0
	for i, pc := range pcs {
		w, _, _ := strings.Cut(want[i], " (discriminator")
		sym, _ := tab.Lookup(pc)
		if got := sym.File + ":" + strconv.Itoa(sym.Line); got != w {
			if bad++; bad <= 10 {
				t.Errorf("pc %#x (%s): got %s, addr2line says %s", pc, sym.Function, got, w)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d addresses differ from addr2line", bad, len(pcs))
	}
	if len(tab.lines.units) != 3 {
		t.Fatalf("%d units decoded, want the 3 generated ones", len(tab.lines.units))
	}
	for off, u := range tab.lines.units {
		if len(u.blockAddrs) < 4 {
			t.Errorf("unit at %#x has %d blocks of rows: the test does not cross blocks", off, len(u.blockAddrs))
		}
	}
}

// TestLinesDropLeastRecentUnit: when the decoded units reach their bound, the
// least recently used unit is dropped, not all of them, so the units a
// profile keeps landing in stay decoded.
func TestLinesDropLeastRecentUnit(t *testing.T) {
	lib := manyUnitsLib(t, 3, 150)
	funcs := [][]elf.Symbol{unitFuncs(t, lib, 0), unitFuncs(t, lib, 1), unitFuncs(t, lib, 2)}
	// next returns an address of unit u not looked up before, so the answers
	// kept by address do not stand in for the unit.
	used := [3]int{}
	next := func(u int) uint64 {
		s := funcs[u][used[u]]
		used[u]++
		return s.Value + s.Size/2
	}

	all, err := OpenSymbolTable(lib)
	if err != nil {
		t.Fatal(err)
	}
	for u := range 3 {
		all.Lookup(next(u))
	}
	if len(all.lines.units) != 3 {
		t.Fatalf("%d units decoded, want 3", len(all.lines.units))
	}
	total := all.lines.bytes

	tab, err := OpenSymbolTable(lib)
	if err != nil {
		t.Fatal(err)
	}
	tab.lines.maxBytes = total - 1 // room for two of the three units
	step := func(u, wantDecodes int) {
		t.Helper()
		pc := next(u)
		if sym, _ := tab.Lookup(pc); sym.Line == 0 {
			t.Fatalf("%#x (%s): no line", pc, sym.Function)
		}
		if got := tab.lines.decodes; got != wantDecodes {
			t.Fatalf("after a lookup in unit %d: %d units decoded, want %d", u, got, wantDecodes)
		}
		if tab.lines.bytes > tab.lines.maxBytes {
			t.Fatalf("units hold %d bytes, bound %d", tab.lines.bytes, tab.lines.maxBytes)
		}
	}
	step(0, 1)
	step(1, 2)
	step(0, 2) // unit 0 is now the most recently used
	step(2, 3) // drops unit 1, the least recently used
	step(0, 3)
	step(2, 3)
	step(1, 4)
}
