package symbolize

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hotpath-dev/hotpath/internal/ehframe"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
	"github.com/ianlancetaylor/demangle"
)

// Symbol is what an address in a binary resolves to.
type Symbol struct {
	Function string
	File     string // "" when the table has no line information
	Line     int    // 0 when unknown
	IsGo     bool   // resolved from the Go pclntab
}

// SymbolTable resolves addresses of one ELF file (executable, shared library
// or separate debug file). ELF function symbols (.symtab and .dynsym) are kept
// compactly on the heap: one sorted address slice, sizes, and offsets into a
// single name blob (16 bytes per symbol plus its name). A Go pclntab and
// DWARF line info are read in place from a read-only mapping of the file, so
// they cost page cache, not heap, and only the pages lookups touch count
// toward RSS.
//
// A SymbolTable is safe for concurrent lookups. Its file mapping is released
// when the table becomes unreachable.
type SymbolTable struct {
	Segments
	// textVaddr is the lowest ELF address of the executable segments (0
	// with none): where the kernel's ELF loader puts start_code.
	textVaddr uint64
	// textOff is the file offset at textVaddr, noTextOff when the
	// executable segments lie at different distances from their file
	// offsets (or there are none): see TextOffset.
	textOff uint64

	addrs    []uint64 // sorted symbol start addresses
	sizes    []uint32 // 0: size unknown, the symbol extends to the next one (endAtSection)
	nameOffs []uint32 // len(addrs)+1 offsets into names; with namesInImage, len(addrs) offsets of NUL-terminated names in data
	names    string
	// pltAddrs are the symbols that are PLT entries (sorted), named after
	// the function they jump to plus "@plt" (pltSymbols).
	pltAddrs []uint64
	// namesInImage: the names stay in the file's string tables (read through
	// data at lookup) instead of a heap copy. Large C++ binaries carry tens of
	// MB of mangled names; the agent should not hold them in its heap.
	namesInImage bool

	gopc  *goPCLN     // nil when the file has no Go pclntab
	lines *dwarfLines // nil when the file has no DWARF line info

	// amd64: the file is x86-64, where a call pushes the return address
	// (what leaf-caller recovery relies on).
	amd64 bool
	// ehFrame is .eh_frame in the file mapping and ehAddr its address;
	// the index over it is built on first use (leaf-caller recovery only).
	ehFrame []byte
	ehAddr  uint64
	ehOnce  sync.Once
	eh      *ehframe.Table
	ehBytes atomic.Int64 // heap of eh once built, for Size
	// textLo and textHi bound .text: a function's cold part is there
	// (the compiler's .text.unlikely goes into it), never in .plt.
	textLo, textHi uint64

	// debugFile is the separate debug file whose symbols were merged in
	// ("" when none was used).
	debugFile string

	mapped int    // bytes of file mapping (not heap)
	data   []byte // the file mapping the Go and DWARF readers refer into; nil when released at load

	// serial tells tables apart in the Symbolizer's memo.
	serial uint64
	// contentKey is the build the table was read from (buildid.FileKey), ""
	// when the file carries no build ID or was opened by path.
	contentKey string
}

// OpenSymbolTable reads the symbol table of the ELF file at path.
func OpenSymbolTable(path string) (*SymbolTable, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open symbol table: %w", err)
	}
	defer f.Close()
	t, err := newSymbolTable(f, "")
	if err != nil {
		return nil, fmt.Errorf("symbol table of %s: %w", path, err)
	}
	return t, nil
}

// ContentKey is the build the table was read from (buildid.FileKey: its
// GNU or Go build ID and the file's size). Files of one content key share
// one table (and the receiver's unwinder one unwind table). "" when the
// file has no build ID.
func (t *SymbolTable) ContentKey() string { return t.contentKey }

// newSymbolTable maps f read-only and parses it. The mapping stays valid
// after f is closed, which is what lets a table outlive its process.
// fetched is a separate debug file to use when DebugDir has none ("": no
// other; see DebugFiles).
func newSymbolTable(f *os.File, fetched string) (*SymbolTable, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	size := fi.Size()
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("cannot map file of size %d", size)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	t, err := parseSymbolTable(data, fetched)
	if err != nil {
		_ = syscall.Munmap(data)
		return nil, err
	}
	t.mapped = len(data)
	if t.gopc == nil && t.lines == nil && !t.namesInImage && t.ehFrame == nil {
		// Nothing refers into the mapping any more: give it back now.
		_ = syscall.Munmap(data)
		t.mapped = 0
	} else {
		t.data = data
		runtime.AddCleanup(t, func(b []byte) { _ = syscall.Munmap(b) }, data)
	}
	return t, nil
}

// Trim drops the table's file pages from this process's page tables. They
// stay in the page cache and fault back in on the next lookup, so a large
// binary's pclntab or DWARF lines cost the agent's RSS only while an
// interval is being symbolized, not between intervals.
func (t *SymbolTable) Trim() {
	if t.data != nil {
		_ = syscall.Madvise(t.data, syscall.MADV_DONTNEED)
	}
}

// parseSymbolTable builds a table from an ELF image. The Go pclntab and
// DWARF readers, if any, keep referring to data; symbols are copied.
func parseSymbolTable(data []byte, fetched string) (t *SymbolTable, err error) {
	// debug/elf and the manual section reads below index into a file mapping:
	// a truncated or malformed file must give an error, not crash the agent.
	if gerr := faultGuard(func() { t, err = parseImage(data, fetched) }); gerr != nil {
		return nil, fmt.Errorf("malformed ELF: %v", gerr)
	}
	if t != nil {
		t.serial = tableSerials.Add(1)
	}
	return t, err
}

func parseImage(data []byte, fetched string) (t *SymbolTable, err error) {
	ef, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("parse ELF: %w", err)
	}
	t = &SymbolTable{Segments: NewSegments(ef.Progs)}
	for i, l := range t.exec() {
		if i == 0 || l.vaddr < t.textVaddr {
			t.textVaddr = l.vaddr
		}
	}
	t.textOff = textOffset(t.exec(), t.textVaddr)

	syms := &symbolCollector{ef: ef, data: data}
	if sec := pclntabSection(ef); sec != nil && sec.Type != elf.SHT_NOBITS && sec.Offset+sec.Size <= uint64(len(data)) {
		runtimeText := syms.find(elf.SHT_SYMTAB, "runtime.text").value
		g, err := parseGoPCLN(data[sec.Offset:sec.Offset+sec.Size], runtimeText)
		if err == nil {
			text, gofunc, ok := g.moduledata(ef, data, sec.Addr)
			if runtimeText == 0 && g.version >= 118 {
				if ok {
					g.textStart = text
				} else if ts := ef.Section(".text"); ts != nil && g.textStart == 0 {
					// .text starts with runtime.text when Go linked the
					// binary itself.
					g.textStart = ts.Addr
				}
			}
			if gofunc != 0 {
				g.gofunc = t.image(data, gofunc)
			}
			t.gopc = g
			// The pclntab has Go functions' names plus lines: skip their
			// ELF symbols.
			syms.skipLo, syms.skipHi = g.Range()
		}
	}
	syms.collect()
	copyNames := false
	if !hasSection(ef, elf.SHT_SYMTAB) {
		// Stripped (every distribution library): local functions such as
		// glibc's msort_with_tmp are only in the separate debug file.
		if dbg := openDebugFile(ef, fetched); dbg != nil {
			defer dbg.close()
			if more, ok := dbg.symbols(syms.skipLo, syms.skipHi); ok {
				syms.syms = append(syms.syms, more...)
				t.debugFile = dbg.path
				copyNames = true // names point into two files; the debug one is unmapped below
			}
		}
	}
	syms.syms = append(syms.syms, syms.pltSymbols()...)
	t.buildSymbols(data, syms.syms, copyNames)
	t.endAtSection(ef)
	t.lines = newDwarfLines(ef, data)
	t.amd64 = ef.Machine == elf.EM_X86_64
	if sec := ef.Section(".eh_frame"); t.amd64 && sec != nil && sec.Type != elf.SHT_NOBITS && sec.Offset+sec.Size <= uint64(len(data)) {
		t.ehFrame, t.ehAddr = data[sec.Offset:sec.Offset+sec.Size], sec.Addr
	}
	if sec := ef.Section(".text"); sec != nil {
		t.textLo, t.textHi = sec.Addr, sec.Addr+sec.Size
	}
	return t, nil
}

// image returns the file bytes from virtual address vaddr to the end of
// its PT_LOAD segment, or nil.
func (t *SymbolTable) image(data []byte, vaddr uint64) []byte {
	for _, l := range t.loads {
		if vaddr >= l.vaddr && vaddr-l.vaddr < l.filesz {
			off := vaddr - l.vaddr + l.off
			if end := l.off + l.filesz; end <= uint64(len(data)) {
				return data[off:end]
			}
		}
	}
	return nil
}

func pclntabSection(ef *elf.File) *elf.Section {
	if s := ef.Section(".gopclntab"); s != nil {
		return s
	}
	return ef.Section(".data.rel.ro.gopclntab") // PIE with external linking
}

type rawSymbol struct {
	addr, size uint64
	name       []byte // points into the file image until buildSymbols copies it
	rank       uint8  // higher wins among symbols at one address
	plt        bool   // a PLT entry, named after its target (pltSymbols)
}

type symbolCollector struct {
	ef             *elf.File
	data           []byte
	syms           []rawSymbol
	skipLo, skipHi uint64 // addresses covered by the Go pclntab
}

// symRecord is one ElfN_Sym record. Its name is read only for the records
// that are kept: the collector's own binary has 336 k symbol records and
// 22 MB of names, most of them Go functions (named by the pclntab instead),
// and each name read is a cache miss somewhere in those 22 MB.
type symRecord struct {
	strs        []byte // the string table of the record's section
	nameOff     uint32 // < len(strs)
	info        uint8
	shndx       uint16
	value, size uint64
}

// name is the record's name (nil if it has no end); it aliases the image.
func (r symRecord) name() []byte { return cBytes(r.strs, r.nameOff) }

// nameIs reports whether the record's name is s.
func (r symRecord) nameIs(s string) bool {
	end := uint64(r.nameOff) + uint64(len(s))
	return end < uint64(len(r.strs)) && string(r.strs[r.nameOff:end]) == s && r.strs[end] == 0
}

// each decodes the ElfN_Sym records of the first section of type typ
// straight from the image rather than via elf.File.Symbols, which allocates
// a struct and a string per symbol (hundreds of MB of garbage for a large
// C++ binary). Records without a value or a name in the string table are
// skipped; fn returns false to stop.
func (c *symbolCollector) each(typ elf.SectionType, fn func(symRecord) bool) {
	symData, strData, entSize, ok := c.symbolSection(typ)
	if !ok {
		return
	}
	for off := entSize; off+entSize <= len(symData); off += entSize { // entry 0 is the null symbol
		nameOff, info, shndx, value, size := c.symbol(symData[off : off+entSize])
		if value != 0 && uint64(nameOff) < uint64(len(strData)) {
			if !fn(symRecord{strs: strData, nameOff: nameOff, info: info, shndx: shndx, value: value, size: size}) {
				return
			}
		}
	}
}

// find returns the first record of the first section of type typ named
// name (a zero record if there is none). The Go linker writes runtime.text,
// the one name looked up this way, among the first symbols.
func (c *symbolCollector) find(typ elf.SectionType, name string) (found symRecord) {
	c.each(typ, func(r symRecord) bool {
		if r.nameIs(name) {
			found = r
			return false
		}
		return true
	})
	return found
}

// symbolSection returns the ElfN_Sym records of the first section of type
// typ, the string table their names are in, and the size of a record; ok
// is false when there is no such section or it lies outside the image.
func (c *symbolCollector) symbolSection(typ elf.SectionType) (syms, strs []byte, entSize int, ok bool) {
	var sec *elf.Section
	for _, s := range c.ef.Sections {
		if s.Type == typ {
			sec = s
			break
		}
	}
	if sec == nil || sec.Link >= uint32(len(c.ef.Sections)) {
		return nil, nil, 0, false
	}
	str := c.ef.Sections[sec.Link]
	if sec.Offset+sec.Size > uint64(len(c.data)) || str.Offset+str.Size > uint64(len(c.data)) {
		return nil, nil, 0, false
	}
	entSize = 16
	if c.ef.Class == elf.ELFCLASS64 {
		entSize = 24
	}
	return c.data[sec.Offset : sec.Offset+sec.Size], c.data[str.Offset : str.Offset+str.Size], entSize, true
}

// symbol decodes one ElfN_Sym record.
func (c *symbolCollector) symbol(e []byte) (nameOff uint32, info uint8, shndx uint16, value, size uint64) {
	order := c.ef.ByteOrder
	if c.ef.Class == elf.ELFCLASS64 {
		return order.Uint32(e), e[4], order.Uint16(e[6:]), order.Uint64(e[8:]), order.Uint64(e[16:])
	}
	return order.Uint32(e), e[12], order.Uint16(e[14:]), uint64(order.Uint32(e[4:])), uint64(order.Uint32(e[8:]))
}

// collect keeps the function symbols of the .symtab and .dynsym sections.
// A counting pass sizes the slice: growing it by appends would leave
// several times its size as garbage for big binaries. It counts what the
// records alone say may be kept, without reading names (an upper bound).
func (c *symbolCollector) collect() {
	n := 0
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		c.each(typ, func(rec symRecord) bool {
			if c.rankByRecord(rec) > 0 {
				n++
			}
			return true
		})
	}
	c.syms = make([]rawSymbol, 0, n)
	for i, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		c.each(typ, func(rec symRecord) bool {
			r := c.rankByRecord(rec)
			if r == 0 {
				return true
			}
			name := rec.name()
			if len(name) == 0 || elf.ST_TYPE(rec.info) == elf.STT_NOTYPE && (name[0] == '.' || name[0] == '$') {
				// Assembly routines often lack .type and are kept, but not
				// local labels.
				return true
			}
			if i == 0 {
				r += 4 // .symtab over .dynsym: same name, but keeps local symbols
			}
			c.syms = append(c.syms, rawSymbol{addr: rec.value, size: rec.size, name: trimVersion(name), rank: r})
			return true
		})
	}
}

// rankByRecord is 0 for symbols that are not functions, else higher for
// the preferred name among symbols at one address: global over weak over
// local. It does not read the name, which collect checks for the symbols
// it keeps.
func (c *symbolCollector) rankByRecord(r symRecord) uint8 {
	if r.value >= c.skipLo && r.value < c.skipHi || r.shndx == uint16(elf.SHN_UNDEF) {
		return 0
	}
	switch elf.ST_TYPE(r.info) {
	case elf.STT_FUNC, elf.STT_GNU_IFUNC:
	case elf.STT_NOTYPE:
		// Only in executable code.
		if !c.inExecSection(r.shndx) {
			return 0
		}
	default:
		return 0
	}
	switch elf.ST_BIND(r.info) {
	case elf.STB_GLOBAL:
		return 3
	case elf.STB_WEAK:
		return 2
	case elf.STB_LOCAL:
		return 1
	}
	return 0
}

func (c *symbolCollector) inExecSection(shndx uint16) bool {
	if int(shndx) >= len(c.ef.Sections) || shndx == 0 {
		return false
	}
	return c.ef.Sections[shndx].Flags&elf.SHF_EXECINSTR != 0
}

func cBytes(b []byte, off uint32) []byte {
	if uint64(off) >= uint64(len(b)) {
		return nil
	}
	b = b[off:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return nil
}

// buildSymbols sorts, de-duplicates and packs raw symbols.
func (t *SymbolTable) buildSymbols(data []byte, raw []rawSymbol, copyNames bool) {
	slices.SortFunc(raw, func(a, b rawSymbol) int {
		if a.addr != b.addr {
			if a.addr < b.addr {
				return -1
			}
			return 1
		}
		return compareAtAddress(a, b)
	})
	raw = slices.CompactFunc(raw, func(a, b rawSymbol) bool { return a.addr == b.addr })
	t.pltAddrs = nil
	for _, s := range raw {
		if s.plt {
			t.pltAddrs = append(t.pltAddrs, s.addr)
		}
	}
	n := 0
	for _, s := range raw {
		n += len(s.name)
	}
	t.addrs = make([]uint64, len(raw))
	t.sizes = make([]uint32, len(raw))
	for i, s := range raw {
		t.addrs[i] = s.addr
		if s.size <= 1<<32-1 {
			t.sizes[i] = uint32(s.size)
		}
	}
	if n >= namesInImageBytes && len(data) <= 1<<32-1 && !copyNames {
		// Point at the names where they are: 4 bytes a symbol of heap.
		t.namesInImage, t.data = true, data
		t.nameOffs = make([]uint32, len(raw))
		base := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
		for i, s := range raw {
			t.nameOffs[i] = uint32(uintptr(unsafe.Pointer(unsafe.SliceData(s.name))) - base)
		}
		return
	}
	var sb strings.Builder
	sb.Grow(n)
	t.nameOffs = make([]uint32, len(raw)+1)
	for i, s := range raw {
		t.nameOffs[i] = uint32(sb.Len())
		sb.Write(s.name)
	}
	t.nameOffs[len(raw)] = uint32(sb.Len())
	t.names = sb.String()
}

// endAtSection gives each symbol of unknown size the end of its executable
// section as its limit: it still extends to the next symbol, but not past
// its section. Otherwise _init (in .init, no size) named every PLT entry
// that follows it, and the last function of .text named .fini.
func (t *SymbolTable) endAtSection(ef *elf.File) {
	var secs [][2]uint64
	for _, s := range ef.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Flags&elf.SHF_EXECINSTR != 0 && s.Size > 0 {
			secs = append(secs, [2]uint64{s.Addr, s.Addr + s.Size})
		}
	}
	for i, addr := range t.addrs {
		if t.sizes[i] != 0 {
			continue
		}
		for _, r := range secs {
			if addr >= r[0] && addr < r[1] && r[1]-addr <= 1<<32-1 {
				t.sizes[i] = uint32(r[1] - addr)
				break
			}
		}
	}
}

// compareAtAddress orders two symbols at one address, the one whose name
// the table keeps first: a symbol of the file before a PLT entry made up
// for it, then a sized symbol, then the better rank (symtab over dynsym,
// global over weak over local), then the plainer of aliases ("getpid",
// "__getpid"), deterministically.
func compareAtAddress(a, b rawSymbol) int {
	if a.plt != b.plt {
		if b.plt {
			return -1
		}
		return 1
	}
	if (a.size > 0) != (b.size > 0) {
		if a.size > 0 {
			return -1
		}
		return 1
	}
	if a.rank != b.rank {
		return int(b.rank) - int(a.rank)
	}
	if ua, ub := leadingUnderscores(a.name), leadingUnderscores(b.name); ua != ub {
		return ua - ub
	}
	return bytes.Compare(a.name, b.name)
}

// namesInImageBytes is the size of symbol names above which a table reads
// them from the file mapping rather than copying them (libc's 60 KB are
// copied; a large C++ binary's tens of MB are not). A variable for tests.
var namesInImageBytes = 1 << 20

// name is the i-th symbol's name. From the file mapping it is read under
// the same fault guard as the Go pclntab (a file truncated under us).
func (t *SymbolTable) name(i int) (name string) {
	if !t.namesInImage {
		return t.names[t.nameOffs[i]:t.nameOffs[i+1]]
	}
	if t.guard(func() { name = string(trimVersion(cBytes(t.data, t.nameOffs[i]))) }) != nil {
		return ""
	}
	return name
}

// isPLT reports whether the i-th symbol is a PLT entry (named after its
// target, to which "@plt" is added once demangled).
func (t *SymbolTable) isPLT(i int) bool {
	_, ok := slices.BinarySearch(t.pltAddrs, t.addrs[i])
	return ok
}

// trimVersion drops a symbol version ("__libc_start_main@@GLIBC_2.34"
// in a .symtab): the function's name is the part before it.
func trimVersion(name []byte) []byte {
	if i := bytes.IndexByte(name, '@'); i > 0 {
		return name[:i]
	}
	return name
}

func leadingUnderscores(b []byte) int {
	n := 0
	for n < len(b) && b[n] == '_' {
		n++
	}
	return n
}

// TextVaddr is the lowest ELF address of the binary's executable segments.
func (t *SymbolTable) TextVaddr() uint64 { return t.textVaddr }

// noTextOff marks a SymbolTable without one text offset.
const noTextOff = ^uint64(0)

// TextOffset is the file offset at TextVaddr, when every executable segment
// lies at the same distance from its file offsets, so that any offset a
// mapping of the binary's code starts at turns into its ELF address the
// same way: o - TextOffset + TextVaddr (the kernel's unwinder does this for
// a mapping it finds itself). false when they do not, or there is none.
func (t *SymbolTable) TextOffset() (uint64, bool) {
	return t.textOff, t.textOff != noTextOff
}

// textOffset is TextOffset of exec, the executable segments, whose lowest
// address is vaddr.
func textOffset(exec []loadSegment, vaddr uint64) uint64 {
	off := noTextOff
	for _, l := range exec {
		if l.vaddr == vaddr {
			off = l.off
		}
	}
	for _, l := range exec {
		if off == noTextOff || l.vaddr-l.off != vaddr-off {
			return noTextOff
		}
	}
	return off
}

// Lookup resolves an ELF virtual address (as nm prints it) to the innermost
// function there (for Go code inlined at addr, the inlined function; see
// LookupInline for the whole chain).
func (t *SymbolTable) Lookup(addr uint64) (Symbol, bool) {
	var buf [4]Symbol
	syms := t.LookupInline(addr, buf[:0])
	if len(syms) == 0 {
		return Symbol{}, false
	}
	return syms[0], true
}

// LookupInline appends what addr resolves to, innermost first: functions
// the compiler inlined at addr (from the Go pclntab, or for native code
// from DWARF when the file carries it), then the function containing it. The Go pclntab wins inside Go text; elsewhere
// the nearest function symbol below addr that contains it (symbols of
// unknown size extend to the next symbol). Nothing is appended when addr
// does not resolve. Code that no symbol covers but that a named function
// split off (its cold part, see coldPart) is that function's, named
// function.cold as GCC names it.
func (t *SymbolTable) LookupInline(addr uint64, out []Symbol) []Symbol {
	if t.gopc != nil {
		if lo, hi := t.gopc.Range(); addr >= lo && addr < hi {
			out = t.lookupGo(addr, out)
			runtime.KeepAlive(t) // the mapping must outlive the read
			return out
		}
	}
	if sym, ok := t.lookupELF(addr); ok {
		out = t.appendInlined(addr, sym, out)
	} else if sym, ok := t.coldPart(addr); ok {
		out = append(out, sym)
	}
	return out
}

// coldPart names addr when no symbol does, it is in .text (a function's
// parts are; the linker's .plt, with unwind entries of its own, is not),
// and its unwind entry describes the split-off part of the function whose
// entry GCC emitted just before it (ehframe.Table.Fragment) and a symbol
// names: the symbol table of a stripped binary lists the function, never
// its .cold part, whose frames would otherwise be an address.
func (t *SymbolTable) coldPart(addr uint64) (sym Symbol, ok bool) {
	if addr < t.textLo || addr >= t.textHi {
		return Symbol{}, false
	}
	var parent uint64
	if t.guard(func() {
		if eh := t.ehTable(); eh != nil {
			parent, ok, _ = eh.Fragment(addr)
		}
	}) != nil || !ok {
		return Symbol{}, false
	}
	i, found := slices.BinarySearch(t.addrs, parent)
	if !found {
		return Symbol{}, false // the part before it is no named function's entry
	}
	if sym, ok = t.lookupELF(parent); !ok || t.isPLT(i) {
		return Symbol{}, false
	}
	sym.Function += ".cold"
	sym.File, sym.Line = "", 0
	if t.lines != nil {
		sym.File, sym.Line = t.lineOf(addr)
	}
	return sym, true
}

func (t *SymbolTable) lookupELF(addr uint64) (sym Symbol, ok bool) {
	i, found := slices.BinarySearch(t.addrs, addr)
	if !found {
		i--
	}
	if i < 0 {
		return Symbol{}, false
	}
	if size := t.sizes[i]; size > 0 && addr-t.addrs[i] >= uint64(size) {
		return Symbol{}, false
	}
	if sym.Function = t.name(i); sym.Function == "" {
		return Symbol{}, false
	}
	sym.Function = demangled(sym.Function)
	if t.isPLT(i) {
		sym.Function += "@plt"
	}
	if t.lines != nil {
		sym.File, sym.Line = t.lineOf(addr)
	}
	return sym, true
}

// demangled is name as its language writes it, without parameters, as a
// profile names a function: C++ names (_Z), Rust's legacy ones (_ZN…17h<hash>E,
// see rustLegacy), and Rust's v0 names (_R), which parts of the standard
// library a current rustc links in carry (core::str::pattern's searchers,
// core::slice::memchr). Anything else, or a name that does not demangle, is
// returned as it is.
func demangled(name string) string {
	if n, ok := rustLegacy(name); ok {
		return n
	}
	if strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R") {
		return demangle.Filter(name, demangle.NoParams)
	}
	return name
}

// appendInlined appends the functions DWARF says were inlined at addr,
// innermost first, then sym (the function the symbol table names there),
// its line being where it calls the outermost of them. With no DWARF, or
// nothing inlined at addr, that is sym alone. Guarded like lookupGo.
func (t *SymbolTable) appendInlined(addr uint64, sym Symbol, out []Symbol) []Symbol {
	if t.lines == nil {
		return append(out, sym)
	}
	var chain []inlinedFrame
	if t.guard(func() { chain = t.lines.inlined(addr) }) != nil || len(chain) == 0 {
		return append(out, sym)
	}
	last := len(chain) - 1
	for _, f := range chain[:last] {
		out = append(out, Symbol{Function: f.function, File: f.file, Line: f.line})
	}
	sym.File, sym.Line = chain[last].file, chain[last].line
	return append(out, sym)
}

// lineOf reads DWARF from the file mapping, guarded like lookupGo.
func (t *SymbolTable) lineOf(addr uint64) (file string, line int) {
	if t.guard(func() { file, line = t.lines.line(addr) }) != nil {
		return "", 0
	}
	return file, line
}

// lookupGo reads the file mapping; a file truncated under us faults, and the
// fault becomes "unresolved" instead of killing the process.
func (t *SymbolTable) lookupGo(addr uint64, out []Symbol) (res []Symbol) {
	if t.guard(func() { res = t.gopc.lookup(addr, out) }) != nil {
		return out
	}
	return res
}

// Size is the table's heap footprint in bytes (the Go pclntab mapping is
// reported separately by MappedBytes).
func (t *SymbolTable) Size() int {
	n := len(t.addrs)*8 + len(t.sizes)*4 + len(t.nameOffs)*4 + len(t.names) + len(t.loads)*24 + len(t.pltAddrs)*8 + 200
	if t.lines != nil {
		n += t.lines.size()
	}
	return n + int(t.ehBytes.Load())
}

// MappedBytes is the size of the read-only file mapping the table keeps for
// its Go pclntab or DWARF line info (0 when it has neither). Only touched
// pages are resident.
func (t *SymbolTable) MappedBytes() int { return t.mapped }

// Symbols is the number of ELF function symbols held (Go functions read from
// the pclntab are not counted).
func (t *SymbolTable) Symbols() int { return len(t.addrs) }

// HasGo reports whether the table has a Go pclntab.
func (t *SymbolTable) HasGo() bool { return t.gopc != nil }

// ReturnAddressAtSP reports whether, with the PC at addr (an ELF virtual
// address), the function's return address is still the word at the stack
// pointer: at its entry, before it sets up a frame, or anywhere in a leaf
// that never does. Then the frame-pointer chain skips its caller. Go code
// answers from the pclntab SP delta (0), native code from the .eh_frame CFA
// rule (rsp+8). known is false when the file has neither for addr, or is
// not x86-64.
func (t *SymbolTable) ReturnAddressAtSP(addr uint64) (atSP, known bool) {
	if !t.amd64 {
		return false, false
	}
	// A file truncated under us faults; that is "unknown", not a crash.
	if t.guard(func() { atSP, known = t.returnAddressAtSP(addr) }) != nil {
		return false, false
	}
	return atSP, known
}

func (t *SymbolTable) returnAddressAtSP(addr uint64) (atSP, known bool) {
	if t.gopc != nil {
		if lo, hi := t.gopc.Range(); addr >= lo && addr < hi {
			d, ok := t.gopc.spDelta(addr)
			return ok && d == 0, ok
		}
	}
	eh := t.ehTable()
	if eh == nil {
		return false, false
	}
	rule, ok, err := eh.CFA(addr)
	if err != nil || !ok {
		return false, false
	}
	return !rule.Expr && rule.Register == ehframe.RegRSP && rule.Offset == 8, true
}

// ehTable is the index over the file's .eh_frame, built on first use (its
// heap then counts in Size); nil when the file has none, or a malformed one.
func (t *SymbolTable) ehTable() *ehframe.Table {
	if t.ehFrame == nil {
		return nil
	}
	t.ehOnce.Do(func() {
		if eh, err := ehframe.New(t.ehFrame, t.ehAddr); err == nil {
			t.eh = eh
			t.ehBytes.Store(int64(eh.Size()))
		}
	})
	return t.eh
}

// FunctionStart returns the ELF address where the function holding addr
// begins, from the function's unwind entry (its .eh_frame FDE), for
// addresses no symbol names: a stripped binary's static functions keep
// their unwind entries. ok is false when the file has no .eh_frame (or is
// not x86-64) or no entry covers addr.
func (t *SymbolTable) FunctionStart(addr uint64) (start uint64, ok bool) {
	// .eh_frame is read in place: a file truncated under us faults, and
	// that is "not found", not a crash.
	if t.guard(func() {
		if eh := t.ehTable(); eh != nil {
			start, ok = eh.FunctionStart(addr)
		}
	}) != nil {
		return 0, false
	}
	return start, ok
}

// DebugFile is the separate debug file (/usr/lib/debug/.build-id/…) whose
// symbols the table holds, or "".
func (t *SymbolTable) DebugFile() string { return t.debugFile }

// UnwindTable compiles the file's .eh_frame into the rows the in-kernel
// unwinder uses (see internal/unwindtable). It is built fresh on each call
// and not kept: once loaded into the kernel the rows are not needed here.
func (t *SymbolTable) UnwindTable() (ut *unwindtable.Table, err error) {
	if !t.amd64 {
		return nil, errors.New("unwind table: only x86-64 binaries are supported")
	}
	if t.ehFrame == nil {
		return nil, unwindtable.ErrNoUnwindInfo
	}
	// A file truncated under us faults: an error, not a crash.
	if gerr := t.guard(func() { ut, err = unwindtable.Build(t.ehFrame, t.ehAddr) }); gerr != nil {
		return nil, fmt.Errorf("unwind table: malformed or truncated file: %v", gerr)
	}
	return ut, err
}

// faultGuard runs fn, which reads a file mapping, and turns a fault (the
// file was truncated under us) or a panic of a reader given a malformed
// image into an error instead of a crash of the agent.
func faultGuard(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	fn()
	return nil
}

// guard is faultGuard for reads of t's mapping, which must stay mapped
// (t alive) until fn returns.
func (t *SymbolTable) guard(fn func()) error {
	err := faultGuard(fn)
	runtime.KeepAlive(t)
	return err
}
