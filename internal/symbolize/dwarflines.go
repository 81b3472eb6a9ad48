package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"math"
	"path"
	"slices"
	"sync"
	"unsafe"
)

// dwarfLines gives file:line for native code from DWARF .debug_line, when a
// binary carries it, and the functions inlined at an address from
// .debug_info (see functionCalls). It reads the sections in place from the file mapping,
// indexes compile units by PC range on first use, and decodes a unit's line
// program only when a lookup lands in it. Decoded units are kept compact
// (a few bytes a row, see unitLines) up to a bound on their bytes, and the
// least recently used unit is dropped first: hot code touches few units,
// and a large C++ binary's full line table would not fit the agent's memory
// goal. The answer for each address looked up is kept apart from the units,
// so an address seen again costs one map access.
//
// Under process churn, each new Python process of pyenv's libpython (built
// with -g: 142 units, 292,000 rows) runs code of dozens of its units. Kept
// as 16-byte rows under a bound of 64 k rows, dropped all at once when it
// was reached, those units were decoded again and again: 11 % of the
// agent's perf samples in a churn trial.
type dwarfLines struct {
	mu    sync.Mutex
	data  *dwarf.Data
	once  bool
	cus   []cuRange
	units map[dwarf.Offset]*unitLines
	// bytes is the units' size (unitLines.size), bounded by maxBytes
	// (maxDwarfLineBytes; tests set less).
	bytes, maxBytes int
	// clock orders the units' use, for dropping the least recent.
	clock uint64
	pcs   map[uint64]pcLine // answers by address, found or not
	// calls are the inlined calls of functions lookups landed in, by the
	// function's entry, under their own bound (callBytes, at most
	// maxCallBytes), least recently used dropped first: a function is
	// read when a lookup lands in it, so only sampled functions cost
	// memory (all of pyenv's libpython's would take 2.6 MB, twice its
	// line rows).
	calls               map[dwarf.Offset]*functionCalls
	callBytes, maxCalls int
	// fileNames are the source file paths units refer to (fileName), and
	// fileNameBytes their size.
	fileNames     map[string]string
	fileNameBytes int
	// decodes counts units decoded (tests).
	decodes int
}

// pcLine is the file and line of one address ("" and 0: none) and the
// function that holds it (entry 0: none known), whose inlined calls are
// kept apart (dwarfLines.calls).
type pcLine struct {
	file string
	line int32
	fn   functionRange
}

// maxDwarfLineBytes bounds the decoded units kept per binary: 1 MiB, about
// 300,000 rows at 3-4 bytes each, where 16-byte rows held 65,536. All of
// pyenv's libpython (292,000 rows) takes 1.12 MB: its hot units fit, not
// every unit at once.
const maxDwarfLineBytes = 1 << 20

// maxDwarfPCs bounds the addresses whose answer is kept per binary (about
// 50 bytes each with the map's own, so at most 0.8 MB; a profile's sampled
// addresses in one binary are usually a few thousand).
const maxDwarfPCs = 1 << 14

type cuRange struct {
	lo, hi uint64
	off    dwarf.Offset
}

// unitLines is one unit's line table: one row per address (the row in
// effect from it), in address order, in blocks of lineBlockRows rows. A
// block's first address is kept in blockAddrs, and each of its rows is
// three varints in enc from blockOffs: the address's distance from the
// previous row's (0 for the block's first), the line's difference from the
// previous row's (zig-zag; the block's first row's from 0, and a line of 0
// is the end of a sequence, no line from there on), and the file (index
// into names). Rows of a line program are close
// together, so a row takes 3 to 4 bytes, against 16 as slices.
type unitLines struct {
	blockAddrs []uint64
	blockOffs  []uint32
	enc        []byte
	names      []string
	lastUse    uint64
	// functions are the address ranges of the unit's functions, by start,
	// each with its DWARF entry: where the calls inlined in it are read
	// when a lookup lands in it (see dwarfLines.callsIn).
	functions []functionRange
	// namespaces qualify the plain names of functions declared in them.
	namespaces []namespaceRange
	// callFiles are the line table's files by index, as DW_AT_call_file
	// names them: indexes into names.
	callFiles []uint32
}

func (u *unitLines) used() uint64 { return u.lastUse }

// lineBlockRows is the rows per block: a lookup reads at most this many.
const lineBlockRows = 32

// size is the heap the unit holds, roughly.
func (u *unitLines) size() int {
	n := 100 + len(u.blockAddrs)*8 + len(u.blockOffs)*4 + len(u.enc)
	// The names' bytes are the binary's (dwarfLines.fileNames).
	n += len(u.names)*16 + len(u.functions)*int(unsafe.Sizeof(functionRange{})) + len(u.callFiles)*4
	for _, ns := range u.namespaces {
		n += int(unsafe.Sizeof(ns)) + len(ns.name)
	}
	return n
}

// lookup returns the file and line of the row in effect at pc, if any.
func (u *unitLines) lookup(pc uint64) (string, int) {
	b, exact := slices.BinarySearch(u.blockAddrs, pc)
	if !exact {
		b--
	}
	if b < 0 {
		return "", 0
	}
	enc := u.enc[u.blockOffs[b]:]
	if b+1 < len(u.blockOffs) {
		enc = u.enc[u.blockOffs[b]:u.blockOffs[b+1]]
	}
	addr, line, file := u.blockAddrs[b], int64(0), uint64(0)
	found := false
	// enc holds whole rows, as decodeUnit wrote them.
	for len(enc) > 0 {
		da, n := binary.Uvarint(enc)
		enc = enc[n:]
		if addr+da > pc {
			break
		}
		dline, n := binary.Varint(enc)
		enc = enc[n:]
		f, n := binary.Uvarint(enc)
		enc = enc[n:]
		addr, line, file, found = addr+da, line+dline, f, true
	}
	if !found || line == 0 {
		return "", 0
	}
	return u.names[file], int(line)
}

// newDwarfLines returns nil when the file has no usable DWARF line info.
// Compressed sections are not supported: inflating them would put the whole
// section on the heap.
func newDwarfLines(ef *elf.File, data []byte) *dwarfLines {
	sec := func(name string) []byte {
		s := ef.Section(name)
		if s == nil || s.Type == elf.SHT_NOBITS || s.Flags&elf.SHF_COMPRESSED != 0 || s.Offset+s.Size > uint64(len(data)) {
			return nil
		}
		return data[s.Offset : s.Offset+s.Size]
	}
	info, line, abbrev := sec(".debug_info"), sec(".debug_line"), sec(".debug_abbrev")
	if info == nil || line == nil || abbrev == nil {
		return nil
	}
	d, err := dwarf.New(abbrev, nil, nil, info, line, nil, sec(".debug_ranges"), sec(".debug_str"))
	if err != nil {
		return nil
	}
	for _, name := range []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists"} {
		if b := sec(name); b != nil {
			if err := d.AddSection(name, b); err != nil {
				return nil
			}
		}
	}
	return &dwarfLines{data: d, units: map[dwarf.Offset]*unitLines{}, maxBytes: maxDwarfLineBytes, pcs: map[uint64]pcLine{},
		calls: map[dwarf.Offset]*functionCalls{}, maxCalls: maxCallBytes, fileNames: map[string]string{}}
}

// line returns the file and line of pc, or "" and 0.
func (dl *dwarfLines) line(pc uint64) (string, int) {
	r := dl.at(pc)
	return r.file, int(r.line)
}

// inlined is the chain of calls inlined at pc (see
// functionCalls.inlinedAt), nil when pc is in none.
func (dl *dwarfLines) inlined(pc uint64) []inlinedFrame {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	r := dl.atLocked(pc)
	if r.fn.entry == 0 {
		return nil
	}
	return dl.callsIn(r.fn).inlinedAt(pc, r.file, int(r.line))
}

// at is what DWARF says of pc, remembered by address.
func (dl *dwarfLines) at(pc uint64) pcLine {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return dl.atLocked(pc)
}

func (dl *dwarfLines) atLocked(pc uint64) pcLine {
	if r, ok := dl.pcs[pc]; ok {
		return r
	}
	var r pcLine
	if u := dl.unitAt(pc); u != nil {
		file, line := u.lookup(pc)
		r = pcLine{file: file, line: int32(line)}
		r.fn, _ = u.functionAt(pc)
	}
	if len(dl.pcs) >= maxDwarfPCs {
		clear(dl.pcs)
	}
	dl.pcs[pc] = r
	return r
}

// unitAt is the unit whose ranges hold pc, decoded when it is not kept; nil
// when no unit holds pc. dl.mu must be held.
func (dl *dwarfLines) unitAt(pc uint64) *unitLines {
	if !dl.once {
		dl.once = true
		dl.indexUnits()
	}
	i, _ := slices.BinarySearchFunc(dl.cus, pc, func(c cuRange, pc uint64) int { return cmp.Compare(c.lo, pc+1) })
	// i is the first unit starting above pc; look back for one containing it
	// (ranges of different units rarely interleave, so a few steps suffice).
	var off dwarf.Offset
	found := false
	for j := i - 1; j >= 0 && j >= i-8; j-- {
		if c := dl.cus[j]; pc < c.hi {
			off, found = c.off, true
			break
		}
	}
	if !found {
		return nil
	}
	dl.clock++
	u, ok := dl.units[off]
	if !ok {
		u = dl.decodeUnit(off)
		dl.decodes++
		dl.keep(off, u)
	}
	u.lastUse = dl.clock
	return u
}

// keep adds a decoded unit, first dropping the least recently used units
// while the bound would be exceeded. dl.mu must be held.
func (dl *dwarfLines) keep(off dwarf.Offset, u *unitLines) {
	n := u.size()
	dropLeastRecent(dl.units, &dl.bytes, n, dl.maxBytes)
	dl.units[off] = u
	dl.bytes += n
}

// dropLeastRecent deletes the least recently used of m's entries, whose
// sizes add up to *bytes, until room more bytes fit under max.
func dropLeastRecent[V interface {
	size() int
	used() uint64
}](m map[dwarf.Offset]V, bytes *int, room, max int) {
	for *bytes+room > max && len(m) > 0 {
		var oldest dwarf.Offset
		var oldestUse uint64 = math.MaxUint64
		for o, v := range m {
			if v.used() < oldestUse {
				oldest, oldestUse = o, v.used()
			}
		}
		*bytes -= m[oldest].size()
		delete(m, oldest)
	}
}

func (dl *dwarfLines) indexUnits() {
	r := dl.data.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit {
			if ranges, err := dl.data.Ranges(e); err == nil {
				for _, rg := range ranges {
					if rg[0] < rg[1] {
						dl.cus = append(dl.cus, cuRange{lo: rg[0], hi: rg[1], off: e.Offset})
					}
				}
			}
		}
		r.SkipChildren()
	}
	slices.SortFunc(dl.cus, func(a, b cuRange) int { return cmp.Compare(a.lo, b.lo) })
}

// fileName is name, one string per distinct name in the binary: the units
// of a C program share most of their headers' paths, and C++ units more.
// dl.mu must be held.
func (dl *dwarfLines) fileName(name string) string {
	if kept, ok := dl.fileNames[name]; ok {
		return kept
	}
	dl.fileNames[name] = name
	dl.fileNameBytes += len(name) + 64 // the string and its map entry, roughly
	return name
}

// decodeUnit flattens one unit's line program into rows in address order,
// one per address, and encodes them (unitLines). An empty result (and so no
// lines) is cached on error too.
func (dl *dwarfLines) decodeUnit(off dwarf.Offset) *unitLines {
	u := &unitLines{}
	r := dl.data.Reader()
	r.Seek(off)
	cu, err := r.Next()
	if err != nil || cu == nil {
		return u
	}
	lr, err := dl.data.LineReader(cu)
	if err != nil || lr == nil {
		return u
	}
	type row struct {
		addr       uint64
		line, file uint32
	}
	var rows []row
	fileIdx := map[*dwarf.LineFile]uint32{}
	// A DWARF 5 line table's directories other than the first may be
	// relative to the compilation directory (clang writes "testdata" for
	// a file under it); debug/dwarf joins them for DWARF 4 only.
	compDir, _ := cu.Val(dwarf.AttrCompDir).(string)
	fileIndex := func(f *dwarf.LineFile) uint32 {
		fi, ok := fileIdx[f]
		if !ok {
			fi = uint32(len(u.names))
			fileIdx[f] = fi
			name := ""
			if f != nil {
				name = f.Name
			}
			if name != "" && !path.IsAbs(name) && path.IsAbs(compDir) {
				name = path.Join(compDir, name)
			}
			u.names = append(u.names, dl.fileName(name))
		}
		return fi
	}
	var e dwarf.LineEntry
	for lr.Next(&e) == nil {
		line := uint32(e.Line)
		if e.EndSequence {
			line = 0
		}
		rows = append(rows, row{e.Address, line, fileIndex(e.File)})
	}
	// Sequences may come in any address order; at one address a sequence's
	// first row must win over the previous sequence's end marker.
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.addr, b.addr) })
	var prev row
	inBlock := 0
	for i := 0; i < len(rows); {
		j, pick := i, rows[i]
		for ; j < len(rows) && rows[j].addr == rows[i].addr; j++ {
			if rows[j].line != 0 || pick.line == 0 {
				pick = rows[j] // the last real row at this address
			}
		}
		i = j
		if inBlock == lineBlockRows || len(u.blockAddrs) == 0 {
			u.blockAddrs = append(u.blockAddrs, pick.addr)
			u.blockOffs = append(u.blockOffs, uint32(len(u.enc)))
			prev, inBlock = row{addr: pick.addr}, 0
		}
		u.enc = binary.AppendUvarint(u.enc, pick.addr-prev.addr)
		u.enc = binary.AppendVarint(u.enc, int64(pick.line)-int64(prev.line))
		u.enc = binary.AppendUvarint(u.enc, uint64(pick.file))
		prev = pick
		inBlock++
	}
	u.enc = slices.Clip(u.enc)
	for _, f := range lr.Files() {
		u.callFiles = append(u.callFiles, fileIndex(f))
	}
	u.functions, u.namespaces = functionsOf(dl.data, r)
	return u
}

// size estimates the heap held: the unit index, the kept units and the
// answers by address (debug/dwarf's own per-unit state is not counted).
func (dl *dwarfLines) size() int {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return len(dl.cus)*24 + dl.bytes + dl.callBytes + dl.fileNameBytes + len(dl.pcs)*int(50+unsafe.Sizeof(functionRange{}))
}
