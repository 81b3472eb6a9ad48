package symbolize

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ianlancetaylor/demangle"
)

// TestPLTEntriesAreNamed checks the PLT symbols against objdump, which
// names each PLT entry after its target: in every PLT section of gcc's
// layouts (lazy, immediate binding, IBT's .plt.sec, no PLT but .plt.got),
// of a C++ library (its entries demangled as other C++ names are) and of
// glibc (whose own calls to its IFUNCs go through IRELATIVE slots,
// objdump's "*ABS*+0x<resolver>@plt"), every entry objdump names has our
// name at its first and last byte, and nothing else in those sections has
// a name (the lazy binder's PLT0, IBT's .plt of push-and-jump stubs).
func TestPLTEntriesAreNamed(t *testing.T) {
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		t.Fatalf("gcc -print-file-name=libc.so.6: %v", err)
	}
	files := map[string]string{
		"lazy":             cProg(t, "hot-plt-lazy", "-ldl"),
		"bind now":         cProg(t, "hot-plt-now", "-ldl", "-Wl,-z,now"),
		"IBT .plt.sec":     cProg(t, "hot-plt-ibt", "-ldl", "-fcf-protection=full", "-Wl,-z,ibtplt"),
		"no PLT, .plt.got": cProg(t, "hot-plt-none", "-ldl", "-fno-plt"),
		"non-PIE":          cProg(t, "hot-plt-nopie", "-ldl", "-no-pie"),
		"glibc":            strings.TrimSpace(string(out)),
		// widget_entry calls hotpath::Widget::spin through the PLT (a
		// shared library's global function can be interposed).
		"C++ library": built(t, "libwidget-plt.so", func(out string) error {
			return run(".", "g++", "-O1", "-shared", "-fPIC", "-o", out, testdata(t, "widget.cc"))
		}),
	}
	for name, path := range files {
		t.Run(name, func(t *testing.T) {
			want := objdumpPLT(t, path)
			table, err := OpenSymbolTable(path)
			if err != nil {
				t.Fatal(err)
			}
			ef, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer ef.Close()
			entries, irelative, mangled := 0, 0, 0
			for _, sec := range ef.Sections {
				if !strings.HasPrefix(sec.Name, ".plt") {
					continue
				}
				ent := sec.Entsize
				if ent == 0 {
					ent = 16
				}
				for addr := sec.Addr; addr < sec.Addr+sec.Size; addr += ent {
					w, named := want[addr]
					if named {
						entries++
						if resolver, ok := strings.CutPrefix(w, "*ABS*+0x"); ok {
							irelative++
							w = resolverName(t, table, strings.TrimSuffix(resolver, "@plt")) + "@plt"
						} else if strings.HasPrefix(w, "_Z") {
							// Demangled as every C++ name is, then "@plt".
							mangled++
							w = demangle.Filter(strings.TrimSuffix(w, "@plt"), demangle.NoParams) + "@plt"
						}
					}
					for _, at := range []uint64{addr, addr + ent - 1} {
						sym, ok := table.Lookup(at)
						switch {
						case named && (!ok || sym.Function != w):
							t.Errorf("%s %#x: %q (found %v), want %q", sec.Name, at, sym.Function, ok, w)
						case !named && ok:
							t.Errorf("%s %#x: %q, want no name (objdump names no entry there)", sec.Name, at, sym.Function)
						}
					}
				}
			}
			if entries == 0 || entries != len(want) {
				t.Errorf("%d PLT entries checked of objdump's %d", entries, len(want))
			}
			if name == "glibc" && irelative == 0 {
				t.Error("glibc: no IRELATIVE entry checked")
			}
			if name == "C++ library" && mangled == 0 {
				t.Error("C++ library: no entry of a C++ function checked")
			}
			t.Logf("%d entries (%d IRELATIVE, %d C++)", entries, irelative, mangled)
		})
	}
}

var objdumpLabel = regexp.MustCompile(`^([0-9a-f]+) <(.+@plt)>:$`)

// objdumpPLT returns objdump's PLT entry labels by address.
func objdumpPLT(t *testing.T, path string) map[uint64]string {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", path).Output()
	if err != nil {
		t.Fatalf("objdump -d %s: %v", path, err)
	}
	labels := map[uint64]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := objdumpLabel.FindStringSubmatch(sc.Text())
		if m == nil || strings.Contains(m[2], "@plt-") || strings.Contains(m[2], "@plt+") {
			continue
		}
		addr, err := strconv.ParseUint(m[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		labels[addr] = m[2]
	}
	return labels
}

// resolverName is the table's name for the function at hex address addr:
// an IRELATIVE entry is named after its resolver's symbol.
func resolverName(t *testing.T, table *SymbolTable, addr string) string {
	t.Helper()
	a, err := strconv.ParseUint(addr, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	sym, ok := table.Lookup(a)
	if !ok {
		t.Fatalf("no symbol at IRELATIVE resolver %#x", a)
	}
	return sym.Function
}
