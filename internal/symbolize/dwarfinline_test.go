package symbolize

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestInlinedCallsMatchLLVMSymbolizer looks up every byte of every function
// of a C++ program built with -O2 -g, by GCC (DWARF 5 and 4: range lists in
// .debug_rnglists and .debug_ranges) and by clang, and compares the inline
// chain with llvm-symbolizer's: the inlined functions' names and every
// frame's file and line (the outermost function's name is the symbol
// table's, as before). Functions without a linkage name are named with the
// namespaces they are declared in, where llvm-symbolizer gives the plain
// name.
func TestInlinedCallsMatchLLVMSymbolizer(t *testing.T) {
	src := testdata(t, "inlined.cc")
	for _, b := range []struct {
		name     string
		compiler string
		flags    []string
	}{
		{"gcc", "g++", []string{"-gdwarf-5"}},
		{"gcc-dwarf4", "g++", []string{"-gdwarf-4"}},
		{"clang", "clang++", []string{"-gdwarf-5"}},
	} {
		t.Run(b.name, func(t *testing.T) {
			bin := built(t, "inlined-"+b.name, func(out string) error {
				return run(".", b.compiler, append([]string{"-O2", "-g", "-o", out, src}, b.flags...)...)
			})
			tab, err := OpenSymbolTable(bin)
			if err != nil {
				t.Fatal(err)
			}
			var pcs []uint64
			for _, f := range funcSyms(t, bin, func(string) bool { return true }) {
				for pc := f.Value; pc < f.Value+f.Size; pc++ {
					pcs = append(pcs, pc)
				}
			}
			want := llvmSymbolizer(t, bin, pcs)
			bad, inlined, deepest := 0, 0, 0
			seen := map[string]bool{}
			for i, pc := range pcs {
				got := tab.LookupInline(pc, nil)
				w := want[i]
				if len(got) > 1 {
					inlined++
					deepest = max(deepest, len(got))
				}
				for _, s := range got[:max(len(got)-1, 0)] {
					seen[s.Function] = true
				}
				if !sameChain(got, w) {
					if bad++; bad <= 5 {
						t.Errorf("pc %#x: got %s, llvm-symbolizer says %s", pc, chainString(got), chainString(w))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d addresses differ from llvm-symbolizer", bad, len(pcs))
			}
			t.Logf("%d of %d addresses in inlined code, chains up to %d deep, %d inlined functions", inlined, len(pcs), deepest, len(seen))
			// GCC gives the static functions no linkage name: their
			// names are qualified by their namespace all the same.
			leaf, middle := "shop::leaf", "shop::middle"
			// What makes the comparison mean something: addresses in
			// inlined code, chains three deep (leaf in middle in
			// shop::outer), the standard library's inlined functions.
			if inlined < 100 || deepest < 3 || !seen[leaf] || !seen[middle] || !seen["std::map<int, int, std::less<int>, std::allocator<std::pair<int const, int> > >::find"] {
				t.Errorf("%d of %d addresses in inlined code, deepest chain %d, %d inlined functions: the program was not inlined as it was written to be", inlined, len(pcs), deepest, len(seen))
			}
		})
	}
}

// TestInlinedCallsBounded: the inlined calls kept stay under their bound,
// the least recently used function's dropped first, and the answers do
// not change when a function's calls are read again.
func TestInlinedCallsBounded(t *testing.T) {
	src := testdata(t, "inlined.cc")
	bin := built(t, "inlined-gcc", func(out string) error {
		return run(".", "g++", "-O2", "-g", "-o", out, src, "-gdwarf-5")
	})
	var pcs []uint64
	for _, name := range []string{"main", "_ZN4shop5outerERKSt6vectorIiSaIiEERSt3mapIiiSt4lessIiESaISt4pairIKiiEEE"} {
		f := funcSym(t, bin, name)
		for pc := f.Value; pc < f.Value+f.Size; pc++ {
			pcs = append(pcs, pc)
		}
	}
	all, err := OpenSymbolTable(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]Symbol, len(pcs))
	for i, pc := range pcs {
		want[i] = all.LookupInline(pc, nil)
	}
	if len(all.lines.calls) != 2 {
		t.Fatalf("the calls of %d functions read, want main's and shop::outer's", len(all.lines.calls))
	}
	largest := 0
	for _, c := range all.lines.calls {
		largest = max(largest, c.size())
	}

	tab, err := OpenSymbolTable(bin)
	if err != nil {
		t.Fatal(err)
	}
	tab.lines.maxCalls = largest // room for one function's calls
	for round := range 2 {
		for i, pc := range pcs {
			// Past the per-address answers, so each lookup reads its
			// function's calls if they were dropped.
			clear(tab.lines.pcs)
			if got := tab.LookupInline(pc, nil); !slices.Equal(got, want[i]) {
				t.Fatalf("round %d, pc %#x: %s, with no bound %s", round, pc, chainString(got), chainString(want[i]))
			}
			if tab.lines.callBytes > tab.lines.maxCalls || len(tab.lines.calls) != 1 {
				t.Fatalf("%d functions' calls kept in %d bytes, bound %d", len(tab.lines.calls), tab.lines.callBytes, tab.lines.maxCalls)
			}
		}
	}
}

// llvmSymbolizer returns llvm-symbolizer's inline chain for each of pcs,
// innermost first, names demangled as demangled does ("" and 0 for "??").
func llvmSymbolizer(t *testing.T, bin string, pcs []uint64) [][]Symbol {
	t.Helper()
	var in bytes.Buffer
	for _, pc := range pcs {
		fmt.Fprintf(&in, "%#x\n", pc)
	}
	cmd := exec.Command("llvm-symbolizer", "--no-demangle", "--obj="+bin)
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("llvm-symbolizer: %v", err)
	}
	blocks := strings.Split(strings.TrimSpace(string(out)), "\n\n")
	if len(blocks) != len(pcs) {
		t.Fatalf("llvm-symbolizer gave %d answers for %d addresses", len(blocks), len(pcs))
	}
	chains := make([][]Symbol, len(blocks))
	for i, b := range blocks {
		lines := strings.Split(b, "\n")
		for j := 0; j+1 < len(lines); j += 2 {
			var s Symbol
			if lines[j] != "??" {
				s.Function = demangled(lines[j])
			}
			// file:line:column
			loc := lines[j+1]
			if k := strings.LastIndexByte(loc, ':'); k >= 0 {
				loc = loc[:k]
			}
			if k := strings.LastIndexByte(loc, ':'); k >= 0 {
				s.Line, _ = strconv.Atoi(loc[k+1:])
				if s.File = filepath.Clean(loc[:k]); s.File == "??" {
					s.File = "" // debug/dwarf cleans the paths it joins
				}
			}
			if s.Line == 0 {
				s.File = "" // a row of line 0 is no line (see unitLines.lookup)
			}
			chains[i] = append(chains[i], s)
		}
	}
	return chains
}

// sameChain: as many frames, the same file and line in each, the same
// names but for the outermost frame's (the symbol table's). A function
// llvm-symbolizer names by its plain name (no linkage name) may be
// qualified by its namespaces in got.
func sameChain(got, want []Symbol) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].File != want[i].File || got[i].Line != want[i].Line {
			return false
		}
		if g, w := got[i].Function, want[i].Function; i < len(got)-1 && g != w && !strings.HasSuffix(g, "::"+w) {
			return false
		}
	}
	return true
}

func chainString(c []Symbol) string {
	var b strings.Builder
	for i, s := range c {
		if i > 0 {
			b.WriteString(" < ")
		}
		fmt.Fprintf(&b, "%s %s:%d", s.Function, s.File, s.Line)
	}
	return b.String()
}
