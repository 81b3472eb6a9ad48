package hotspot

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CodeCache names the code a running HotSpot JVM generated (its
// JIT-compiled methods, the interpreter, its stubs) from the JVM's own
// memory, read through /proc/PID/mem: nothing is asked of the JVM, no
// signal is sent and nothing is written. It is what `jcmd PID
// Compiler.perfmap` would write, for the code as it is now.
//
// HotSpot describes its own structures for debuggers and the
// serviceability agent: libjvm.so exports gHotSpotVMStructs (each field's
// type, name, and offset or static address) and gHotSpotVMTypes (each
// type's size), filled in as the JVM starts. From them the code cache's
// heaps are found (CodeCache::_heaps), a code address is walked back to
// the start of its block through the heap's segment map (one byte per
// segment: 0 at a block's first segment, else how many segments to go
// back; 0xFF free), and the block's CodeBlob gives its name. A compiled
// method ("nmethod") is named as HotSpot names it in its perf map, from its
// Method: `long Hot.mix(long)`, the return type, the class, the method and
// its parameter types. Every read is bounded and checked (the address must
// lie in the blob found), so code freed and reused since the sample gives
// no name rather than a wrong one, and a JVM whose layout is not the one
// described gives an error, never a guess.
type CodeCache struct {
	reader
	mem  *os.File
	l    layout
	heap []codeHeap
	// interpLow, interpHigh: the template interpreter's code.
	interpLow, interpHigh uint64
	// methods: names (and source lines) by Method*, which lives as long
	// as its class: a method compiled again (another tier, after a
	// deoptimization) keeps them without reading them again. Bounded by
	// maxMethodNames.
	methods map[uint64]*javaMethod
	// scopeCache: each nmethod's inlining (by address, checked against
	// its compile id), scopeBytes their size, taken from budget.
	scopeCache map[uint64]*nmethodScopes
	scopeBytes int
	budget     *ScopeBudget
}

// maxMethodNames bounds CodeCache.methods; past it the names are read
// again as they come.
const maxMethodNames = 1 << 10

// codeHeap is one of the code cache's heaps (JDK 9+ segments them:
// non-profiled, profiled and non-method code).
type codeHeap struct {
	low, high    uint64 // reserved code memory
	segmap       uint64 // the segment map's first byte
	segmentShift uint
}

// layout is where the fields CodeCache reads sit, from the JVM's own
// description (gHotSpotVMStructs, gHotSpotVMTypes).
type layout struct {
	heaps                                   uint64 // address of CodeCache::_heaps (a GrowableArray<CodeHeap*>*)
	arrayLen, arrayData                     uint64
	heapMemory, heapSegmap, heapLog2Segment uint64
	spaceLow, spaceHigh                     uint64 // VirtualSpace::_low_boundary, _high_boundary
	heapBlockSize                           uint64
	blobName, blobSize                      uint64
	nmethodMethod                           uint64
	methodConstMethod                       uint64
	constMethodConstants, constMethodName   uint64
	constMethodSignature                    uint64
	poolSize, poolHolder                    uint64
	klassName                               uint64
	symbolLength, symbolBody                uint64
	scopes                                  scopeLayout
	lines                                   lineLayout
	frames                                  frameLayout
	blobHeader                              int // bytes read of a blob: past every field used
}

// Bounds on what is read from the JVM.
const (
	maxVMEntries   = 1 << 14 // entries of gHotSpotVMStructs/Types (JDK 17: about 2,600 / 900)
	maxVMStride    = 256
	maxCodeHeaps   = 8
	maxBlobHeader  = 4096
	maxSegmapHops  = 256 // each hop goes back up to 254 segments: a block of 4 MB at 64-byte segments
	maxNameBytes   = 256
	maxSymbolBytes = 1 << 12
)

// Mapping is an executable mapping of libjvm.so in the JVM's memory.
type Mapping struct {
	Start, Limit uint64 // runtime address range [Start, Limit)
	Offset       uint64 // file offset mapped at Start
	Path         string // as the process sees it
}

// OpenCodeCache reads the layout of the JVM pid (as procRoot shows it)
// whose libjvm.so is mapped at libjvm. It fails on a JVM that has not
// filled its description in yet (ErrNotReady: one in its first
// milliseconds); call it again later. The scopes of the compiled methods
// it keeps between lookups are bounded by budget, which CodeCaches share.
func OpenCodeCache(procRoot string, pid int, libjvm Mapping, budget *ScopeBudget) (*CodeCache, error) {
	proc := filepath.Join(procRoot, strconv.Itoa(pid))
	// The mapped file itself, even when its path was replaced (a JDK
	// upgraded under a running JVM) or lies in a container's root.
	file := filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", libjvm.Start, libjvm.Limit))
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(proc, "root", libjvm.Path)
	}
	syms, bias, err := jvmSymbols(file, libjvm.Start, libjvm.Offset)
	if err != nil {
		return nil, err
	}
	mem, err := os.Open(filepath.Join(proc, "mem"))
	if err != nil {
		return nil, fmt.Errorf("open the JVM's memory: %w", err)
	}
	c := &CodeCache{reader: reader{fileMemory{mem}}, mem: mem, methods: map[uint64]*javaMethod{}, scopeCache: map[uint64]*nmethodScopes{}, budget: budget}
	if c.l, err = readLayout(reader{&pagedMemory{mem: mem, pages: map[uint64][]byte{}}}, syms, bias); err != nil {
		mem.Close()
		return nil, err
	}
	if err := c.readHeaps(); err != nil {
		mem.Close()
		return nil, err
	}
	if err := c.readInterpreter(); err != nil {
		mem.Close()
		return nil, err
	}
	return c, nil
}

// Close releases the JVM's memory file and the scopes it kept.
func (c *CodeCache) Close() error {
	c.dropScopes()
	return c.mem.Close()
}

// jvmSymbols reads the addresses (file virtual addresses) of the symbols
// HotSpot describes itself with from libjvm.so's dynamic symbol table, and
// the load bias of the mapping at start (file offset offset).
func jvmSymbols(path string, start, offset uint64) (map[string]uint64, uint64, error) {
	ef, err := elf.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("libjvm.so: %w", err)
	}
	defer ef.Close()
	bias, ok := uint64(0), false
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Off <= offset && offset < p.Off+p.Filesz {
			bias, ok = start-(p.Vaddr+(offset-p.Off)), true
			break
		}
	}
	if !ok {
		return nil, 0, fmt.Errorf("libjvm.so: no loadable segment at file offset %#x", offset)
	}
	dyn, err := ef.DynamicSymbols()
	if err != nil {
		return nil, 0, fmt.Errorf("libjvm.so: %w", err)
	}
	syms := map[string]uint64{}
	for _, s := range dyn {
		if strings.HasPrefix(s.Name, "gHotSpotVM") {
			syms[s.Name] = s.Value
		}
	}
	return syms, bias, nil
}

// errNotDescribed is a JVM without the description this reader needs.
var errNotDescribed = errors.New("HotSpot's description of its structures")

// ErrNotReady is a JVM still starting: its description or its code cache
// is not set up yet. Another try a little later may succeed.
var ErrNotReady = errors.New("the JVM is starting")

// readLayout reads gHotSpotVMStructs and gHotSpotVMTypes and picks the
// fields CodeCache uses.
func readLayout(r reader, syms map[string]uint64, bias uint64) (layout, error) {
	var l layout
	word := func(name string) (uint64, error) {
		a, ok := syms[name]
		if !ok {
			return 0, fmt.Errorf("%w: libjvm.so exports no %s", errNotDescribed, name)
		}
		return r.u64(a + bias)
	}
	var words [9]uint64
	names := [...]string{
		"gHotSpotVMStructs", "gHotSpotVMStructEntryArrayStride", "gHotSpotVMStructEntryTypeNameOffset",
		"gHotSpotVMStructEntryFieldNameOffset", "gHotSpotVMStructEntryOffsetOffset", "gHotSpotVMStructEntryAddressOffset",
		"gHotSpotVMTypes", "gHotSpotVMTypeEntryArrayStride", "gHotSpotVMTypeEntryTypeNameOffset",
	}
	for i, n := range names {
		v, err := word(n)
		if err != nil {
			return l, err
		}
		words[i] = v
	}
	typeSizeOff, err := word("gHotSpotVMTypeEntrySizeOffset")
	if err != nil {
		return l, err
	}
	if words[0] == 0 || words[6] == 0 {
		return l, fmt.Errorf("%w: its description of its structures is not filled in yet", ErrNotReady)
	}

	fields := map[string]uint64{} // "Type::_field" → offset, or static address
	err = r.entries(words[0], words[1], words[2], func(e []byte) error {
		if le(e, words[3]) == 0 {
			return nil // no field name: nothing to look up by
		}
		typeName, err := r.cstring(le(e, words[2]))
		if err != nil {
			return err
		}
		field, err := r.cstring(le(e, words[3]))
		if err != nil {
			return err
		}
		if v := le(e, words[5]); v != 0 {
			fields[typeName+"::"+field] = v
		} else {
			fields[typeName+"::"+field] = le(e, words[4])
		}
		return nil
	})
	if err != nil {
		return l, err
	}
	sizes := map[string]uint64{}
	err = r.entries(words[6], words[7], words[8], func(e []byte) error {
		typeName, err := r.cstring(le(e, words[8]))
		if err == nil {
			sizes[typeName] = le(e, typeSizeOff)
		}
		return err
	})
	if err != nil {
		return l, err
	}

	var missing []string
	field := func(names ...string) uint64 {
		for _, n := range names {
			if v, ok := fields[n]; ok {
				return v
			}
		}
		missing = append(missing, names[0])
		return 0
	}
	size := func(name string) uint64 {
		v, ok := sizes[name]
		if !ok {
			missing = append(missing, "sizeof("+name+")")
		}
		return v
	}
	l.heaps = field("CodeCache::_heaps")
	// JDK 16+ GrowableArrayBase; 9-15 GenericGrowableArray.
	l.arrayLen = field("GrowableArrayBase::_len", "GenericGrowableArray::_len")
	l.arrayData = field("GrowableArray<int>::_data")
	l.heapMemory = field("CodeHeap::_memory")
	l.heapSegmap = field("CodeHeap::_segmap")
	l.heapLog2Segment = field("CodeHeap::_log2_segment_size")
	l.spaceLow = field("VirtualSpace::_low_boundary")
	l.spaceHigh = field("VirtualSpace::_high_boundary")
	l.heapBlockSize = size("HeapBlock")
	l.blobName = field("CodeBlob::_name")
	l.blobSize = field("CodeBlob::_size")
	// JDK 17-22 call it CompiledMethod::_method, 23+ nmethod::_method.
	l.nmethodMethod = field("nmethod::_method", "CompiledMethod::_method")
	l.methodConstMethod = field("Method::_constMethod")
	l.constMethodConstants = field("ConstMethod::_constants")
	l.constMethodName = field("ConstMethod::_name_index")
	l.constMethodSignature = field("ConstMethod::_signature_index")
	l.poolSize = size("ConstantPool")
	l.poolHolder = field("ConstantPool::_pool_holder")
	l.klassName = field("Klass::_name")
	l.symbolLength = field("Symbol::_length")
	l.symbolBody = field("Symbol::_body")
	if len(missing) > 0 {
		return l, fmt.Errorf("%w lacks %s", errNotDescribed, strings.Join(missing, ", "))
	}
	var major uint32
	if a, ok := fields["Abstract_VM_Version::_vm_major_version"]; ok {
		v, err := r.u64(a)
		if err != nil {
			return l, err
		}
		major = uint32(v)
	}
	l.scopes = readScopeLayout(fields, sizes, major)
	l.lines = readLineLayout(fields, sizes)
	l.frames = readFrameLayout(fields)
	end := max(l.blobName, l.blobSize, l.nmethodMethod, l.scopes.headerEnd()) + 8
	if end > maxBlobHeader {
		return l, fmt.Errorf("%w: a CodeBlob field at offset %d", errNotDescribed, end)
	}
	l.blobHeader = int(end)
	return l, nil
}

// readHeaps reads where the code cache's heaps are.
func (c *CodeCache) readHeaps() error {
	l := &c.l
	array, err := c.u64(l.heaps)
	if err != nil {
		return err
	}
	if array == 0 {
		return fmt.Errorf("%w: its code cache is not set up yet", ErrNotReady)
	}
	n, err := c.u32(array + l.arrayLen)
	if err != nil {
		return err
	}
	data, err := c.u64(array + l.arrayData)
	if err != nil {
		return err
	}
	if n == 0 || data == 0 {
		return fmt.Errorf("%w: its code cache is not set up yet", ErrNotReady)
	}
	if n > maxCodeHeaps {
		return fmt.Errorf("the code cache has %d heaps, more than %d", n, maxCodeHeaps)
	}
	heaps := make([]codeHeap, 0, n)
	for i := range uint64(n) {
		h, err := c.u64(data + 8*i)
		if err != nil {
			return err
		}
		var ch codeHeap
		if ch.low, err = c.u64(h + l.heapMemory + l.spaceLow); err != nil {
			return err
		}
		if ch.high, err = c.u64(h + l.heapMemory + l.spaceHigh); err != nil {
			return err
		}
		if ch.segmap, err = c.u64(h + l.heapSegmap + l.spaceLow); err != nil {
			return err
		}
		shift, err := c.u32(h + l.heapLog2Segment)
		if err != nil {
			return err
		}
		if ch.low >= ch.high || shift < 4 || shift > 16 {
			return fmt.Errorf("code heap %d: implausible bounds [%#x, %#x) or segment shift %d", i, ch.low, ch.high, shift)
		}
		ch.segmentShift = uint(shift)
		heaps = append(heaps, ch)
	}
	c.heap = heaps
	return nil
}

// Frame is a frame of HotSpot's code: a compiled method (with its class's
// source file and the line at the address, where the JVM keeps them), or
// other code (the interpreter, a stub) by its name alone.
type Frame struct {
	Function string
	File     string // "HashMap.java"; "" when unknown
	Line     int    // 0 when unknown
}

// Frames returns the frames of the code at pc (an instruction address,
// not a return address), innermost first: for a compiled method, the
// methods the JIT inlined into it at pc, then the method itself (the name
// its perf map gives the code); for other code, its one name. in reports
// whether pc is in the code cache at all. A pc in the code cache whose
// blob cannot be read (freed since, or the process gone) gives an error.
func (c *CodeCache) Frames(pc uint64) (frames []Frame, in bool, err error) {
	var h *codeHeap
	for i := range c.heap {
		if c.heap[i].low <= pc && pc < c.heap[i].high {
			h = &c.heap[i]
			break
		}
	}
	if h == nil {
		return nil, false, nil
	}
	blob, err := c.blobStart(h, pc)
	if err != nil {
		return nil, true, err
	}
	hdr := make([]byte, c.l.blobHeader)
	if err := c.read(blob, hdr); err != nil {
		return nil, true, err
	}
	size := uint64(binary.LittleEndian.Uint32(hdr[c.l.blobSize:]))
	if pc < blob || pc-blob >= size {
		return nil, true, fmt.Errorf("code at %#x: not in the blob found at %#x (%d bytes)", pc, blob, size)
	}
	kind, err := c.cstring(le(hdr, c.l.blobName))
	if err != nil {
		return nil, true, err
	}
	if kind != "nmethod" && kind != "native nmethod" {
		return []Frame{{Function: kind}}, true, nil
	}
	method := le(hdr, c.l.nmethodMethod)
	chain := []scopeAt{{method: method, bci: noBCI}}
	if kind == "nmethod" {
		if chain, err = c.inlined(blob, hdr, pc, method); err != nil {
			return nil, true, err
		}
	}
	frames = make([]Frame, len(chain))
	for i, sc := range chain {
		m, err := c.method(sc.method)
		if err != nil {
			return nil, true, err
		}
		frames[i] = Frame{Function: m.name, File: m.file}
		if sc.bci != noBCI {
			frames[i].Line = m.line(sc.bci, c.l.scopes.exclusion)
		}
	}
	return frames, true, nil
}

// blobStart walks the segment map back from pc's segment to the start of
// its block, and returns the CodeBlob's address (after the block header).
func (c *CodeCache) blobStart(h *codeHeap, pc uint64) (uint64, error) {
	seg := (pc - h.low) >> h.segmentShift
	var window [64]byte
	winStart := uint64(1) // no window read yet (seg+1 is never a start)
	winEnd := uint64(0)
	for range maxSegmapHops {
		if seg < winStart || seg >= winEnd {
			winEnd = seg + 1
			winStart = winEnd - min(winEnd, uint64(len(window)))
			if err := c.read(h.segmap+winStart, window[:winEnd-winStart]); err != nil {
				return 0, err
			}
		}
		tag := window[seg-winStart]
		switch {
		case tag == 0:
			return h.low + seg<<h.segmentShift + c.l.heapBlockSize, nil
		case tag == 0xFF:
			return 0, fmt.Errorf("code at %#x: in a free block", pc)
		case uint64(tag) > seg:
			return 0, fmt.Errorf("code at %#x: segment map points before the heap", pc)
		}
		seg -= uint64(tag)
	}
	return 0, fmt.Errorf("code at %#x: segment map walk too long", pc)
}

// method reads a Method: its name as HotSpot's perf map writes it
// (Method::external_name: "long Hot.mix(long)"), its class's source file
// and its line number table.
func (c *CodeCache) method(method uint64) (*javaMethod, error) {
	if m, ok := c.methods[method]; ok {
		return m, nil
	}
	l := &c.l
	cm, err := c.u64(method + l.methodConstMethod)
	if err != nil {
		return nil, err
	}
	pool, err := c.u64(cm + l.constMethodConstants)
	if err != nil {
		return nil, err
	}
	var idx [2]uint16
	for i, off := range []uint64{l.constMethodName, l.constMethodSignature} {
		if idx[i], err = c.u16(cm + off); err != nil {
			return nil, err
		}
	}
	klass, err := c.u64(pool + l.poolHolder)
	if err != nil {
		return nil, err
	}
	klassSym, err := c.u64(klass + l.klassName)
	if err != nil {
		return nil, err
	}
	class, err := c.symbol(klassSym)
	if err != nil {
		return nil, err
	}
	var parts [2]string
	for i := range parts {
		if parts[i], err = c.poolSymbol(pool, idx[i]); err != nil {
			return nil, fmt.Errorf("method %#x: %w", method, err)
		}
	}
	name, err := ExternalMethodName(class, parts[0], parts[1])
	if err != nil {
		return nil, fmt.Errorf("method %#x: %w", method, err)
	}
	m := &javaMethod{name: name}
	if l.lines.ok {
		// Lines are extra: a method whose file or table cannot be read
		// keeps its name.
		if fi, err := c.u16(pool + l.lines.poolSourceFile); err == nil && fi != 0 {
			m.file, _ = c.poolSymbol(pool, fi)
		}
		m.lineTable, m.codeSize, _ = c.readLineTable(cm)
	}
	if len(c.methods) >= maxMethodNames {
		clear(c.methods)
	}
	c.methods[method] = m
	return m, nil
}

// poolSymbol reads the Symbol at index i of the ConstantPool at pool (its
// entries follow the ConstantPool; a Symbol* may carry a tag in its low
// bit).
func (c *CodeCache) poolSymbol(pool uint64, i uint16) (string, error) {
	if i == 0 {
		return "", errors.New("no constant pool entry")
	}
	sym, err := c.u64(pool + c.l.poolSize + 8*uint64(i))
	if err != nil {
		return "", err
	}
	return c.symbol(sym &^ 1)
}

// symbol reads a HotSpot Symbol (a length and that many bytes of modified
// UTF-8).
func (c *CodeCache) symbol(addr uint64) (string, error) {
	if addr == 0 {
		return "", errors.New("no symbol")
	}
	var b [2]byte
	if err := c.read(addr+c.l.symbolLength, b[:]); err != nil {
		return "", err
	}
	n := binary.LittleEndian.Uint16(b[:])
	if n == 0 || n > maxSymbolBytes {
		return "", fmt.Errorf("symbol at %#x: implausible length %d", addr, n)
	}
	body := make([]byte, n)
	if err := c.read(addr+c.l.symbolBody, body); err != nil {
		return "", err
	}
	return string(body), nil
}

// ExternalMethodName writes a method as HotSpot's Method::external_name
// does (its perf map's names): the return type, the class's name with dots,
// the method's name and its parameter types, from the class's internal name
// (java/util/HashMap), the method's name and its descriptor
// ((Ljava/lang/Object;I)V).
func ExternalMethodName(class, method, descriptor string) (string, error) {
	params, ret, ok := strings.Cut(strings.TrimPrefix(descriptor, "("), ")")
	if !ok || !strings.HasPrefix(descriptor, "(") {
		return "", fmt.Errorf("bad method descriptor %q", descriptor)
	}
	retType, rest, err := javaType(ret)
	if err != nil || rest != "" {
		return "", fmt.Errorf("bad method descriptor %q", descriptor)
	}
	var b strings.Builder
	b.WriteString(retType)
	b.WriteByte(' ')
	b.WriteString(hiddenClass(strings.ReplaceAll(class, "/", ".")))
	b.WriteByte('.')
	b.WriteString(method)
	b.WriteByte('(')
	for i := 0; params != ""; i++ {
		var t string
		if t, params, err = javaType(params); err != nil {
			return "", fmt.Errorf("bad method descriptor %q", descriptor)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(t)
	}
	b.WriteByte(')')
	return b.String(), nil
}

// hiddenClass gives a hidden class (JDK 15+: lambda forms, lambdas,
// proxies) one name in every JVM: HotSpot names each after its address
// ("java.lang.invoke.LambdaForm$MH+0x00007fa8f0001c00", "…/0x…" in JDK 15
// and 16), so the same code would be a different frame, and a different
// stack, in each process and after each restart.
func hiddenClass(name string) string {
	i := strings.LastIndex(name, "0x")
	if i < 1 || (name[i-1] != '+' && name[i-1] != '.') || i+2 == len(name) {
		return name
	}
	for _, c := range name[i+2:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return name
		}
	}
	return name[:i-1] + "+<hidden>"
}

// javaType reads one field type of a descriptor and returns it as Java
// source writes it, and what follows.
func javaType(d string) (string, string, error) {
	dims := 0
	for dims < len(d) && d[dims] == '[' {
		dims++
	}
	if dims == len(d) {
		return "", "", errors.New("truncated")
	}
	var t string
	rest := d[dims+1:]
	switch d[dims] {
	case 'B':
		t = "byte"
	case 'C':
		t = "char"
	case 'D':
		t = "double"
	case 'F':
		t = "float"
	case 'I':
		t = "int"
	case 'J':
		t = "long"
	case 'S':
		t = "short"
	case 'Z':
		t = "boolean"
	case 'V':
		t = "void"
	case 'L':
		name, after, ok := strings.Cut(d[dims+1:], ";")
		if !ok || name == "" {
			return "", "", errors.New("unterminated class name")
		}
		t, rest = strings.ReplaceAll(name, "/", "."), after
	default:
		return "", "", fmt.Errorf("unknown type %q", d[dims])
	}
	return t + strings.Repeat("[]", dims), rest, nil
}

// le is the little-endian word at off in b (0 past its end).
func le(b []byte, off uint64) uint64 {
	if off+8 > uint64(len(b)) {
		return 0
	}
	return binary.LittleEndian.Uint64(b[off:])
}

// memory is the JVM's memory, read one way or another.
type memory interface {
	read(addr uint64, b []byte) error
}

// reader reads words and names from the JVM's memory.
type reader struct{ memory }

func (r reader) u64(addr uint64) (uint64, error) {
	var b [8]byte
	err := r.read(addr, b[:])
	return binary.LittleEndian.Uint64(b[:]), err
}

func (r reader) u32(addr uint64) (uint32, error) {
	var b [4]byte
	err := r.read(addr, b[:])
	return binary.LittleEndian.Uint32(b[:]), err
}

func (r reader) u16(addr uint64) (uint16, error) {
	var b [2]byte
	err := r.read(addr, b[:])
	return binary.LittleEndian.Uint16(b[:]), err
}

// cstring reads a NUL-terminated string of at most maxNameBytes, a page
// at a time: a short name near the end of a mapping is still read.
func (r reader) cstring(addr uint64) (string, error) {
	if addr == 0 {
		return "", errors.New("no name")
	}
	var b [maxNameBytes]byte
	for n := 0; n < maxNameBytes; {
		a := addr + uint64(n)
		chunk := b[n : n+min(maxNameBytes-n, pageSize-int(a&(pageSize-1)))]
		if err := r.read(a, chunk); err != nil {
			return "", err
		}
		if i := bytes.IndexByte(chunk, 0); i >= 0 {
			return string(b[:n+i]), nil
		}
		n += len(chunk)
	}
	return "", fmt.Errorf("name at %#x: longer than %d bytes", addr, maxNameBytes)
}

// fileMemory reads straight from the JVM's mem file: the lookups, each at
// its own address.
type fileMemory struct{ mem *os.File }

func (m fileMemory) read(addr uint64, b []byte) error {
	if _, err := m.mem.ReadAt(b, int64(addr)); err != nil {
		return fmt.Errorf("read the JVM's memory at %#x: %w", addr, err)
	}
	return nil
}

// pagedMemory reads the JVM's description once, at open: thousands of
// entries whose names lie together in libjvm.so's read-only data, read a
// page at a time rather than a read per name.
type pagedMemory struct {
	mem   *os.File
	pages map[uint64][]byte
}

const pageSize = 4096

func (r *pagedMemory) page(addr uint64) ([]byte, error) {
	base := addr &^ (pageSize - 1)
	if p, ok := r.pages[base]; ok {
		return p, nil
	}
	p := make([]byte, pageSize)
	if _, err := r.mem.ReadAt(p, int64(base)); err != nil {
		return nil, fmt.Errorf("read the JVM's memory at %#x: %w", base, err)
	}
	r.pages[base] = p
	return p, nil
}

func (r *pagedMemory) read(addr uint64, b []byte) error {
	for len(b) > 0 {
		p, err := r.page(addr)
		if err != nil {
			return err
		}
		n := copy(b, p[addr&(pageSize-1):])
		b, addr = b[n:], addr+uint64(n)
	}
	return nil
}

// entries calls f with each entry of the table at base (stride bytes
// each) up to the one whose type name (the pointer at nameOff) is 0.
func (r reader) entries(base, stride, nameOff uint64, f func([]byte) error) error {
	if stride < 16 || stride > maxVMStride || nameOff+8 > stride {
		return fmt.Errorf("%w: entries of %d bytes", errNotDescribed, stride)
	}
	e := make([]byte, stride)
	for i := range uint64(maxVMEntries) {
		if err := r.read(base+i*stride, e); err != nil {
			return err
		}
		if le(e, nameOff) == 0 {
			return nil
		}
		if err := f(e); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: more than %d entries", errNotDescribed, maxVMEntries)
}
