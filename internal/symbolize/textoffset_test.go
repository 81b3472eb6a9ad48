package symbolize

import (
	"debug/elf"
	"testing"
)

// TestTextOffset: the file offset at the lowest address of the code, which
// the kernel's unwinder turns a mapping's offset into an ELF address with,
// is the executable segment's; executable segments at different distances
// from their file offsets have none.
func TestTextOffset(t *testing.T) {
	for _, flags := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
		bin := cProg(t, "text-offset"+flags[0], flags...)
		st, err := OpenSymbolTable(bin)
		if err != nil {
			t.Fatal(err)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		var want *elf.Prog
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
				want = p
			}
		}
		f.Close()
		if off, ok := st.TextOffset(); !ok || off != want.Off || st.TextVaddr() != want.Vaddr {
			t.Errorf("%v: TextOffset = %#x, %v, TextVaddr %#x; want %#x at %#x", flags, off, ok, st.TextVaddr(), want.Off, want.Vaddr)
		}
	}
	two := []loadSegment{{off: 0x1000, vaddr: 0x401000}, {off: 0x9000, vaddr: 0x80a000}}
	if off := textOffset(two, 0x401000); off != noTextOff {
		t.Errorf("segments at different distances: text offset %#x, want none", off)
	}
	two[1].vaddr = 0x409000
	if off := textOffset(two, 0x401000); off != 0x1000 {
		t.Errorf("segments at one distance: text offset %#x, want 0x1000", off)
	}
	if off := textOffset(nil, 0); off != noTextOff {
		t.Errorf("no executable segment: text offset %#x, want none", off)
	}
}
