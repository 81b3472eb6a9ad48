package symbolize

import (
	"debug/elf"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

const leafCSrc = `#include <stdio.h>
__attribute__((noinline)) unsigned long hot_leaf(unsigned long x) {
	for (int i = 0; i < 100; i++) { x = x * 31 + 7; __asm__ volatile("" : "+r"(x)); }
	return x;
}
__attribute__((noinline)) unsigned long dispatch(int n, unsigned long x) {
	for (int i = 0; i < n; i++) x = hot_leaf(x);
	return x;
}
int main(void) {
	printf("hot_leaf=%p dispatch=%p\n", (void *)hot_leaf, (void *)dispatch);
	fflush(stdout);
	getchar();
	return (int)dispatch(3, 1);
}
`

const leafGoSrc = `package main

//go:noinline
func hotLeaf(x uint64) uint64 {
	for i := 0; i < 100; i++ {
		x = x*31 + 7
	}
	return x
}

//go:noinline
func dispatch(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = hotLeaf(x)
	}
	return x
}

func main() { println(dispatch(3, 1)) }
`

func leafC(tb testing.TB, name string, flags ...string) string {
	return built(tb, name, func(out string) error {
		src := out + ".c"
		if err := os.WriteFile(src, []byte(leafCSrc), 0o644); err != nil {
			return err
		}
		return run(".", "gcc", append(append([]string{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"}, flags...), "-o", out, src)...)
	})
}

func leafGo(tb testing.TB) string {
	return built(tb, "leafgo", func(out string) error {
		dir := filepath.Join(buildDir, "leafgo-src")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(leafGoSrc), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module leafgo\n\ngo 1.22\n"), 0o644); err != nil {
			return err
		}
		return run(dir, "go", "build", "-o", out, ".")
	})
}

// elfFunc returns the address and size of function name in the ELF file.
func elfFunc(t *testing.T, path, name string) (addr, size uint64) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(syms, func(s elf.Symbol) bool { return s.Name == name })
	if i < 0 || syms[i].Size == 0 {
		t.Fatalf("%s: no symbol %s with a size", path, name)
	}
	return syms[i].Value, syms[i].Size
}

func openTable(t *testing.T, path string) *SymbolTable {
	t.Helper()
	tab, err := OpenSymbolTable(path)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestReturnAddressAtSP checks the decision on binaries whose layout the test
// knows: a frameless leaf has its return address at [SP] at every PC; a
// function with a frame only at its entry.
func TestReturnAddressAtSP(t *testing.T) {
	for _, tc := range []struct {
		name, path, leaf, caller string
	}{
		{"c", leafC(t, "leafc"), "hot_leaf", "dispatch"},
		{"go", leafGo(t), "main.hotLeaf", "main.dispatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab := openTable(t, tc.path)
			lo, n := elfFunc(t, tc.path, tc.leaf)
			for pc := lo; pc < lo+n; pc++ {
				if atSP, known := tab.ReturnAddressAtSP(pc); !atSP || !known {
					t.Fatalf("%s+%#x: atSP %v known %v, want a frameless leaf", tc.leaf, pc-lo, atSP, known)
				}
			}
			lo, n = elfFunc(t, tc.path, tc.caller)
			if atSP, known := tab.ReturnAddressAtSP(lo); !atSP || !known {
				t.Errorf("%s entry: atSP %v known %v, want true (no frame yet)", tc.caller, atSP, known)
			}
			if atSP, known := tab.ReturnAddressAtSP(lo + n/2); atSP || !known {
				t.Errorf("%s middle: atSP %v known %v, want false (frame set up)", tc.caller, atSP, known)
			}
		})
	}
	t.Run("c without unwind tables", func(t *testing.T) {
		path := leafC(t, "leafc-nounwind", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")
		tab := openTable(t, path)
		lo, _ := elfFunc(t, path, "hot_leaf")
		if _, known := tab.ReturnAddressAtSP(lo); known {
			t.Errorf("hot_leaf has no FDE, but known = true")
		}
	})
}

func TestRecoverLeafCaller(t *testing.T) {
	path := leafC(t, "leafc")
	rp := start(t, path)
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	leaf, disp := rp.addr(t, "hot_leaf"), rp.addr(t, "dispatch")
	_, dispSize := elfFunc(t, path, "dispatch")
	ret := disp + 12         // a return address inside dispatch
	outer := disp + dispSize // stands in for the caller's caller
	framed := disp + dispSize/2

	for _, tc := range []struct {
		name    string
		stack   []uint64
		leafRet uint64
		want    []uint64
		result  LeafResult
	}{
		{"recovered", []uint64{leaf + 3, outer}, ret, []uint64{leaf + 3, ret, outer}, LeafRecovered},
		{"leaf alone", []uint64{leaf}, ret, []uint64{leaf, ret}, LeafRecovered},
		{"already present", []uint64{leaf + 3, ret, outer}, ret, []uint64{leaf + 3, ret, outer}, LeafPresent},
		{"framed", []uint64{framed, outer}, ret, []uint64{framed, outer}, LeafFramed},
		{"no word", []uint64{leaf, outer}, 0, []uint64{leaf, outer}, LeafNoWord},
		{"word points nowhere", []uint64{leaf, outer}, 0x10, []uint64{leaf, outer}, LeafBadReturn},
		{"pc in no mapping", []uint64{0x10, outer}, ret, []uint64{0x10, outer}, LeafNoUnwindInfo},
		{"empty", nil, ret, nil, LeafNoWord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, res := s.RecoverLeafCaller(p, tc.stack, tc.leafRet, nil)
			if res != tc.result || !slices.Equal(got, tc.want) {
				t.Errorf("got %#x, %v; want %#x, %v", got, res, tc.want, tc.result)
			}
		})
	}

	// The unwind index built on first use counts toward the cache's bytes.
	tab := s.table(p, &p.Mappings[p.find(leaf)])
	if tab.ehBytes.Load() == 0 {
		t.Error("no unwind index was built")
	}
	if st := s.Stats(); st.HeapBytes < tab.Size() {
		t.Errorf("cache counts %d heap bytes, the table alone has %d", st.HeapBytes, tab.Size())
	}

	// The recovered frame symbolizes as the caller.
	stack, _ := s.RecoverLeafCaller(p, []uint64{leaf + 3, outer}, ret, nil)
	frames := s.User(p, stack, nil)
	if len(frames) != 3 || frames[0].Function != "hot_leaf" || frames[1].Function != "dispatch" {
		t.Errorf("frames = %+v, want hot_leaf, dispatch, ...", frames)
	}
}

func BenchmarkReturnAddressAtSP(b *testing.B) {
	path := leafC(b, "leafc")
	tab, err := OpenSymbolTable(path)
	if err != nil {
		b.Fatal(err)
	}
	ef, err := elf.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer ef.Close()
	syms, _ := ef.Symbols()
	var pcs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 {
			pcs = append(pcs, s.Value+s.Size/2)
		}
	}
	for i := 0; b.Loop(); i++ {
		tab.ReturnAddressAtSP(pcs[i%len(pcs)])
	}
}
