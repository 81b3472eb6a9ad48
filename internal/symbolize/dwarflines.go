package symbolize

import (
	"cmp"
	"debug/dwarf"
	"debug/elf"
	"slices"
	"sync"
)

// dwarfLines gives file:line for native code from DWARF .debug_line, when a
// binary carries it. It reads the sections in place from the file mapping,
// indexes compile units by PC range on first use, and decodes a unit's line
// program only when a lookup lands in it, keeping a bounded number of
// decoded rows: hot code touches few units, and a large C++ binary's full
// line table would not fit the agent's memory goal. The answer for each
// address looked up is kept apart from the units: the addresses a profile
// meets are few, but they can lie in more units than the rows' bound holds.
// Under process churn, each new Python process ran code of 47 units of
// pyenv's libpython, built with -g (174,000 rows): the bound held 17 of
// them, and units were decoded again and again (1.27 M rows in 30 s).
type dwarfLines struct {
	mu    sync.Mutex
	data  *dwarf.Data
	once  bool
	cus   []cuRange
	units map[dwarf.Offset]*unitLines
	rows  int
	// maxRows bounds rows (maxDwarfRows; tests set less).
	maxRows int
	pcs     map[uint64]pcLine // answers by address, found or not
	// decodes counts units decoded (tests).
	decodes int
}

// pcLine is the file and line of one address ("" and 0: none).
type pcLine struct {
	file string
	line int32
}

// maxDwarfRows bounds decoded line rows kept per binary (16 bytes each).
const maxDwarfRows = 1 << 16

// maxDwarfPCs bounds the addresses whose answer is kept per binary (about
// 50 bytes each with the map's own, so at most 0.8 MB; a profile's sampled
// addresses in one binary are usually a few thousand).
const maxDwarfPCs = 1 << 14

type cuRange struct {
	lo, hi uint64
	off    dwarf.Offset
}

type unitLines struct {
	addrs []uint64 // sorted row addresses
	lines []uint32 // 0: end of a sequence (no line from here)
	files []uint32 // index into names
	names []string
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
	return &dwarfLines{data: d, units: map[dwarf.Offset]*unitLines{}, maxRows: maxDwarfRows, pcs: map[uint64]pcLine{}}
}

// line returns the file and line of pc, or "" and 0.
func (dl *dwarfLines) line(pc uint64) (string, int) {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if r, ok := dl.pcs[pc]; ok {
		return r.file, int(r.line)
	}
	file, line := dl.lineInUnit(pc)
	if len(dl.pcs) >= maxDwarfPCs {
		clear(dl.pcs)
	}
	dl.pcs[pc] = pcLine{file, int32(line)}
	return file, line
}

// lineInUnit finds pc in its unit's rows, decoding the unit when it is not
// kept. dl.mu must be held.
func (dl *dwarfLines) lineInUnit(pc uint64) (string, int) {
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
		return "", 0
	}
	u, ok := dl.units[off]
	if !ok {
		u = dl.decodeUnit(off)
		dl.decodes++
		if dl.rows+len(u.addrs) > dl.maxRows {
			clear(dl.units)
			dl.rows = 0
		}
		dl.units[off] = u
		dl.rows += len(u.addrs)
	}
	k, exact := slices.BinarySearch(u.addrs, pc)
	if !exact {
		k--
	}
	if k < 0 || u.lines[k] == 0 {
		return "", 0
	}
	return u.names[u.files[k]], int(u.lines[k])
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

// decodeUnit flattens one unit's line program into sorted rows. An empty
// result (and so no lines) is cached on error too.
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
	var e dwarf.LineEntry
	for lr.Next(&e) == nil {
		line := uint32(e.Line)
		if e.EndSequence {
			line = 0
		}
		fi, ok := fileIdx[e.File]
		if !ok {
			fi = uint32(len(u.names))
			fileIdx[e.File] = fi
			name := ""
			if e.File != nil {
				name = e.File.Name
			}
			u.names = append(u.names, name)
		}
		rows = append(rows, row{e.Address, line, fi})
	}
	// Sequences may come in any address order; at one address a sequence's
	// first row must win over the previous sequence's end marker.
	slices.SortStableFunc(rows, func(a, b row) int { return cmp.Compare(a.addr, b.addr) })
	for i := 0; i < len(rows); {
		j, pick := i, rows[i]
		for ; j < len(rows) && rows[j].addr == rows[i].addr; j++ {
			if rows[j].line != 0 || pick.line == 0 {
				pick = rows[j] // the last real row at this address
			}
		}
		u.addrs = append(u.addrs, pick.addr)
		u.lines = append(u.lines, pick.line)
		u.files = append(u.files, pick.file)
		i = j
	}
	return u
}

// size estimates the heap held: the unit index and decoded rows (debug/dwarf's
// own per-unit state is not counted).
func (dl *dwarfLines) size() int {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	return len(dl.cus)*24 + dl.rows*16 + len(dl.pcs)*50
}
