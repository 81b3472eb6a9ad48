package symbolize

import (
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// libcPath finds the libc the test program maps.
func libcPath(tb testing.TB, p *Process) string {
	for _, m := range p.Mappings {
		if strings.Contains(filepath.Base(m.Path), "libc.so") {
			return m.Path
		}
	}
	tb.Fatal("no libc mapping")
	return ""
}

// goTool is a real, larger Go program than the test's own: gofmt from the
// toolchain (it also conveniently waits on stdin).
func goTool(tb testing.TB, name string) string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(strings.TrimSpace(string(out)), "bin", name)
}

// randomStacks makes n stacks of depth frames from addresses inside p's
// file-backed executable mappings (exe, libc, libhot ...).
func randomStacks(tb testing.TB, r *rand.Rand, p *Process, n, depth int) [][]uint64 {
	var text []Mapping
	for _, m := range p.Mappings {
		if strings.HasPrefix(m.Path, "/") {
			text = append(text, m)
		}
	}
	if len(text) == 0 {
		tb.Fatal("no file mappings")
	}
	stacks := make([][]uint64, n)
	for i := range stacks {
		st := make([]uint64, depth)
		for j := range st {
			m := text[r.IntN(len(text))]
			st[j] = m.Start + r.Uint64N(m.Limit-m.Start)
		}
		stacks[i] = st
	}
	return stacks
}

// BenchmarkSymbolizeInterval symbolizes what one 15 s interval might hold:
// 300 unique stacks of 15 frames across a C program built with -g (its own
// text with DWARF lines, libc, a dlopened library) and a Go program (gofmt),
// with warm caches: the tables loaded and the addresses seen in an earlier
// interval, as a node's steady services' call sites are. ns/op is the cost
// of one interval.
func BenchmarkSymbolizeInterval(b *testing.B) {
	benchmarkSymbolizeInterval(b, 1)
}

// BenchmarkSymbolizeIntervalUnseen is BenchmarkSymbolizeInterval with every
// address new to the Symbolizer: each interval's 300 stacks are others
// (eight sets in turn, more addresses than the memo keeps), the cost of
// call sites never sampled before, each resolved from its table and
// remembered.
func BenchmarkSymbolizeIntervalUnseen(b *testing.B) {
	benchmarkSymbolizeInterval(b, 8)
}

// benchmarkSymbolizeInterval symbolizes sets of 300 stacks (150 in each
// program), one set per interval, in turn.
func benchmarkSymbolizeInterval(b *testing.B, sets int) {
	cp := start(b, cProg(b, "hot-g", "-fPIE", "-pie", "-ldl", "-g"), libHot(b))
	gp := startSilent(b, goTool(b, "gofmt"))
	s := New(Options{})
	procs := []*Process{snapshot(b, s, cp.pid()), snapshot(b, s, gp.pid())}
	r := rand.New(rand.NewPCG(1, 2))
	type job struct {
		p     *Process
		stack []uint64
	}
	intervals := make([][]job, sets)
	for i := range intervals {
		for _, p := range procs {
			for _, st := range randomStacks(b, r, p, 150, 15) {
				intervals[i] = append(intervals[i], job{p, st})
			}
		}
	}
	frames := make([]Frame, 0, 16)
	resolved, total := 0, 0
	for _, jobs := range intervals { // warm the caches
		for _, j := range jobs {
			for _, f := range s.User(j.p, j.stack, frames[:0]) {
				total++
				if f.Function != "" {
					resolved++
				}
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		for _, j := range intervals[i%sets] {
			frames = s.User(j.p, j.stack, frames[:0])
		}
		i++
	}
	b.ReportMetric(float64(len(intervals[0])), "stacks/op")
	b.ReportMetric(100*float64(resolved)/float64(total), "%resolved")
}

// BenchmarkLoadTable is the cold cost of a table: libc, the test's small Go
// program, and the toolchain's go command (a ~15 MB Go binary).
func BenchmarkLoadTable(b *testing.B) {
	cp := start(b, cProg(b, "hot-pie", "-fPIE", "-pie", "-ldl"))
	s := New(Options{})
	libc := libcPath(b, snapshot(b, s, cp.pid()))
	for _, c := range []struct{ name, path string }{
		{"libc", libc},
		{"goprog", goBuild(b, "go")},
		{"go-command", goTool(b, "go")},
	} {
		b.Run(c.name, func(b *testing.B) {
			var t *SymbolTable
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if t, err = OpenSymbolTable(c.path); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(t.Size()), "heap-bytes")
			b.ReportMetric(float64(t.MappedBytes()), "mapped-bytes")
			b.ReportMetric(float64(t.Symbols()), "elf-symbols")
		})
	}
}

func BenchmarkLoadKallsyms(b *testing.B) {
	var k *Kallsyms
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if k, err = LoadKallsyms("/proc/kallsyms"); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(k.Size()), "heap-bytes")
	b.ReportMetric(float64(k.Symbols()), "symbols")
}

// TestTableFootprint measures the live heap a loaded table keeps and guards
// the compact layout against regressions.
func TestTableFootprint(t *testing.T) {
	cp := start(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"))
	libc := libcPath(t, snapshot(t, New(Options{}), cp.pid()))
	for _, c := range []struct {
		name, path string
		maxHeap    uint64
	}{
		{"libc", libc, 512 << 10},
		{"go-command", goTool(t, "go"), 256 << 10},
	} {
		// Several copies, so one table's bytes stand out from heap noise.
		const copies = 8
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		tabs := make([]*SymbolTable, copies)
		for i := range tabs {
			var err error
			if tabs[i], err = OpenSymbolTable(c.path); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		live := (after.HeapAlloc - min(after.HeapAlloc, before.HeapAlloc)) / copies
		tab := tabs[0]
		t.Logf("%s: %d ELF symbols, Size() %d B, live heap %d B, file mapping %d B", c.name, tab.Symbols(), tab.Size(), live, tab.MappedBytes())
		if live > c.maxHeap {
			t.Errorf("%s table keeps %d B of heap, want <= %d", c.name, live, c.maxHeap)
		}
		runtime.KeepAlive(tabs)
	}
}

// BenchmarkSnapshot is the cost of snapshotting a process (read maps, open
// and stat its mapped files) whose tables are already cached.
func BenchmarkSnapshot(b *testing.B) {
	cp := start(b, cProg(b, "hot-pie", "-fPIE", "-pie", "-ldl"), libHot(b))
	s := New(Options{})
	p := snapshot(b, s, cp.pid())
	s.User(p, []uint64{cp.addr(b, "hot_leaf"), cp.addr(b, "getpid") + 1, cp.addr(b, "hot_lib_func") + 1}, nil)
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.Snapshot(cp.pid())
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
}
