package symbolize

import (
	"debug/elf"
	"os"
	"testing"
)

// coldProgC has a function whose cold branch GCC moves into a part of
// its own (split_me.cold, in .text.unlikely): a local .symtab symbol that
// strip removes, with an unwind entry of its own that stays.
const coldProgC = `#include <stdio.h>
__attribute__((noinline, cold)) void report(int v) { fprintf(stderr, "%d\n", v); }
__attribute__((noinline)) int split_me(int x) {
	if (x > 1000) { /* calls a cold function: GCC moves the branch out */
		volatile int v = x;
		for (int i = 0; i < 64; i++) v = v * 31 + i;
		report(v);
		return v;
	}
	return x + 1;
}
static __attribute__((noinline)) int after_split(int x) {
	volatile int v = x;
	for (int i = 0; i < 8; i++) v = v * 7 + i;
	return v;
}
int main(int argc, char **argv) { return (split_me(argc) + after_split(argc)) & 1; }
`

// TestColdPartNamed: an address in a function's .cold part is named
// name.cold by the binary's .symtab, and after strip --strip-all (only
// split_me stays, exported in .dynsym) by its unwind entry: a piece
// emitted right after split_me's. A static function is not such a piece:
// its own entry starts with the return address on the stack.
func TestColdPartNamed(t *testing.T) {
	bin := built(t, "coldprog", func(out string) error {
		src := out + ".c"
		if err := os.WriteFile(src, []byte(coldProgC), 0o644); err != nil {
			return err
		}
		return run(".", "gcc", "-O2", "-rdynamic", "-o", out, src)
	})
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ef.Symbols()
	ef.Close()
	if err != nil {
		t.Fatal(err)
	}
	var cold, static uint64
	for _, s := range syms {
		switch s.Name {
		case "split_me.cold":
			cold = s.Value
		case "after_split":
			static = s.Value
		}
	}
	if cold == 0 || static == 0 {
		t.Fatalf("gcc made no split_me.cold or after_split (%#x, %#x): the test needs both", cold, static)
	}
	stripped, _ := splitDebug(t, bin)
	for _, c := range []struct {
		path, what string
	}{{bin, "with .symtab"}, {stripped, "stripped"}} {
		tab := openTable(t, c.path)
		for _, pc := range []uint64{cold, cold + 4} {
			if sym, _ := tab.Lookup(pc); sym.Function != "split_me.cold" {
				t.Errorf("%s: Lookup(%#x) = %q, want split_me.cold", c.what, pc, sym.Function)
			}
		}
		if c.path == stripped {
			if sym, ok := tab.Lookup(static); ok {
				t.Errorf("stripped: the static after_split at %#x is named %q, want no name", static, sym.Function)
			}
		}
	}
}
