package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// debugProgC is a program whose static function exists only as a local
// .symtab symbol: once the binary is stripped, only a separate debug file
// can name it. LOCAL_NAME renames it for the stale-build test.
const debugProgC = `#ifndef LOCAL_NAME
#define LOCAL_NAME dbg_local_work
#endif
static __attribute__((noinline)) int LOCAL_NAME(int x) {
	volatile int v = x;
	for (int i = 0; i < 8; i++) v = v * 31 + i;
	return v;
}
__attribute__((noinline)) int dbg_exported(int x) { return LOCAL_NAME(x) + 1; }
int main(int argc, char **argv) { return dbg_exported(argc) & 1; }
`

// debugProg builds debugProgC with -O2 -g and -rdynamic (main and
// dbg_exported stay in .dynsym after strip), plus extra gcc flags.
func debugProg(tb testing.TB, name string, flags ...string) string {
	return built(tb, name, func(out string) error {
		src := out + ".c"
		if err := os.WriteFile(src, []byte(debugProgC), 0o644); err != nil {
			return err
		}
		args := append([]string{"-O2", "-g", "-rdynamic", "-o", out, src}, flags...)
		return run(".", "gcc", args...)
	})
}

// splitDebug makes, in a fresh directory, the --only-keep-debug file of bin
// and a --strip-all copy of it.
func splitDebug(t *testing.T, bin string) (stripped, debugFile string) {
	t.Helper()
	dir := t.TempDir()
	stripped, debugFile = filepath.Join(dir, "bin"), filepath.Join(dir, "bin.debug")
	if err := run(dir, "objcopy", "--only-keep-debug", bin, debugFile); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "strip", "--strip-all", "-o", stripped, bin); err != nil {
		t.Fatal(err)
	}
	if hasSymtab(t, stripped) {
		t.Fatalf("%s still has a .symtab after strip --strip-all", stripped)
	}
	return stripped, debugFile
}

func hasSymtab(t *testing.T, path string) bool {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_SYMTAB {
			return true
		}
	}
	return false
}

// gnuBuildID reads the NT_GNU_BUILD_ID note of path with debug/elf (not
// through the package under test) as lowercase hex.
func gnuBuildID(t *testing.T, path string) string {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	sec := ef.Section(".note.gnu.build-id")
	if sec == nil {
		t.Fatalf("%s has no .note.gnu.build-id", path)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	pad4 := func(n uint32) uint32 { return (n + 3) &^ 3 }
	for len(data) >= 12 {
		namesz, descsz, typ := ef.ByteOrder.Uint32(data), ef.ByteOrder.Uint32(data[4:]), ef.ByteOrder.Uint32(data[8:])
		rest := data[12:]
		if uint64(len(rest)) < uint64(pad4(namesz))+uint64(descsz) {
			break
		}
		if typ == 3 && string(bytes.TrimRight(rest[:namesz], "\x00")) == "GNU" {
			return hex.EncodeToString(rest[pad4(namesz) : pad4(namesz)+descsz])
		}
		if uint64(len(rest)) < uint64(pad4(namesz))+uint64(pad4(descsz)) {
			break
		}
		data = rest[pad4(namesz)+pad4(descsz):]
	}
	t.Fatalf("%s has no GNU build ID note", path)
	return ""
}

// buildIDPath is where a debug file for build ID id is looked up under root.
func buildIDPath(root, id string) string {
	return filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
}

// placeDebug writes data at root's path for build ID id and
// returns that path.
func placeDebug(t *testing.T, root, id string, data []byte) string {
	t.Helper()
	p := buildIDPath(root, id)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// withDebugDir points DebugDir at dir until the test ends.
func withDebugDir(t *testing.T, dir string) {
	old := DebugDir
	DebugDir = dir
	t.Cleanup(func() { DebugDir = old })
}

// funcSym is the sized .symtab function symbol called name in path.
func funcSym(t *testing.T, path, name string) elf.Symbol {
	t.Helper()
	syms := funcSyms(t, path, func(s string) bool { return s == name })
	if len(syms) == 0 {
		t.Fatalf("no function symbol %s in %s", name, path)
	}
	return syms[0]
}

// funcSyms are the sized .symtab function symbols in path whose names keep
// accepts, in the table's order.
func funcSyms(t *testing.T, path string, keep func(name string) bool) []elf.Symbol {
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
	var out []elf.Symbol
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 && s.Size > 0 && keep(s.Name) {
			out = append(out, s)
		}
	}
	return out
}

// pcsIn are the first, a middle and the last byte of a function.
func pcsIn(s elf.Symbol) []uint64 {
	return []uint64{s.Value, s.Value + s.Size/2, s.Value + s.Size - 1}
}

func lookupName(tab *SymbolTable, pc uint64) string {
	sym, _ := tab.Lookup(pc)
	return sym.Function
}

// A stripped binary's local functions are named through its debug file,
// found by build ID under DebugDir.
func TestDebugFileByBuildID(t *testing.T) {
	bin := debugProg(t, "debugprog", "-Wl,--build-id")
	local := funcSym(t, bin, "dbg_local_work")
	if elf.ST_BIND(local.Info) != elf.STB_LOCAL {
		t.Fatalf("dbg_local_work is %v, want a local symbol (only in .symtab)", elf.ST_BIND(local.Info))
	}
	stripped, debugFile := splitDebug(t, bin)
	id := gnuBuildID(t, bin)
	if got := gnuBuildID(t, stripped); got != id {
		t.Fatalf("stripped build ID %s, unstripped %s", got, id)
	}
	if got := gnuBuildID(t, debugFile); got != id {
		t.Fatalf("debug file build ID %s, binary %s", got, id)
	}
	root := t.TempDir()
	want := placeDebug(t, root, id, readFile(t, debugFile))

	t.Run("no debug file", func(t *testing.T) {
		withDebugDir(t, t.TempDir())
		tab, err := OpenSymbolTable(stripped)
		if err != nil {
			t.Fatal(err)
		}
		for _, pc := range pcsIn(local) {
			if got := lookupName(tab, pc); got == "dbg_local_work" {
				t.Fatalf("without a debug file, %#x resolved to %s; the test proves nothing", pc, got)
			}
		}
		if got := tab.DebugFile(); got != "" {
			t.Errorf("DebugFile() = %q with an empty DebugDir", got)
		}
	})

	t.Run("by build ID", func(t *testing.T) {
		withDebugDir(t, root)
		tab, err := OpenSymbolTable(stripped)
		if err != nil {
			t.Fatal(err)
		}
		if got := tab.DebugFile(); got != want {
			t.Errorf("DebugFile() = %q, want %q", got, want)
		}
		for _, pc := range pcsIn(local) {
			if got := lookupName(tab, pc); got != "dbg_local_work" {
				t.Errorf("Lookup(%#x) = %q, want dbg_local_work from the debug file", pc, got)
			}
		}
		for _, name := range []string{"dbg_exported", "main"} {
			s := funcSym(t, bin, name)
			for _, pc := range pcsIn(s) {
				if got := lookupName(tab, pc); got != name {
					t.Errorf("Lookup(%#x) = %q, want %s", pc, got, name)
				}
			}
		}
	})

	// The debug file is unmapped once its symbols are merged: its names
	// must have been copied, even where the table would otherwise read
	// names from the file mapping.
	t.Run("names outlive the debug file", func(t *testing.T) {
		own := t.TempDir()
		p := placeDebug(t, own, id, readFile(t, debugFile))
		withDebugDir(t, own)
		old := namesInImageBytes
		namesInImageBytes = 0
		defer func() { namesInImageBytes = old }()
		tab, err := OpenSymbolTable(stripped)
		if err != nil {
			t.Fatal(err)
		}
		if tab.DebugFile() != p {
			t.Fatalf("DebugFile() = %q, want %q", tab.DebugFile(), p)
		}
		if tab.namesInImage {
			t.Error("names read in place although they come from the unmapped debug file")
		}
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		runtime.GC()
		for _, pc := range pcsIn(local) {
			if got := lookupName(tab, pc); got != "dbg_local_work" {
				t.Errorf("after the debug file was removed, Lookup(%#x) = %q, want dbg_local_work", pc, got)
			}
		}
	})
}

// A debug file of another build at the binary's build-ID path would name
// the wrong functions: it must be ignored.
func TestDebugFileOtherBuildIgnored(t *testing.T) {
	bin := debugProg(t, "debugprog", "-Wl,--build-id")
	const staleID = "0123456789abcdef0123456789abcdef01234567"
	other := debugProg(t, "debugprog-stale", "-Wl,--build-id=0x"+staleID, "-DLOCAL_NAME=stale_local_work")
	local := funcSym(t, bin, "dbg_local_work")
	stripped, _ := splitDebug(t, bin)
	_, staleDebug := splitDebug(t, other)
	id := gnuBuildID(t, bin)
	if got := gnuBuildID(t, staleDebug); got != staleID || got == id {
		t.Fatalf("stale debug file has build ID %s, want %s (binary: %s)", got, staleID, id)
	}
	// Accepted, the stale file would misname the static function.
	staleTab, err := OpenSymbolTable(staleDebug)
	if err != nil {
		t.Fatal(err)
	}
	if got := lookupName(staleTab, local.Value); got != "stale_local_work" {
		t.Fatalf("the stale build has %q at %#x, not stale_local_work; the test proves nothing", got, local.Value)
	}

	root := t.TempDir()
	placeDebug(t, root, id, readFile(t, staleDebug))
	withDebugDir(t, root)
	tab, err := OpenSymbolTable(stripped)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.DebugFile(); got != "" {
		t.Errorf("DebugFile() = %q: a debug file with build ID %s was used for %s", got, staleID, id)
	}
	for _, pc := range pcsIn(local) {
		if got := lookupName(tab, pc); got == "stale_local_work" || got == "dbg_local_work" {
			t.Errorf("Lookup(%#x) = %q from a debug file of another build", pc, got)
		}
	}
}

// A damaged file at the build-ID path leaves the binary's own symbols.
func TestCorruptDebugFile(t *testing.T) {
	bin := debugProg(t, "debugprog", "-Wl,--build-id")
	stripped, debugFile := splitDebug(t, bin)
	id := gnuBuildID(t, bin)
	good := readFile(t, debugFile)
	exported := []elf.Symbol{funcSym(t, bin, "main"), funcSym(t, bin, "dbg_exported")}

	ef, err := elf.NewFile(bytes.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	var symtab *elf.Section
	symtabIdx := 0
	for i, s := range ef.Sections {
		if s.Type == elf.SHT_SYMTAB {
			symtab, symtabIdx = s, i
		}
	}
	if symtab == nil || ef.Class != elf.ELFCLASS64 {
		t.Fatalf("debug file: no .symtab or not ELF64")
	}
	strtab := ef.Sections[symtab.Link]
	shoff := ef.ByteOrder.Uint64(good[0x28:]) // e_shoff
	shentsize := uint64(ef.ByteOrder.Uint16(good[0x3a:]))

	garbled := bytes.Clone(good)
	for _, s := range []*elf.Section{symtab, strtab} {
		for i := s.Offset; i < s.Offset+s.Size; i++ {
			garbled[i] ^= byte(0xa5 + i)
		}
	}
	badLink := bytes.Clone(good)
	ef.ByteOrder.PutUint32(badLink[shoff+uint64(symtabIdx)*shentsize+40:], 0xffff) // sh_link
	badOffset := bytes.Clone(good)
	ef.ByteOrder.PutUint64(badOffset[shoff+uint64(symtabIdx)*shentsize+24:], uint64(len(good))-8) // sh_offset
	noSymtab := filepath.Join(t.TempDir(), "nosym.debug")
	if err := run(".", "strip", "--strip-all", "-o", noSymtab, debugFile); err != nil {
		t.Fatal(err)
	}
	if hasSymtab(t, noSymtab) {
		t.Fatal("strip left the debug file's .symtab")
	}

	for _, tc := range []struct {
		name string
		data []byte
		// rejected: the file must not be reported as used.
		rejected bool
	}{
		{"empty", nil, true},
		{"ELF header only", good[:64], true},
		{"first half", good[:len(good)/2], true},
		{"no section headers", good[:shoff], true},
		{"no symtab", readFile(t, noSymtab), true},
		{"garbled symtab", garbled, false},
		{"symtab link out of range", badLink, false},
		{"symtab past EOF", badOffset, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			placeDebug(t, root, id, tc.data)
			withDebugDir(t, root)
			tab, err := OpenSymbolTable(stripped)
			if err != nil {
				t.Fatalf("a damaged debug file broke the table: %v", err)
			}
			if tc.rejected && tab.DebugFile() != "" {
				t.Errorf("DebugFile() = %q for a damaged file", tab.DebugFile())
			}
			for _, s := range exported {
				for _, pc := range pcsIn(s) {
					if got := lookupName(tab, pc); got != s.Name {
						t.Errorf("Lookup(%#x) = %q, want %s from the binary's .dynsym", pc, got, s.Name)
					}
				}
			}
		})
	}

	t.Run("directory", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(buildIDPath(root, id), 0o755); err != nil {
			t.Fatal(err)
		}
		withDebugDir(t, root)
		tab, err := OpenSymbolTable(stripped)
		if err != nil {
			t.Fatal(err)
		}
		if tab.DebugFile() != "" {
			t.Errorf("DebugFile() = %q for a directory", tab.DebugFile())
		}
		if got := lookupName(tab, exported[0].Value); got != "main" {
			t.Errorf("Lookup(main) = %q", got)
		}
	})
}

// The distribution's libc is stripped; libc6-dbg's file in /usr/lib/debug
// names its internal functions, without symbol versions.
func TestLibcDebugFile(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if hasSymtab(t, libc) {
		t.Fatalf("%s has a .symtab; the test needs the stripped distribution libc", libc)
	}
	id := gnuBuildID(t, libc)
	debugPath := buildIDPath("/usr/lib/debug", id)
	if _, err := os.Stat(debugPath); err != nil {
		t.Fatalf("libc's debug file is missing (%v): install libc6-dbg (apt-get install libc6-dbg, or make deps)", err)
	}
	if DebugDir != "/usr/lib/debug" {
		t.Fatalf("DebugDir = %q, want the default /usr/lib/debug", DebugDir)
	}
	tab, err := OpenSymbolTable(libc)
	if err != nil {
		t.Fatal(err)
	}
	if got := tab.DebugFile(); got != debugPath {
		t.Fatalf("DebugFile() = %q, want %q", got, debugPath)
	}

	ef, err := elf.Open(debugPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	wanted := map[string]bool{"msort_with_tmp.part.0": false, "__libc_start_call_main": false}
	versioned := 0
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 || s.Size == 0 {
			continue
		}
		if strings.Contains(s.Name, "@") {
			versioned++
		}
		if _, ok := wanted[s.Name]; !ok {
			continue
		}
		wanted[s.Name] = true
		for _, pc := range pcsIn(s) {
			if got := lookupName(tab, pc); got != s.Name {
				t.Errorf("libc Lookup(%#x) = %q, want %s", pc, got, s.Name)
			}
		}
	}
	for name, found := range wanted {
		if !found {
			t.Errorf("%s not in %s", name, debugPath)
		}
	}
	if versioned == 0 {
		t.Fatalf("no versioned (name@VERSION) functions in %s; the '@' check proves nothing", debugPath)
	}

	DebugDir = t.TempDir()
	without, err := OpenSymbolTable(libc)
	DebugDir = "/usr/lib/debug"
	if err != nil {
		t.Fatal(err)
	}
	if tab.Symbols() <= without.Symbols() {
		t.Errorf("libc has %d symbols with its debug file, %d without", tab.Symbols(), without.Symbols())
	}

	bad := 0
	for _, addr := range tab.addrs {
		// A PLT entry is named "<target>@plt"; its target's version is
		// trimmed as any other name's.
		if name := strings.TrimSuffix(lookupName(tab, addr), "@plt"); strings.Contains(name, "@") {
			if bad++; bad <= 5 {
				t.Errorf("libc Lookup(%#x) = %q: symbol version not trimmed", addr, name)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d names with '@' in all", bad)
	}
}

// scriptedDebugFiles is a DebugFiles whose answer the test sets, and which
// records what it was asked.
type scriptedDebugFiles struct {
	mu    sync.Mutex
	path  string
	wait  bool
	asked []string
}

func (d *scriptedDebugFiles) DebugFile(build string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.asked = append(d.asked, build)
	return d.path, d.wait
}

// A stripped binary whose debug file is on its way (DebugFiles says wait)
// is not read: its frames keep their addresses. Once the file is here, the
// table is read with it and names the static function. The snapshot asks
// for the file before any stack is symbolized; a binary with a .symtab is
// never asked about.
func TestDebugFilesWaitThenName(t *testing.T) {
	withDebugDir(t, t.TempDir())
	bin := cProg(t, "hot-debugfiles", "-g", "-Wl,--build-id")
	stripped, debugFile := splitDebug(t, bin)
	id := gnuBuildID(t, stripped)
	fetched := filepath.Join(t.TempDir(), "debuginfo")
	if err := os.WriteFile(fetched, readFile(t, debugFile), 0o644); err != nil {
		t.Fatal(err)
	}
	df := &scriptedDebugFiles{wait: true}
	s := New(Options{DebugFiles: df})
	rp := start(t, stripped)
	p := snapshot(t, s, rp.pid())
	df.mu.Lock()
	asked := slices.Clone(df.asked)
	df.mu.Unlock()
	if !slices.Contains(asked, id) {
		t.Fatalf("the snapshot asked for %v, not the stripped binary's build %s", asked, id)
	}

	static := rp.addr(t, "hot_static")
	if f := s.User(p, []uint64{static}, nil); len(f) != 1 || f[0].Function != "" || f[0].Address != static {
		t.Fatalf("while its debug file is on its way: %+v, want the address unresolved", f)
	}
	if s.Stats().Loads != 0 {
		t.Fatalf("%d tables read while waiting", s.Stats().Loads)
	}
	// The unwinder, attaching the process meanwhile, gets the binary's
	// layout read without the debug file; names still wait for it.
	i := slices.IndexFunc(p.Mappings, func(m Mapping) bool { return m.Path == stripped })
	if i < 0 {
		t.Fatalf("%s is not among the mappings %+v", stripped, p.Mappings)
	}
	lt := s.MappingTable(p, i)
	if lt == nil || lt.DebugFile() != "" || !lt.HasText() {
		t.Fatalf("MappingTable while waiting: %+v", lt)
	}
	// Another process of the binary (a second read of this one) gets the
	// same table, not a second read of the file.
	p2 := snapshot(t, s, rp.pid())
	if again := s.MappingTable(p2, i); again != lt || s.Stats().Loads != 1 {
		t.Fatalf("second MappingTable while waiting: same table %v, %d reads", again == lt, s.Stats().Loads)
	}
	if f := s.User(p, []uint64{static}, nil); len(f) != 1 || f[0].Function != "" {
		t.Fatalf("named from the table read for the unwinder: %+v", f)
	}

	df.mu.Lock()
	df.path, df.wait = fetched, false
	df.mu.Unlock()
	if f := s.User(p, []uint64{static}, nil); len(f) != 1 || f[0].Function != "hot_static" {
		t.Fatalf("with its debug file: %+v, want hot_static", f)
	}

	// The unstripped build has its .symtab: nothing to ask.
	df.mu.Lock()
	df.asked = nil
	df.mu.Unlock()
	snapshot(t, New(Options{DebugFiles: df}), start(t, bin).pid())
	df.mu.Lock()
	defer df.mu.Unlock()
	if slices.Contains(df.asked, id) {
		t.Errorf("asked for the debug file of a binary with a .symtab")
	}
}
