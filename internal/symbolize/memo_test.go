package symbolize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// The memo tells tables apart: one address in two binaries is two entries.
func TestMemoKeysByTable(t *testing.T) {
	var m symbolMemo
	m.put(1, 0x1000, []Symbol{{Function: "in_one"}})
	m.put(2, 0x1000, []Symbol{{Function: "in_two", File: "two.c", Line: 7}})
	m.put(3, 0x1000, nil) // resolved to nothing: remembered as such
	for _, c := range []struct {
		table uint64
		want  string
	}{{1, "in_one"}, {2, "in_two"}} {
		got, ok := m.get(c.table, 0x1000)
		if !ok || len(got) != 1 || got[0].Function != c.want {
			t.Errorf("table %d: got %+v, %v; want %s", c.table, got, ok, c.want)
		}
	}
	if got, ok := m.get(3, 0x1000); !ok || len(got) != 0 {
		t.Errorf("table 3: got %+v, %v; want remembered as nothing", got, ok)
	}
	if _, ok := m.get(4, 0x1000); ok {
		t.Error("table 4 was never looked up, but the memo answered")
	}
	if _, ok := m.get(1, 0x1001); ok {
		t.Error("address 0x1001 was never looked up, but the memo answered")
	}
}

// The memo holds at most two generations; what is used stays, what is not
// goes.
func TestMemoBounded(t *testing.T) {
	var m symbolMemo
	sym := []Symbol{{Function: "f"}}
	const kept = 7 // looked up again while other addresses come and go
	m.put(1, kept, sym)
	for addr := uint64(1000); addr < 1000+5*memoGeneration; addr++ {
		m.put(1, addr, sym)
		if n := m.len(); n > 2*memoGeneration {
			t.Fatalf("%d addresses remembered, bound %d", n, 2*memoGeneration)
		}
		if addr%(memoGeneration/2) == 0 {
			if _, ok := m.get(1, kept); !ok {
				t.Fatalf("after %d puts: address %d, used all along, was dropped", addr-999, kept)
			}
		}
	}
	if _, ok := m.get(1, 1000); ok {
		t.Error("the first address, never used again, is still remembered after 5 generations")
	}
	if _, ok := m.get(1, 1000+5*memoGeneration-1); !ok {
		t.Error("the last address put is not remembered")
	}
}

// Addresses in deeply inlined code (a chain of 20 functions each) fill a
// generation by its bytes before its count of addresses.
func TestMemoBoundedInBytes(t *testing.T) {
	var m symbolMemo
	chain := make([]Symbol, 20)
	for i := range chain {
		chain[i] = Symbol{Function: fmt.Sprintf("core::iter::f%d", i), File: "iter.rs", Line: i + 1}
	}
	largest := 0
	for addr := uint64(1000); addr < 1000+2*memoGeneration; addr++ {
		m.put(1, addr, chain)
		largest = max(largest, m.size())
	}
	if largest > 2*memoGenerationBytes+4096 {
		t.Errorf("the memo held %d bytes, bound %d", largest, 2*memoGenerationBytes)
	}
	if n := m.len(); n >= 2*memoGeneration {
		t.Errorf("%d addresses remembered: the generations turned over by count, not bytes", n)
	}
}

// The memo's strings are its own: a name sliced out of a table's names
// (or a file mapping) must not keep that memory alive through the memo.
func TestMemoOwnsStrings(t *testing.T) {
	var m symbolMemo
	names := strings.Repeat("x", 1<<16) + "main.handler" + strings.Repeat("y", 1<<16)
	fn := names[1<<16 : 1<<16+len("main.handler")]
	got := m.put(1, 0x10, []Symbol{{Function: fn, File: "main.go", Line: 3}})
	if got[0].Function != "main.handler" {
		t.Fatalf("Function = %q", got[0].Function)
	}
	if unsafe.StringData(got[0].Function) == unsafe.StringData(fn) {
		t.Error("the memo keeps a slice of the caller's names")
	}
	// Names are interned: another address in the same function shares them.
	again := m.put(1, 0x20, []Symbol{{Function: strings.Clone(fn), File: "main.go", Line: 4}})
	if unsafe.StringData(again[0].Function) != unsafe.StringData(got[0].Function) {
		t.Error("two addresses of one function hold two copies of its name")
	}
}

// Symbolizing through the memo gives what the tables themselves say, on
// real binaries (a C program with DWARF lines, libc, a library, and a Go
// program), for addresses seen the first time and again. The tables' answer
// comes from a second Symbolizer whose memo is emptied before each stack.
func TestUserMemoMatchesTables(t *testing.T) {
	cp := start(t, cProg(t, "hot-g", "-fPIE", "-pie", "-ldl", "-g"), libHot(t))
	gp := startSilent(t, goTool(t, "gofmt"))
	s, truth := New(Options{}), New(Options{})
	var named int
	for pass := range 3 {
		for _, pid := range []int{cp.pid(), gp.pid()} {
			p, tp := snapshot(t, s, pid), snapshot(t, truth, pid)
			// The same stacks each pass: the first fills the memo.
			r := rand.New(rand.NewPCG(3, uint64(pid)))
			for _, stack := range append(randomStacks(t, r, p, 100, 15), sameOffsetStacks(p, 64)...) {
				got := s.User(p, stack, nil)
				truth.memo = symbolMemo{} // each of its lookups asks the table
				want := truth.User(tp, stack, nil)
				if len(got) != len(want) {
					t.Fatalf("pass %d pid %d: %d frames, the tables give %d", pass, pid, len(got), len(want))
				}
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("pass %d pid %d frame %d: %+v, the tables give %+v", pass, pid, i, got[i], want[i])
					}
					if got[i].Function != "" {
						named++
					}
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no frame was named: the comparison proved nothing")
	}
	if s.memo.hits == 0 {
		t.Error("the memo answered nothing on the second and third passes")
	}
}

// sameOffsetStacks makes n stacks that each hold the same offset into every
// file-backed mapping of p: small binaries and libraries lay out their text
// alike, so one ELF address is looked up in several tables.
func sameOffsetStacks(p *Process, n int) [][]uint64 {
	var stacks [][]uint64
	for i := range n {
		off := uint64(0x40 * i)
		var st []uint64
		for _, m := range p.Mappings {
			if strings.HasPrefix(m.Path, "/") && off < m.Limit-m.Start {
				st = append(st, m.Start+off)
			}
		}
		stacks = append(stacks, st)
	}
	return stacks
}

// A Symbolizer is safe for concurrent use (the receiver calls it under its
// own lock today; the package promises more): symbolizing from several
// goroutines at once shares the memo safely and gives each the tables'
// answer. make test runs it with -race.
func TestUserMemoConcurrent(t *testing.T) {
	cp := start(t, cProg(t, "hot-g", "-fPIE", "-pie", "-ldl", "-g"), libHot(t))
	s := New(Options{})
	p := snapshot(t, s, cp.pid())
	stacks := append(randomStacks(t, rand.New(rand.NewPCG(7, 8)), p, 50, 15), sameOffsetStacks(p, 32)...)
	want := make([][]Frame, len(stacks))
	for i, st := range stacks {
		want[i] = s.User(p, st, nil)
	}
	s.memo = symbolMemo{}
	errs := make(chan string, 4)
	for g := range 4 {
		go func() {
			for pass := range 3 {
				for i := range stacks {
					i := (i + g*len(stacks)/4) % len(stacks) // each goroutine in its own order
					got := s.User(p, stacks[i], nil)
					if !slices.Equal(got, want[i]) {
						errs <- fmt.Sprintf("goroutine %d pass %d stack %d: %+v, want %+v", g, pass, i, got, want[i])
						return
					}
				}
			}
			errs <- ""
		}()
	}
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
