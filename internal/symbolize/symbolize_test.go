package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestUserC(t *testing.T) {
	lib := libHot(t)
	for _, tc := range []struct{ name, bin string }{
		{"pie", cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")},
		{"nopie", cProg(t, "hot-nopie", "-fno-pie", "-no-pie", "-ldl")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rp := start(t, tc.bin, lib)
			s := New(Options{})
			p := snapshot(t, s, rp.pid())
			if p.ExePath != tc.bin {
				t.Errorf("ExePath = %q, want %q", p.ExePath, tc.bin)
			}
			stack := []uint64{
				rp.addr(t, "hot_leaf"),         // exact PC
				rp.addr(t, "hot_mid") + 1,      // return addresses: looked up at -1
				rp.addr(t, "hot_static") + 1,   // local symbol, .symtab only
				rp.addr(t, "hot_lib_func") + 1, // shared library
				rp.addr(t, "getpid") + 1,       // libc, .dynsym only
				rp.addr(t, "hot_mid"),          // a return address at a function start belongs to what precedes it
			}
			frames := s.User(p, stack, nil)
			if len(frames) != len(stack) {
				t.Fatalf("got %d frames for %d addresses", len(frames), len(stack))
			}
			for i, f := range frames {
				if f.Address != stack[i] {
					t.Errorf("frame %d: Address = %#x, want the sampled %#x", i, f.Address, stack[i])
				}
			}
			wantFrame(t, p, frames[0], "hot_leaf", tc.bin)
			wantFrame(t, p, frames[1], "hot_mid", tc.bin)
			wantFrame(t, p, frames[2], "hot_static", tc.bin)
			wantFrame(t, p, frames[3], "hot_lib_func", lib)
			if f := frames[4]; !strings.Contains(f.Function, "getpid") || !strings.Contains(p.Mappings[f.Mapping].Path, "libc.so") {
				t.Errorf("libc frame = %+v in %q, want getpid in libc", f, mappingPath(p, f))
			}
			if f := frames[5]; f.Function == "hot_mid" {
				t.Errorf("return address %#x at the start of hot_mid resolved to hot_mid; want the code before it", f.Address)
			}
			for _, f := range frames {
				if f.IsGo {
					t.Errorf("C frame %+v marked IsGo", f)
				}
			}
		})
	}
}

func wantFrame(t *testing.T, p *Process, f Frame, fn, path string) {
	t.Helper()
	if f.Function != fn || mappingPath(p, f) != path {
		t.Errorf("frame at %#x = %q in %q, want %q in %q", f.Address, f.Function, mappingPath(p, f), fn, path)
	}
}

func mappingPath(p *Process, f Frame) string {
	if f.Mapping < 0 {
		return "<no mapping>"
	}
	return p.Mappings[f.Mapping].Path
}

// sourceLine is the 1-based line of the first line in file containing s.
func sourceLine(t *testing.T, file, s string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in %s", s, file)
	return 0
}

// goBuilds are the Go binaries tests run: internal and external (cgo)
// linking, with and without symbols, PIE and not.
var goBuilds = []struct {
	name  string
	cgo   bool
	flags []string
	// runtime.text is neither in a symbol nor at the start of .text, so
	// debug/gosym cannot be pointed at the right text start.
	noGosym bool
}{
	{name: "go"},
	{name: "go-stripped", flags: []string{"-ldflags=-s -w"}},
	{name: "go-pie", flags: []string{"-buildmode=pie"}},
	{name: "go-ext", cgo: true, flags: []string{"-ldflags=-linkmode=external"}},
	{name: "go-ext-stripped", cgo: true, flags: []string{"-ldflags=-linkmode=external -s -w"}, noGosym: true},
	{name: "go-ext-pie-stripped", cgo: true, flags: []string{"-buildmode=pie", "-ldflags=-linkmode=external -s -w"}, noGosym: true},
}

func goBuild(t testing.TB, name string) string {
	for _, b := range goBuilds {
		if b.name == name {
			return goProg(t, name, b.cgo, b.flags...)
		}
	}
	t.Fatalf("unknown build %s", name)
	return ""
}

func TestUserGo(t *testing.T) {
	src := testdata(t, "goprog/main.go")
	// hotLeaf's first instruction may belong to its loop rather than its
	// func line; TestGoPCLNMatchesGosym checks exact lines for every PC.
	leafFirst := sourceLine(t, src, "func hotLeaf(")
	leafLast := sourceLine(t, src, "return v")
	midLine := sourceLine(t, src, "func hotMid(")
	for _, b := range goBuilds {
		t.Run(b.name, func(t *testing.T) {
			bin := goBuild(t, b.name)
			rp := start(t, bin)
			s := New(Options{})
			p := snapshot(t, s, rp.pid())
			frames := s.User(p, []uint64{rp.addr(t, "main.hotLeaf"), rp.addr(t, "main.hotMid") + 1}, nil)
			for i, want := range []struct {
				fn          string
				first, last int
			}{{"main.hotLeaf", leafFirst, leafLast}, {"main.hotMid", midLine, midLine}} {
				f := frames[i]
				if f.Function != want.fn || !strings.HasSuffix(f.File, "/main.go") || f.Line < want.first || f.Line > want.last || !f.IsGo {
					t.Errorf("frame %d = %+v, want %s at main.go:%d-%d, IsGo", i, f, want.fn, want.first, want.last)
				}
				if mappingPath(p, f) != bin {
					t.Errorf("frame %d in %q, want %q", i, mappingPath(p, f), bin)
				}
			}

			// A return address inside code the compiler inlined: the
			// frames must match the runtime's own CallersFrames expansion.
			want := rp.values["inline"]
			if !strings.Contains(want, ",") {
				t.Fatalf("the program's inline chain %q has no inlined frame; the test proves nothing", want)
			}
			pc := rp.addr(t, "inlinepc")
			var chain []string
			for i, f := range s.User(p, []uint64{rp.addr(t, "main.hotLeaf"), pc}, nil)[1:] {
				chain = append(chain, fmt.Sprintf("%s:%d", f.Function, f.Line))
				if f.Address != pc || f.Inline != (i < strings.Count(want, ",")) {
					t.Errorf("inlined frame %d = %+v, want Address %#x and Inline on all but the last", i, f, pc)
				}
			}
			if got := strings.Join(chain, ","); got != want {
				t.Errorf("frames at %#x = %s, runtime says %s", pc, got, want)
			}
		})
	}
}

// TestGoPCLNMatchesGosym checks the in-place pclntab reader against the
// standard library's debug/gosym for every function of the test binaries.
func TestGoPCLNMatchesGosym(t *testing.T) {
	for _, b := range goBuilds {
		if b.noGosym {
			continue // TestUserGo checks these against the running program
		}
		t.Run(b.name, func(t *testing.T) {
			bin := goBuild(t, b.name)
			tab, err := OpenSymbolTable(bin)
			if err != nil {
				t.Fatal(err)
			}
			if !tab.HasGo() {
				t.Fatal("no Go pclntab found")
			}
			ef, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			pcln, err := ef.Section(".gopclntab").Data()
			if err != nil {
				t.Fatal(err)
			}
			text := ef.Section(".text").Addr
			if syms, err := ef.Symbols(); err == nil {
				for _, s := range syms {
					if s.Name == "runtime.text" {
						text = s.Value
					}
				}
			}
			gt, err := gosym.NewTable(nil, gosym.NewLineTable(pcln, text))
			if err != nil {
				t.Fatal(err)
			}
			if len(gt.Funcs) < 1000 {
				t.Fatalf("gosym found only %d functions", len(gt.Funcs))
			}
			checked, inlined := 0, 0
			for _, fn := range gt.Funcs {
				for _, pc := range []uint64{fn.Entry, fn.Entry + (fn.End-fn.Entry)/2, fn.End - 1} {
					file, line, gfn := gt.PCToLine(pc)
					if gfn == nil {
						continue
					}
					if line < 0 {
						line = 0 // gosym's "unknown"
					}
					// gosym names the outermost function but gives the
					// innermost (possibly inlined) file:line.
					syms := tab.LookupInline(pc, nil)
					if len(syms) == 0 {
						t.Fatalf("pc %#x: unresolved, gosym says %s %s:%d", pc, gfn.Name, file, line)
					}
					inner, outer := syms[0], syms[len(syms)-1]
					if outer.Function != gfn.Name || inner.File != file || inner.Line != line || !inner.IsGo {
						t.Fatalf("pc %#x: got %+v, gosym says %s %s:%d", pc, syms, gfn.Name, file, line)
					}
					if len(syms) > 1 {
						inlined++
					}
					checked++
				}
			}
			t.Logf("%d functions, %d PCs agree with debug/gosym, %d of them in inlined code", len(gt.Funcs), checked, inlined)
			if inlined == 0 {
				t.Error("no PC expanded to inlined calls; the runtime has many")
			}
		})
	}
}

func TestUnresolvedKeepsMapping(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	rp := start(t, bin)
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	anon := rp.addr(t, "anon")
	frames := s.User(p, []uint64{anon + 16, 0x10}, nil)
	if len(frames) != 2 {
		t.Fatalf("got %d frames, want 2: unresolved addresses must not be dropped", len(frames))
	}
	f := frames[0]
	if f.Function != "" || f.Mapping < 0 || f.Address != anon+16 {
		t.Errorf("anonymous exec memory: %+v, want unresolved with its mapping", f)
	} else if m := p.Mappings[f.Mapping]; m.Start > anon || m.Limit <= anon || m.Path != "" {
		t.Errorf("frame mapped to %+v, want the anonymous mapping holding %#x", m, anon)
	}
	if f := frames[1]; f.Function != "" || f.Mapping != -1 || f.Address != 0x10 {
		t.Errorf("address in no mapping: %+v, want Mapping -1 and the address", f)
	}
}

// TestUnnamedFunctionIsOneFrame: in a stripped binary, addresses inside a
// function no symbol names are reported at the function's start (from its
// .eh_frame entry), whether sampled as the PC or as a return address, so
// they make one frame; each function its own.
func TestUnnamedFunctionIsOneFrame(t *testing.T) {
	full := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	stripped := filepath.Join(t.TempDir(), "hot")
	if err := run(".", "strip", "-o", stripped, full); err != nil {
		t.Fatal(err)
	}
	_, staticSize := elfFunc(t, full, "hot_static")
	_, midSize := elfFunc(t, full, "hot_mid")
	rp := start(t, stripped)
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	static, mid := rp.addr(t, "hot_static"), rp.addr(t, "hot_mid")
	// Leaf first: PCs, then return addresses (looked up one byte lower).
	stack := []uint64{static + 1, static + staticSize - 1, static + staticSize, mid + midSize}
	frames := s.User(p, stack, nil)
	want := []uint64{static, static, static, mid}
	if len(frames) != len(want) {
		t.Fatalf("got %d frames, want %d", len(frames), len(want))
	}
	for i, f := range frames {
		if f.Function != "" {
			t.Fatalf("frame %d named %q in a stripped binary; the test proves nothing", i, f.Function)
		}
		if f.Address != want[i] || f.Mapping < 0 || p.Mappings[f.Mapping].Path != stripped {
			t.Errorf("frame %d (%#x): address %#x in mapping %d, want the function's start %#x in %s", i, stack[i], f.Address, f.Mapping, want[i], stripped)
		}
	}
}

func TestExitedAfterSnapshot(t *testing.T) {
	// A private copy, so it can be deleted too.
	bin := filepath.Join(t.TempDir(), "hot")
	copyFile(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"), bin)
	rp := start(t, bin)
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	leaf := rp.addr(t, "hot_leaf")
	rp.stop()
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(p.PID), "maps")); err == nil {
		t.Fatalf("process %d still exists", p.PID)
	}
	frames := s.User(p, []uint64{leaf}, nil)
	wantFrame(t, p, frames[0], "hot_leaf", bin)
}

func fileOff(p *Process, addr uint64) uint64 {
	m := p.Mappings[p.find(addr)]
	return addr - m.Start + m.Offset
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotGoneProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{}).Snapshot(cmd.Process.Pid)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("snapshot of exited pid: err = %v, want 'does not exist'", err)
	}
}

func TestCacheBounded(t *testing.T) {
	s := New(Options{MaxTables: 1})
	for _, bin := range []string{cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"), goBuild(t, "go")} {
		rp := start(t, bin)
		p := snapshot(t, s, rp.pid())
		var leaf uint64
		if a, ok := rp.addrs["hot_leaf"]; ok {
			leaf = a
		} else {
			leaf = rp.addr(t, "main.hotLeaf")
		}
		if f := s.User(p, []uint64{leaf}, nil)[0]; !strings.HasSuffix(f.Function, "hot_leaf") && f.Function != "main.hotLeaf" {
			t.Errorf("%s: %+v", bin, f)
		}
		if st := s.Stats(); st.Tables != 1 {
			t.Errorf("after %s: %d cached tables, want 1 (MaxTables)", bin, st.Tables)
		}
	}
}

func TestOpenSymbolTableBadInput(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "text")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSymbolTable(notELF); err == nil || !strings.Contains(err.Error(), "parse ELF") {
		t.Errorf("non-ELF file: err = %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSymbolTable(empty); err == nil {
		t.Error("empty file: no error")
	}
	if _, err := OpenSymbolTable(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	// Truncated binaries and a corrupted pclntab must not panic.
	full, err := os.ReadFile(goBuild(t, "go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{64, 4096, len(full) / 2} {
		p := filepath.Join(dir, "trunc")
		if err := os.WriteFile(p, full[:n], 0o644); err != nil {
			t.Fatal(err)
		}
		if tab, err := OpenSymbolTable(p); err == nil {
			tab.Lookup(0x401000)
		}
	}
	ef, err := elf.NewFile(bytes.NewReader(full))
	if err != nil {
		t.Fatal(err)
	}
	sec := ef.Section(".gopclntab")
	corrupt := bytes.Clone(full)
	for i := sec.Offset + 64; i < sec.Offset+sec.Size; i += 7 {
		corrupt[i] ^= 0xa5
	}
	p := filepath.Join(dir, "corrupt")
	if err := os.WriteFile(p, corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	if tab, err := OpenSymbolTable(p); err == nil {
		text := ef.Section(".text")
		for a := text.Addr; a < text.Addr+text.Size; a += 997 {
			tab.Lookup(a)
		}
	}
}

func kallsymsAddr(t *testing.T, name string) uint64 {
	t.Helper()
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 3 && fs[2] == name {
			a, err := strconv.ParseUint(fs[0], 16, 64)
			if err != nil || a == 0 {
				t.Fatalf("kallsyms %s address %q unusable (kptr_restrict?)", name, fs[0])
			}
			return a
		}
	}
	t.Fatalf("%s not in /proc/kallsyms", name)
	return 0
}

func TestKallsymsFile(t *testing.T) {
	dir := t.TempDir()
	hidden := filepath.Join(dir, "hidden")
	os.WriteFile(hidden, []byte("0000000000000000 T _text\n0000000000000000 t vfs_read\n0000000000000000 t nft_do_chain\t[nf_tables]\n"), 0o644)
	if _, err := LoadKallsyms(hidden); !errors.Is(err, ErrKallsymsHidden) {
		t.Errorf("all-zero kallsyms: err = %v, want ErrKallsymsHidden", err)
	}
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte(`ffffffff81000000 T _text
ffffffff81000100 t __pfx_alpha
ffffffff81000110 T alpha
ffffffff81000200 D some_data
ffffffff81000300 t beta
ffffffffc0001000 t nft_do_chain	[nf_tables]
ffffffffc0000000 t bpf_prog_6deef7357e7b4530_hotpath	[bpf]
`), 0o644)
	k, err := LoadKallsyms(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr     uint64
		fn, mod  string
		resolved bool
	}{
		{0xffffffff81000105, "_text", "", true}, // __pfx_ padding is not a function
		{0xffffffff81000110, "alpha", "", true},
		{0xffffffff81000250, "alpha", "", true}, // data symbols are skipped
		{0xffffffff81000300, "beta", "", true},
		{0xffffffffc0000010, "bpf_prog_6deef7357e7b4530_hotpath", "bpf", true},
		{0xffffffffc0001004, "nft_do_chain", "nf_tables", true},
		{0xffffffff80000000, "", "", false},
		{0xffffffffc0001000 + maxKernelSymbolSpan, "", "", false},
	} {
		fn, mod, ok := k.Lookup(c.addr)
		if fn != c.fn || mod != c.mod || ok != c.resolved {
			t.Errorf("Lookup(%#x) = %q %q %v, want %q %q %v", c.addr, fn, mod, ok, c.fn, c.mod, c.resolved)
		}
	}
}

func TestParseMaps(t *testing.T) {
	raw := []byte(`55d0a0000000-55d0a0001000 r--p 00000000 fd:01 1234                       /usr/bin/my prog
55d0a0001000-55d0a0005000 r-xp 00001000 fd:01 1234                       /usr/bin/my prog
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7f0000100000-7f0000200000 r-xp 00028000 103:02 98765                      /usr/lib/libc.so.6 (deleted)
7ffd1e5f0000-7ffd1e5f2000 r-xp 00000000 00:00 0                          [vdso]
`)
	ms, err := parseMaps(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x55d0a0001000, Limit: 0x55d0a0005000, Offset: 0x1000, Path: "/usr/bin/my prog", Dev: 0xfd01, Inode: 1234, file: -1},
		{Start: 0x7f0000000000, Limit: 0x7f0000001000, file: -1},
		{Start: 0x7f0000100000, Limit: 0x7f0000200000, Offset: 0x28000, Path: "/usr/lib/libc.so.6", Dev: 0x10302, Inode: 98765, Deleted: true, file: -1},
		{Start: 0x7ffd1e5f0000, Limit: 0x7ffd1e5f2000, Path: "[vdso]", file: -1},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d mappings, want %d: %+v", len(ms), len(want), ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	if _, err := parseMaps([]byte("zzzz-1 r-xp 0 fd:01 1 /x\n")); err == nil {
		t.Error("bad address range: no error")
	}
}

func TestVDSO(t *testing.T) {
	rp := start(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"))
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	var vdso *Mapping
	for i := range p.Mappings {
		if p.Mappings[i].Path == "[vdso]" {
			vdso = &p.Mappings[i]
		}
	}
	if vdso == nil {
		t.Fatal("no [vdso] mapping in the test program")
	}
	// Where clock_gettime sits in the image, read independently with debug/elf.
	img := make([]byte, vdso.Limit-vdso.Start)
	mem, err := os.Open(filepath.Join("/proc", strconv.Itoa(p.PID), "mem"))
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	if _, err := mem.ReadAt(img, int64(vdso.Start)); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var fn elf.Symbol
	for _, sym := range syms {
		if sym.Name == "__vdso_clock_gettime" {
			fn = sym
		}
	}
	if fn.Value == 0 {
		t.Fatal("no __vdso_clock_gettime in the vdso")
	}
	var off uint64
	for _, prog := range ef.Progs {
		if prog.Type == elf.PT_LOAD {
			off = fn.Value - prog.Vaddr + prog.Off
		}
	}
	f := s.User(p, []uint64{vdso.Start + off + 1}, nil)[0]
	if !strings.Contains(f.Function, "clock_gettime") || mappingPath(p, f) != "[vdso]" {
		t.Errorf("vdso frame = %+v in %q, want clock_gettime", f, mappingPath(p, f))
	}
}

func TestDemangleCPlusPlus(t *testing.T) {
	src := testdata(t, "widget.cc")
	lib := built(t, "libwidget.so", func(out string) error {
		return run(".", "g++", "-O1", "-shared", "-fPIC", "-o", out, src)
	})
	ef, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	var spin uint64
	for _, s := range syms {
		if s.Name == "_ZN7hotpath6Widget4spinEi" {
			spin = s.Value
		}
	}
	if spin == 0 {
		t.Fatal("mangled hotpath::Widget::spin not in the library")
	}
	tab, err := OpenSymbolTable(lib)
	if err != nil {
		t.Fatal(err)
	}
	if sym, ok := tab.Lookup(spin + 2); !ok || sym.Function != "hotpath::Widget::spin" {
		t.Errorf("Lookup(spin+2) = %+v %v, want hotpath::Widget::spin", sym, ok)
	}
}

// TestDemangleRust: Rust's v0 names (its standard library's) and legacy
// names read as Rust writes them, without the crate's disambiguator or the
// hash. Before, the v0 names stayed mangled
// (_RNvNtNtCs…_4core5slice6memchr14memchr_aligned).
func TestDemangleRust(t *testing.T) {
	lib := built(t, "librustnames.so", func(out string) error {
		return run(".", "gcc", "-O1", "-shared", "-fPIC", "-o", out, testdata(t, "rustnames.c"))
	})
	ef, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"_RNvNtCs1a2b3c4d5e_7mycrate6worker4spin":                                 "mycrate::worker::spin",
		"_ZN7mycrate6worker5parse17h0123456789abcdefE":                            "mycrate::worker::parse",
		"_ZN3std3sys9backtrace28__rust_begin_short_backtrace17hfa891d39abf08321E": "std::sys::backtrace::__rust_begin_short_backtrace",
	}
	tab, err := OpenSymbolTable(lib)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, s := range syms {
		name, ok := want[s.Name]
		if !ok {
			continue
		}
		found++
		if sym, ok := tab.Lookup(s.Value + 2); !ok || sym.Function != name {
			t.Errorf("Lookup(%s+2) = %+v %v, want %s", s.Name, sym, ok, name)
		}
	}
	if found != len(want) {
		t.Fatalf("%d of the %d mangled names in the library's symbols", found, len(want))
	}
}

// TestSeparateDebugFile: a stripped binary resolves nothing of its own, its
// --only-keep-debug file (what `hotpath symbolize --symbols` reads) does.
func TestSeparateDebugFile(t *testing.T) {
	full := cProg(t, "hot-g", "-fPIE", "-pie", "-ldl", "-g")
	dir := t.TempDir()
	stripped, debugFile := filepath.Join(dir, "hot"), filepath.Join(dir, "hot.debug")
	if err := run(dir, "objcopy", "--only-keep-debug", full, debugFile); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "strip", "-o", stripped, full); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var leaf uint64
	for _, s := range syms {
		if s.Name == "hot_leaf" {
			leaf = s.Value
		}
	}
	st, err := OpenSymbolTable(stripped)
	if err != nil {
		t.Fatal(err)
	}
	if sym, ok := st.Lookup(leaf + 1); ok && sym.Function == "hot_leaf" {
		t.Fatalf("stripped binary still resolves hot_leaf; the test proves nothing")
	}
	dt, err := OpenSymbolTable(debugFile)
	if err != nil {
		t.Fatal(err)
	}
	if sym, ok := dt.Lookup(leaf + 1); !ok || sym.Function != "hot_leaf" {
		t.Errorf("debug file: Lookup(hot_leaf+1) = %+v %v", sym, ok)
	}
}

// TestCLinesFromDWARF compares file:line for C code built with -g against
// binutils' addr2line, and checks a running program's frame gets them.
func TestCLinesFromDWARF(t *testing.T) {
	bin := cProg(t, "hot-g", "-fPIE", "-pie", "-ldl", "-g")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var pcs []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Size > 0 && strings.HasPrefix(s.Name, "hot_") || s.Name == "main" {
			pcs = append(pcs, s.Value, s.Value+s.Size/2, s.Value+s.Size-1)
		}
	}
	if len(pcs) < 12 {
		t.Fatalf("found only %d PCs in hot_* functions", len(pcs))
	}
	args := []string{"-e", bin}
	for _, pc := range pcs {
		args = append(args, strconv.FormatUint(pc, 16))
	}
	out, err := exec.Command("addr2line", args...).Output()
	if err != nil {
		t.Fatalf("addr2line: %v", err)
	}
	want := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(want) != len(pcs) {
		t.Fatalf("addr2line gave %d lines for %d PCs", len(want), len(pcs))
	}
	tab, err := OpenSymbolTable(bin)
	if err != nil {
		t.Fatal(err)
	}
	for i, pc := range pcs {
		w, _, _ := strings.Cut(want[i], " (discriminator")
		sym, _ := tab.Lookup(pc)
		if got := sym.File + ":" + strconv.Itoa(sym.Line); got != w {
			t.Errorf("pc %#x: got %s, addr2line says %s", pc, got, w)
		}
	}

	rp := start(t, bin)
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	f := s.User(p, []uint64{rp.addr(t, "hot_leaf")}, nil)[0]
	src := testdata(t, "hot.c")
	if first, last := sourceLine(t, src, "int hot_leaf("), sourceLine(t, src, "int hot_mid("); f.Function != "hot_leaf" || f.File != src || f.Line < first || f.Line >= last {
		t.Errorf("frame = %+v, want hot_leaf in %s:%d-%d", f, src, first, last-1)
	}
}

// TestSnapshotWhileTableLoads: reading a new process does not wait for
// another binary's symbol table being read. On a busy node a large table
// takes hundreds of milliseconds, and a short-lived process waiting for it
// could exit before it is read, losing its names and service.
func TestSnapshotWhileTableLoads(t *testing.T) {
	bin := cProg(t, "hot-load", "-fPIE", "-pie", "-ldl")
	cp := start(t, bin, libHot(t))
	gp := start(t, goBuild(t, "go"))
	loading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := New(Options{OnTableLoad: func(time.Duration) {
		// The first table read holds here until the snapshot below is done.
		once.Do(func() { close(loading); <-release })
	}})
	pc := snapshot(t, s, cp.pid())
	leaf := cp.addr(t, "hot_leaf")
	symbolized := make(chan []Frame)
	go func() { symbolized <- s.User(pc, []uint64{leaf}, nil) }()
	<-loading
	snapped := make(chan error, 1)
	go func() {
		p, err := s.Snapshot(gp.pid())
		if err == nil {
			p.Close()
		}
		snapped <- err
	}()
	select {
	case err := <-snapped:
		if err != nil {
			t.Errorf("snapshot while a table loads: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the snapshot of a new process waited for another binary's table to load")
	}
	close(release)
	wantFrame(t, pc, (<-symbolized)[0], "hot_leaf", bin)
}

// TestLinesOncePerAddress: an address's line is looked up in its decoded
// unit once and kept, so addresses spread over more units than the bound on
// decoded rows holds do not have their units decoded again at every lookup
// (pyenv's libpython, 47 units and 174,000 rows, was decoded over and over
// under process churn).
func TestLinesOncePerAddress(t *testing.T) {
	hot, lib := testdata(t, "hot.c"), testdata(t, "libhot.c")
	bin := built(t, "two-units-g", func(out string) error {
		return run(".", "gcc", "-O1", "-g", "-o", out, hot, lib, "-ldl")
	})
	tab, err := OpenSymbolTable(bin)
	if err != nil {
		t.Fatal(err)
	}
	if tab.lines == nil {
		t.Fatal("no DWARF lines in a program built with -g")
	}
	tab.lines.maxBytes = 1 // decoding one unit drops the other
	var pcs []uint64
	for _, name := range []string{"hot_leaf", "hot_lib_func", "hot_mid", "hot_lib_helper"} {
		s := funcSym(t, bin, name)
		pcs = append(pcs, s.Value+s.Size/2)
	}
	lookupAll := func() []string {
		var lines []string
		for _, pc := range pcs {
			sym, _ := tab.Lookup(pc)
			if sym.Line == 0 {
				t.Fatalf("%#x (%s): no line", pc, sym.Function)
			}
			lines = append(lines, sym.File+":"+strconv.Itoa(sym.Line))
		}
		return lines
	}
	first := lookupAll()
	decoded := tab.lines.decodes
	if decoded < 3 {
		t.Fatalf("%d units decoded for addresses alternating between two units with room for one: the test measures nothing", decoded)
	}
	for range 3 {
		if again := lookupAll(); !slices.Equal(again, first) {
			t.Fatalf("lines %v, then %v", first, again)
		}
	}
	if n := tab.lines.decodes - decoded; n != 0 {
		t.Errorf("looking the same %d addresses up again decoded %d units", len(pcs), n)
	}
}

// TestMappingAddrOfTextSharingAPage: lld packs a binary's segments into the
// file without aligning them (the text at offset 0x740 and address 0x1740),
// so the text's mapping starts at offset 0, in the page the read-only
// segment before it starts in, at address 0. MappingAddr gives the text's
// address for that mapping, FileAddr the read-only segment's; the unwinder
// took FileAddr's, and every frame in such a binary (a Rust program: rustc
// links with lld) was looked up a page off in its table. In a classic
// layout (GNU ld: each segment on pages of its own) the two agree.
func TestMappingAddrOfTextSharingAPage(t *testing.T) {
	page := uint64(os.Getpagesize())
	for _, tc := range []struct {
		name  string
		flags []string
		lld   bool
	}{
		{"hot-lld", []string{"-fuse-ld=lld"}, true},
		{"hot-pie", []string{"-fPIE", "-pie"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := cProg(t, tc.name, tc.flags...)
			text := textSegment(t, bin)
			if shared := text.Off%page != 0; shared != tc.lld {
				t.Fatalf("text segment at file offset %#x, address %#x: want it to share a page: %v", text.Off, text.Vaddr, tc.lld)
			}
			tab, err := OpenSymbolTable(bin)
			if err != nil {
				t.Fatal(err)
			}
			o := text.Off &^ (page - 1) // where the kernel maps it from
			want := text.Vaddr - (text.Off - o)
			if got, ok := tab.MappingAddr(o); !ok || got != want {
				t.Errorf("MappingAddr(%#x) = %#x, %v; want %#x", o, got, ok, want)
			}
			if got, _ := tab.FileAddr(o); (got == want) == tc.lld {
				t.Errorf("FileAddr(%#x) = %#x, MappingAddr %#x: want them to differ: %v", o, got, want, tc.lld)
			}
		})
	}
}

// textSegment is the executable PT_LOAD segment of the binary at path.
func textSegment(t *testing.T, path string) elf.ProgHeader {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			return p.ProgHeader
		}
	}
	t.Fatalf("no executable segment in %s", path)
	return elf.ProgHeader{}
}
