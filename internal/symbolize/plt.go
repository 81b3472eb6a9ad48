package symbolize

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
)

// pltSymbols returns a symbol for each PLT entry of an x86-64 file, named
// after the function it jumps to ("memcpy@plt"), as objdump and perf name
// them. No symbol of the file covers a PLT stub, so a sample taken in one
// (a leaf only: a stub jumps, it never calls) was an address reported at
// the .plt's start (its one unwind entry), or in an executable was named
// after _init, the unsized symbol before the PLT (see endAtSection). A
// program calling a short library function in a loop spends a measurable
// share of its time in such stubs (9 % for a loop over strlen).
//
// Each entry is recognised by what it does rather than by a layout table:
// it jumps through a GOT slot (jmp *disp32(%rip), with or without the bnd
// prefix and a leading endbr64), and the slot's dynamic relocation names
// the target. That covers lazy and immediate binding (.plt), IBT's second
// PLT (.plt.sec) and the GOT-only stubs (.plt.got) alike; an entry that
// jumps elsewhere (the lazy binder's PLT0, IBT's .plt, which pushes and
// jumps to PLT0) gets no symbol. An IRELATIVE slot (glibc's own calls to
// its IFUNCs: memcpy, strlen) names no symbol; it is named after the
// function at the relocation's addend, the IFUNC's resolver, whose symbol
// bears the IFUNC's name. Other machines get none (not built).
func (c *symbolCollector) pltSymbols() []rawSymbol {
	if c.ef.Machine != elf.EM_X86_64 || c.ef.Class != elf.ELFCLASS64 {
		return nil
	}
	var plts []*elf.Section
	for _, sec := range c.ef.Sections {
		if sec.Type == elf.SHT_PROGBITS && sec.Flags&elf.SHF_EXECINSTR != 0 &&
			(sec.Name == ".plt" || sec.Name == ".plt.sec" || sec.Name == ".plt.got") &&
			sec.Offset+sec.Size <= uint64(len(c.data)) {
			plts = append(plts, sec)
		}
	}
	if len(plts) == 0 {
		return nil // a static binary, a Go binary linked alone: no relocations to read
	}
	slots := c.gotSlots()
	if len(slots) == 0 {
		return nil
	}
	// resolver: the IRELATIVE addend an entry is to be named after (0:
	// named already).
	type entry struct {
		rawSymbol
		resolver uint64
	}
	var entries []entry
	var resolvers map[uint64][]byte
	for _, sec := range plts {
		ent := sec.Entsize
		if ent != 8 && ent != 16 {
			ent = 16
		}
		code := c.data[sec.Offset : sec.Offset+sec.Size]
		for off := uint64(0); off+ent <= uint64(len(code)); off += ent {
			got, ok := gotJump(code[off:off+ent], sec.Addr+off)
			if !ok {
				continue
			}
			slot, ok := slots[got]
			if !ok {
				continue
			}
			e := entry{rawSymbol: rawSymbol{addr: sec.Addr + off, size: ent, name: slot.name, plt: true}}
			if slot.name == nil {
				if resolvers == nil {
					resolvers = map[uint64][]byte{}
				}
				resolvers[slot.addend] = nil
				e.resolver = slot.addend
			}
			entries = append(entries, e)
		}
	}
	if len(resolvers) > 0 {
		c.nameResolvers(resolvers)
	}
	out := make([]rawSymbol, 0, len(entries))
	for _, e := range entries {
		if e.name == nil {
			if e.name = resolvers[e.resolver]; e.name == nil {
				continue // no symbol at the resolver: the stub stays unnamed
			}
		}
		out = append(out, e.rawSymbol)
	}
	return out
}

// gotJump decodes the indirect jump of a PLT entry at addr: the GOT slot it
// jumps through. jmp *disp32(%rip) is ff 25 (after f2 with bnd, after
// endbr64 in IBT's entries); the displacement counts from the end of the
// instruction. The first such jump in the entry is taken: in a lazy .plt
// entry the push and the jump back to PLT0 follow it.
func gotJump(entry []byte, addr uint64) (uint64, bool) {
	i := bytes.Index(entry, []byte{0xff, 0x25})
	if i < 0 || i+6 > len(entry) {
		return 0, false
	}
	disp := int32(binary.LittleEndian.Uint32(entry[i+2:]))
	return addr + uint64(i) + 6 + uint64(int64(disp)), true
}

// gotSlot is what a GOT slot's dynamic relocation says it will hold: a
// function of .dynsym (name, aliasing the image), or for IRELATIVE the
// address of an IFUNC resolver (addend, name nil).
type gotSlot struct {
	name   []byte
	addend uint64
}

// elf64RelaBytes is the size of an Elf64_Rela record (offset, info,
// addend).
const elf64RelaBytes = 24

// gotSlots reads the file's RELA sections (.rela.plt, .rela.dyn) into the
// GOT slots they fill with a function's address, by slot address.
func (c *symbolCollector) gotSlots() map[uint64]gotSlot {
	dynsym, dynstr, entSize, haveDynsym := c.symbolSection(elf.SHT_DYNSYM)
	slots := map[uint64]gotSlot{}
	for _, sec := range c.ef.Sections {
		if sec.Type != elf.SHT_RELA || sec.Offset+sec.Size > uint64(len(c.data)) {
			continue
		}
		rela := c.data[sec.Offset : sec.Offset+sec.Size]
		for off := 0; off+elf64RelaBytes <= len(rela); off += elf64RelaBytes {
			where := binary.LittleEndian.Uint64(rela[off:])
			info := binary.LittleEndian.Uint64(rela[off+8:])
			switch elf.R_X86_64(elf.R_TYPE64(info)) {
			case elf.R_X86_64_JMP_SLOT, elf.R_X86_64_GLOB_DAT:
				i := uint64(elf.R_SYM64(info))
				if !haveDynsym || i == 0 || (i+1)*uint64(entSize) > uint64(len(dynsym)) {
					continue
				}
				nameOff, symInfo, _, _, _ := c.symbol(dynsym[i*uint64(entSize):])
				if t := elf.ST_TYPE(symInfo); t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC && t != elf.STT_NOTYPE {
					continue // a GLOB_DAT of a variable
				}
				if name := cBytes(dynstr, nameOff); len(name) > 0 {
					slots[where] = gotSlot{name: name}
				}
			case elf.R_X86_64_IRELATIVE:
				slots[where] = gotSlot{addend: binary.LittleEndian.Uint64(rela[off+16:])}
			}
		}
	}
	return slots
}

// nameResolvers fills in, for each address of want, the name the table
// would give the function there (buildSymbols' choice among the symbols
// collected at one address), or leaves it nil.
func (c *symbolCollector) nameResolvers(want map[uint64][]byte) {
	best := map[uint64]rawSymbol{}
	for _, s := range c.syms {
		if _, ok := want[s.addr]; !ok {
			continue
		}
		if b, ok := best[s.addr]; !ok || compareAtAddress(s, b) < 0 {
			best[s.addr] = s
		}
	}
	for addr, s := range best {
		want[addr] = s.name
	}
}
