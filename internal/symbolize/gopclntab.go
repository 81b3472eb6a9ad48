package symbolize

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// goPCLN reads a Go 1.16+ pclntab (the runtime's own PC → function, file,
// line tables) in place. It exists instead of debug/gosym because gosym builds
// a Func and a Sym per function up front (hundreds of bytes each, tens of MB
// for a large service); here the table stays in the file mapping and a lookup
// decodes only the one function it needs. Layout: runtime/symtab.go
// (pcHeader, _func) and debug/gosym/pclntab.go.
type goPCLN struct {
	order     binary.ByteOrder
	version   int    // 116, 118 or 120 (the Go release that introduced the layout)
	quantum   uint64 // instruction size unit of pc deltas
	ptrSize   int
	textStart uint64 // runtime.text: base of 1.18+ entry offsets
	nfunc     int
	nameOff   uint64 // header: offset of funcnametab from the table start

	funcnametab, cutab, filetab, pctab, funcdata, functab []byte

	// gofunc is the image of go:func.*, base of funcdata offsets; nil when
	// unknown, and then inlined calls are not expanded.
	gofunc []byte
}

const (
	goMagic116 = 0xfffffffa
	goMagic118 = 0xfffffff0
	goMagic120 = 0xfffffff1
)

var errGoPCLN = errors.New("malformed Go pclntab")

// parseGoPCLN parses the pclntab header. textStart is the address of
// runtime.text as far as the caller knows it (0 when unknown): in 1.18+ the
// header's own copy can be unrelocated in PIE files, so the caller's value
// wins when it has one.
func parseGoPCLN(data []byte, textStart uint64) (*goPCLN, error) {
	if len(data) < 16 || data[4] != 0 || data[5] != 0 {
		return nil, errGoPCLN
	}
	g := &goPCLN{quantum: uint64(data[6]), ptrSize: int(data[7])}
	if g.quantum != 1 && g.quantum != 2 && g.quantum != 4 {
		return nil, errGoPCLN
	}
	if g.ptrSize != 4 && g.ptrSize != 8 {
		return nil, errGoPCLN
	}
	for _, order := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch order.Uint32(data) {
		case goMagic116:
			g.order, g.version = order, 116
		case goMagic118:
			g.order, g.version = order, 118
		case goMagic120:
			g.order, g.version = order, 120
		}
		if g.order != nil {
			break
		}
	}
	if g.order == nil {
		return nil, fmt.Errorf("unsupported Go pclntab magic %#x (Go releases before 1.16 are not supported)", binary.LittleEndian.Uint32(data))
	}
	word := func(i int) (uint64, bool) {
		off := 8 + i*g.ptrSize
		if off+g.ptrSize > len(data) {
			return 0, false
		}
		if g.ptrSize == 4 {
			return uint64(g.order.Uint32(data[off:])), true
		}
		return g.order.Uint64(data[off:]), true
	}
	tab := func(i int) ([]byte, bool) {
		off, ok := word(i)
		if !ok || off > uint64(len(data)) {
			return nil, false
		}
		return data[off:], true
	}
	nfunc, ok := word(0)
	if !ok || nfunc > uint64(len(data)) {
		return nil, errGoPCLN
	}
	g.nfunc = int(nfunc)
	first := 2 // index of funcnameOffset in the header
	if g.version >= 118 {
		hdrText, ok := word(2)
		if !ok {
			return nil, errGoPCLN
		}
		g.textStart = textStart
		if g.textStart == 0 {
			g.textStart = hdrText
		}
		first = 3
	}
	g.nameOff, _ = word(first)
	var oks [5]bool
	g.funcnametab, oks[0] = tab(first)
	g.cutab, oks[1] = tab(first + 1)
	g.filetab, oks[2] = tab(first + 2)
	g.pctab, oks[3] = tab(first + 3)
	g.funcdata, oks[4] = tab(first + 4)
	for _, ok := range oks {
		if !ok {
			return nil, errGoPCLN
		}
	}
	// functab: nfunc (entry, funcoff) pairs and a final entry holding the end PC.
	n := (2*g.nfunc + 1) * g.fieldSize()
	if n > len(g.funcdata) || g.nfunc == 0 {
		return nil, errGoPCLN
	}
	g.functab = g.funcdata[:n]
	return g, nil
}

// moduledata locates the runtime's moduledata in the image's initialized
// data, where the linker has already applied relocations. It is found by
// its first fields: a pointer to the pclntab and a slice header for
// funcnametab. From it come runtime.text, which stripped externally linked
// binaries name nowhere else (.text starts with C runtime code and the
// pclntab header's textStart is 0), and gofunc, the base of funcdata
// offsets needed to expand inlined calls. Field offsets are those of Go
// 1.20+ (text is stable since 1.16).
func (g *goPCLN) moduledata(ef *elf.File, data []byte, pclnAddr uint64) (text, gofunc uint64, ok bool) {
	ps := uint64(g.ptrSize)
	word := func(b []byte) uint64 {
		if ps == 4 {
			return uint64(g.order.Uint32(b))
		}
		return g.order.Uint64(b)
	}
	// pcHeader, 5 slices (funcnametab cutab filetab pctab pclntable),
	// ftab slice, findfunctab, minpc, maxpc, then text, etext and 16 more
	// words up to rodata, gofunc.
	minpcOff := ps + 5*3*ps + 3*ps + ps
	textOff := minpcOff + 2*ps
	gofuncOff := textOff + 18*ps
	for _, sec := range ef.Sections {
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_WRITE == 0 || sec.Offset+sec.Size > uint64(len(data)) {
			continue
		}
		b := data[sec.Offset : sec.Offset+sec.Size]
		for off := uint64(0); off+gofuncOff+ps <= uint64(len(b)); off += ps {
			if word(b[off:]) != pclnAddr || word(b[off+ps:]) != pclnAddr+g.nameOff {
				continue
			}
			text := word(b[off+textOff:])
			if text+g.field(g.functab, 0) != word(b[off+minpcOff:]) {
				continue
			}
			if g.version >= 120 {
				rodata, gofunc := word(b[off+gofuncOff-ps:]), word(b[off+gofuncOff:])
				if rodata != 0 && gofunc >= rodata {
					return text, gofunc, true
				}
			}
			return text, 0, true
		}
	}
	return 0, 0, false
}

func (g *goPCLN) fieldSize() int {
	if g.version >= 118 {
		return 4
	}
	return g.ptrSize
}

func (g *goPCLN) field(b []byte, i int) uint64 {
	sz := g.fieldSize()
	if sz == 4 {
		return uint64(g.order.Uint32(b[i*sz:]))
	}
	return g.order.Uint64(b[i*sz:])
}

// pc returns the entry PC of function i (i == nfunc gives the end of text).
func (g *goPCLN) pc(i int) uint64 {
	pc := g.field(g.functab, 2*i)
	if g.version >= 118 {
		pc += g.textStart
	}
	return pc
}

// Range is the PC range the table covers: [first function, end of Go text).
func (g *goPCLN) Range() (lo, hi uint64) { return g.pc(0), g.pc(g.nfunc) }

// find returns the index of the function containing pc.
func (g *goPCLN) find(pc uint64) (int, bool) {
	if pc < g.pc(0) || pc >= g.pc(g.nfunc) {
		return 0, false
	}
	lo, hi := 0, g.nfunc // invariant: pc(lo) <= pc < pc(hi)
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if g.pc(mid) <= pc {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, true
}

// entrySize is the size of _func's first field, entry.
func (g *goPCLN) entrySize() int {
	if g.version >= 118 {
		return 4
	}
	return g.ptrSize
}

// funcAt returns the _func record of the function containing pc, its entry
// PC and the size of the record's fixed part (the pcdata offsets follow).
// _func: entry (uint32 offset in 1.18+, else uintptr), then uint32 fields
// nameOff, args, deferreturn, pcsp, pcfile, pcln, npcdata, cuOffset, (1.20+)
// startLine, then funcID, flag, pad, nfuncdata bytes, then npcdata pcdata
// offsets and nfuncdata funcdata offsets.
func (g *goPCLN) funcAt(pc uint64) (fd []byte, entry uint64, fixed int, ok bool) {
	i, ok := g.find(pc)
	if !ok {
		return nil, 0, 0, false
	}
	off := g.field(g.functab, 2*i+1)
	if off >= uint64(len(g.funcdata)) {
		return nil, 0, 0, false
	}
	fd = g.funcdata[off:]
	nfields := 8
	if g.version >= 120 {
		nfields = 9
	}
	fixed = g.entrySize() + nfields*4 + 4
	if len(fd) < fixed {
		return nil, 0, 0, false
	}
	if g.version >= 118 {
		entry = uint64(g.order.Uint32(fd)) + g.textStart
	} else if g.ptrSize == 4 {
		entry = uint64(g.order.Uint32(fd))
	} else {
		entry = g.order.Uint64(fd)
	}
	return fd, entry, fixed, true
}

// spDelta is how far the stack pointer at pc is below its value at the
// function's entry (the pcsp table): 0 at entry and throughout a function
// without a frame, where the return address is still at [SP]. ok is false
// when pc is in no function or the table is malformed.
func (g *goPCLN) spDelta(pc uint64) (delta int32, ok bool) {
	fd, entry, _, ok := g.funcAt(pc)
	if !ok {
		return 0, false
	}
	pcsp := g.order.Uint32(fd[g.entrySize()+3*4:])
	d := g.pcvalue(pcsp, entry, pc)
	if d < 0 {
		return 0, false
	}
	return d, true
}

// lookup appends what pc resolves to, innermost first: the functions
// inlined at pc, then the function containing it. Any out-of-range offset
// in a malformed table ends the lookup with what was found so far.
func (g *goPCLN) lookup(pc uint64, out []Symbol) []Symbol {
	fd, entry, fixed, ok := g.funcAt(pc)
	if !ok {
		return out
	}
	u32 := func(n int) uint32 { return g.order.Uint32(fd[g.entrySize()+(n-1)*4:]) }
	pcfile, pcln, cuOff := u32(5), u32(6), u32(8)
	fileLine := func(pc uint64) (file string, line int) {
		if fno := g.pcvalue(pcfile, entry, pc); fno >= 0 {
			idx := (uint64(cuOff) + uint64(fno)) * 4
			if idx+4 <= uint64(len(g.cutab)) {
				if foff := g.order.Uint32(g.cutab[idx:]); foff != ^uint32(0) {
					file, _ = cString(g.filetab, uint64(foff))
				}
			}
		}
		if l := g.pcvalue(pcln, entry, pc); l > 0 {
			line = int(l)
		}
		return file, line
	}

	// Inlined calls: PCDATA_InlTreeIndex (2) gives, per pc, an index into
	// the function's FUNCDATA_InlTree (3) table of inlinedCall records
	// {funcID uint8; _ [3]byte; nameOff, parentPc, startLine int32}; each
	// record's parentPc leads to the caller's position (runtime/symtabinl.go).
	if g.gofunc != nil && g.version >= 120 {
		npcdata, nfuncdata := int(u32(7)), int(fd[fixed-1])
		pcdata := fd[fixed:]
		funcdata := pcdata[min(len(pcdata), 4*npcdata):]
		if npcdata > 2 && len(pcdata) >= 4*npcdata && nfuncdata > 3 && len(funcdata) >= 4*nfuncdata {
			idxTab, treeOff := g.order.Uint32(pcdata[8:]), g.order.Uint32(funcdata[12:])
			if idxTab != 0 && treeOff != ^uint32(0) && uint64(treeOff) < uint64(len(g.gofunc)) {
				tree := g.gofunc[treeOff:]
				for depth := 0; depth < 100; depth++ {
					ix := g.pcvalue(idxTab, entry, pc)
					if ix < 0 || int(ix)*16+16 > len(tree) {
						break
					}
					ic := tree[int(ix)*16:]
					name, ok := cString(g.funcnametab, uint64(g.order.Uint32(ic[4:])))
					if !ok {
						break
					}
					file, line := fileLine(pc)
					out = append(out, Symbol{Function: name, File: file, Line: line, IsGo: true})
					pc = entry + uint64(int64(int32(g.order.Uint32(ic[8:]))))
				}
			}
		}
	}
	name, ok := cString(g.funcnametab, uint64(u32(1)))
	if !ok {
		return out
	}
	file, line := fileLine(pc)
	return append(out, Symbol{Function: name, File: file, Line: line, IsGo: true})
}

// pcvalue decodes a pc-value table (zig-zag value deltas, pc deltas in
// quantum units, both varints) up to targetpc; -1 when not found.
func (g *goPCLN) pcvalue(off uint32, entry, targetpc uint64) int32 {
	if off == 0 || uint64(off) >= uint64(len(g.pctab)) {
		return -1
	}
	p := g.pctab[off:]
	val := int32(-1)
	pc := entry
	for first := true; ; first = false {
		uv, n := binary.Uvarint(p)
		if n <= 0 || (uv == 0 && !first) {
			return -1
		}
		p = p[n:]
		if uv&1 != 0 {
			uv = ^(uv >> 1)
		} else {
			uv >>= 1
		}
		pcd, n := binary.Uvarint(p)
		if n <= 0 {
			return -1
		}
		p = p[n:]
		val += int32(uv)
		pc += pcd * g.quantum
		if targetpc < pc {
			return val
		}
	}
}

// cString copies the NUL-terminated string at b[off:] (a copy, because b may
// be a file mapping that outlives no caller).
func cString(b []byte, off uint64) (string, bool) {
	if off >= uint64(len(b)) {
		return "", false
	}
	b = b[off:]
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), true
		}
	}
	return "", false
}
