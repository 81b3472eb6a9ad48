package symbolize

import (
	"cmp"
	"debug/dwarf"
	"math"
	"slices"
	"strings"
	"unsafe"
)

// Functions inlined in native code, from DWARF. Without them a C, C++ or
// Rust binary built with -O2 -g charges the work of every function the
// compiler inlined (std::map's search, a Rust iterator's next) to the
// function it was inlined into, at the inlined code's line; Go's inlines
// are expanded from pclntab. A unit's functions are indexed when its line
// table is decoded (functionRange); the calls inlined in a function
// (DW_TAG_inlined_subroutine) are read when a lookup first lands in it, and
// kept per function (functionCalls), so that memory goes to the functions
// a profile samples, not to every function of a large binary.

// functionRange is one address range of a function a unit defines
// (DW_TAG_subprogram with code), and the function's entry.
type functionRange struct {
	lo, hi uint64
	entry  dwarf.Offset
}

// functionCalls are the calls inlined in one function: ranges, by start,
// the inlined functions' names (fn indexes them) and the files they are
// called from (callFile indexes them).
type functionCalls struct {
	ranges  []inlinedRange
	funcs   []string
	files   []string
	lastUse uint64
}

// callFile is the index in c.files of the file the call at e is made from
// (DW_AT_call_file, an index into u's line table's files).
func (c *functionCalls) callFile(u *unitLines, e *dwarf.Entry) uint32 {
	name := ""
	if i, ok := e.Val(dwarf.AttrCallFile).(int64); ok && i >= 0 && i < int64(len(u.callFiles)) {
		name = u.names[u.callFiles[i]]
	}
	if i := slices.Index(c.files, name); i >= 0 {
		return uint32(i)
	}
	c.files = append(c.files, name)
	return uint32(len(c.files) - 1)
}

// inlinedRange is one address range of a call the compiler inlined: the
// code of function fn at [lo, hi), called from the line table's file
// callFile, line callLine, of the function it was inlined into. Ranges nest
// as the calls do (a call inlined into inlined code lies within its
// caller's range), and parent is the enclosing call's range, -1 for a call
// inlined directly into the function.
type inlinedRange struct {
	lo, hi   uint64
	parent   int32
	fn       uint32
	callFile uint32
	callLine int32
}

// inlinedFrame is one function of an address's inline chain.
type inlinedFrame struct {
	function string
	// file and line are where execution is in this function: for the
	// innermost, the address's line; for the others, the line that calls
	// the next frame in. The last frame has no function: it is the
	// function the symbol table names.
	file string
	line int
}

// maxCallBytes bounds the inlined calls kept per binary (about 32 bytes a
// range): 512 KiB, where libpython's hottest function,
// _PyEval_EvalFrameDefault, has about 9,000 ranges.
const maxCallBytes = 512 << 10

// maxOriginHops bounds how far a name is followed through
// DW_AT_abstract_origin and DW_AT_specification (an inlined call names its
// abstract instance, which may name a declaration: two hops in what GCC and
// clang emit), so that a malformed file's cycle ends.
const maxOriginHops = 8

func (c *functionCalls) used() uint64 { return c.lastUse }

func (c *functionCalls) size() int {
	n := 64 + len(c.ranges)*int(unsafe.Sizeof(inlinedRange{})) + len(c.files)*16 // the files' bytes are the binary's
	for _, name := range c.funcs {
		n += 16 + len(name)
	}
	return n
}

// namespaceRange is a namespace entry of a unit (C++ namespace, Rust
// module or impl) and the entries within it, [start, end): the scope that
// qualifies the plain name of a function declared there (see
// qualifiedName).
type namespaceRange struct {
	start, end dwarf.Offset
	name       string
	parent     int32 // the enclosing namespace, -1 at the unit's top
	// declares: the namespace, or one within it, declares a function
	// without a linkage name (one with a linkage name is named by it).
	declares bool
}

// functionsOf indexes the functions and namespaces of the unit whose
// entries r reads next (its compile-unit entry just read): functions in
// namespaces too (C++, Rust). A function's own entries, types and anything
// else are skipped whole (through DW_AT_sibling where the compiler gave
// one, so their children are not decoded). Errors end the walk with what
// was read.
func functionsOf(d *dwarf.Data, r *dwarf.Reader) ([]functionRange, []namespaceRange) {
	var (
		fns []functionRange
		nss []namespaceRange
		// open are the namespaces being read; ended those whose end is
		// the next entry's offset.
		open, ended []int32
	)
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			if len(open) == 0 {
				break // the unit's end
			}
			ended = append(ended, open[len(open)-1])
			open = open[:len(open)-1]
			continue
		}
		for _, i := range ended {
			nss[i].end = e.Offset
		}
		ended = ended[:0]
		switch e.Tag {
		case dwarf.TagSubprogram:
			if len(open) > 0 && e.Val(dwarf.AttrLinkageName) == nil && e.Val(attrMIPSLinkageName) == nil {
				nss[open[len(open)-1]].declares = true
			}
			if rs, err := d.Ranges(e); err == nil && e.Children {
				for _, rg := range rs {
					if rg[0] < rg[1] {
						fns = append(fns, functionRange{lo: rg[0], hi: rg[1], entry: e.Offset})
					}
				}
			}
		case dwarf.TagNamespace:
			if e.Children {
				name, _ := e.Val(dwarf.AttrName).(string)
				if name == "" {
					name = "(anonymous namespace)" // as C++ demangling writes it
				}
				parent := int32(-1)
				if len(open) > 0 {
					parent = open[len(open)-1]
				}
				open = append(open, int32(len(nss)))
				nss = append(nss, namespaceRange{start: e.Offset, end: math.MaxUint32, name: name, parent: parent})
			}
			continue
		}
		r.SkipChildren()
	}
	slices.SortFunc(fns, func(a, b functionRange) int { return cmp.Compare(a.lo, b.lo) })
	return slices.Clip(fns), declaring(nss)
}

// declaring keeps, of nss (in entry order, so by start), the namespaces
// that declare functions without a linkage name and those that hold them:
// a Rust program's units have thousands of namespaces (modules, impls)
// whose functions all have one.
func declaring(nss []namespaceRange) []namespaceRange {
	for i := len(nss) - 1; i >= 0; i-- {
		if p := nss[i].parent; nss[i].declares && p >= 0 {
			nss[p].declares = true
		}
	}
	at := make([]int32, len(nss))
	var kept []namespaceRange
	for i, ns := range nss {
		if !ns.declares {
			continue
		}
		at[i] = int32(len(kept))
		if ns.parent >= 0 {
			ns.parent = at[ns.parent]
		}
		kept = append(kept, ns)
	}
	return kept
}

// qualifiedName is name, declared at entry off, prefixed with the
// namespaces of u that hold off (outermost first): GCC gives a static C++
// function no linkage name, and "leaf" alone does not say whose. A name
// declared in another unit, or at the unit's top (rustc's line tables
// only declare every inlined function there), stays as it is.
func (u *unitLines) qualifiedName(name string, off dwarf.Offset) string {
	i, _ := slices.BinarySearchFunc(u.namespaces, off, func(n namespaceRange, off dwarf.Offset) int { return cmp.Compare(n.start, off) })
	// i is the first namespace starting at or after off; namespaces nest,
	// so those holding off are the one before it and its parents.
	j := int32(i - 1)
	for j >= 0 && off >= u.namespaces[j].end {
		j = u.namespaces[j].parent
	}
	if j < 0 {
		return name
	}
	var scopes []string
	for ; j >= 0; j = u.namespaces[j].parent {
		scopes = append(scopes, u.namespaces[j].name)
	}
	slices.Reverse(scopes)
	return strings.Join(scopes, "::") + "::" + name
}

// functionAt is the function whose range holds pc.
func (u *unitLines) functionAt(pc uint64) (functionRange, bool) {
	i, _ := slices.BinarySearchFunc(u.functions, pc, func(f functionRange, pc uint64) int { return cmp.Compare(f.lo, pc+1) })
	if i > 0 && pc < u.functions[i-1].hi {
		return u.functions[i-1], true
	}
	return functionRange{}, false
}

// callsIn returns the calls inlined in fn, read (with its unit, for the
// names of its files and namespaces) when they are not kept. dl.mu must be
// held.
func (dl *dwarfLines) callsIn(fn functionRange) *functionCalls {
	dl.clock++
	c, ok := dl.calls[fn.entry]
	if !ok {
		u := dl.unitAt(fn.lo)
		if u == nil {
			return &functionCalls{}
		}
		c = readCalls(dl.data, u, fn.entry)
		n := c.size()
		dropLeastRecent(dl.calls, &dl.callBytes, n, dl.maxCalls)
		dl.calls[fn.entry] = c
		dl.callBytes += n
	}
	c.lastUse = dl.clock
	return c
}

// readCalls reads the calls inlined in the function whose entry is at
// entry, and their lexical blocks. A call's parent is the range of the
// nearest enclosing call that holds the call's first address. Names are
// demangled once per function. Errors end the walk with what was read.
func readCalls(d *dwarf.Data, u *unitLines, entry dwarf.Offset) *functionCalls {
	c := &functionCalls{}
	r := d.Reader()
	r.Seek(entry)
	if e, err := r.Next(); err != nil || e == nil || !e.Children {
		return c
	}
	var (
		byOrigin = map[dwarf.Offset]uint32{}
		// open holds, per entry whose children are being read, the first
		// of its ranges and their count (0 for blocks and calls without
		// code).
		open  = []struct{ first, n int }{{}}
		names = d.Reader()
	)
	for len(open) > 0 {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag == 0 {
			open = open[:len(open)-1]
			continue
		}
		first, n := len(c.ranges), 0
		switch e.Tag {
		case dwarf.TagInlinedSubroutine:
			rs, err := d.Ranges(e)
			origin, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
			if err != nil || !ok {
				break
			}
			fn, ok := byOrigin[origin]
			if !ok {
				fn = uint32(len(c.funcs))
				c.funcs = append(c.funcs, originName(names, u, origin))
				byOrigin[origin] = fn
			}
			file := c.callFile(u, e)
			line, _ := e.Val(dwarf.AttrCallLine).(int64)
			for _, rg := range rs {
				if rg[0] < rg[1] {
					c.ranges = append(c.ranges, inlinedRange{lo: rg[0], hi: rg[1], parent: enclosing(c.ranges, open, rg[0]), fn: fn, callFile: file, callLine: int32(line)})
					n++
				}
			}
		case dwarf.TagLexDwarfBlock:
		default:
			r.SkipChildren()
			continue
		}
		if e.Children {
			open = append(open, struct{ first, n int }{first, n})
		}
	}
	c.ranges = sortedByStart(c.ranges)
	return c
}

// enclosing is the index of the range of the nearest open call that holds
// pc, -1 when the nearest call does not or there is none.
func enclosing(ranges []inlinedRange, open []struct{ first, n int }, pc uint64) int32 {
	for i := len(open) - 1; i >= 0; i-- {
		o := open[i]
		if o.n == 0 {
			continue
		}
		for j := o.first; j < o.first+o.n; j++ {
			if pc >= ranges[j].lo && pc < ranges[j].hi {
				return int32(j)
			}
		}
		return -1
	}
	return -1
}

// sortedByStart orders ranges by their start, as inlinedAt searches them,
// keeping each one's parent. At one start the enclosing range stays first
// (it was read first).
func sortedByStart(ranges []inlinedRange) []inlinedRange {
	order := make([]int32, len(ranges))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(ranges[a].lo, ranges[b].lo) })
	at := make([]int32, len(ranges))
	for n, o := range order {
		at[o] = int32(n)
	}
	sorted := make([]inlinedRange, len(ranges))
	for n, o := range order {
		r := ranges[o]
		if r.parent >= 0 {
			r.parent = at[r.parent]
		}
		sorted[n] = r
	}
	return sorted
}

// originName is the name of the function an inlined call's abstract origin
// at off is: its linkage name demangled (qualified, as the symbol table's
// names are), else its plain name qualified by the namespaces of u it is
// declared in, following DW_AT_abstract_origin and DW_AT_specification to
// the entry that carries one.
func originName(r *dwarf.Reader, u *unitLines, off dwarf.Offset) string {
	plain, at := "", dwarf.Offset(0)
	for range maxOriginHops {
		r.Seek(off)
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		for _, attr := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName} {
			if ln, ok := e.Val(attr).(string); ok && ln != "" {
				return demangled(ln)
			}
		}
		if name, ok := e.Val(dwarf.AttrName).(string); ok && plain == "" {
			plain, at = name, e.Offset
		}
		next, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			if next, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset); !ok {
				break
			}
		}
		off = next
	}
	if plain == "" {
		return ""
	}
	return u.qualifiedName(plain, at)
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, which GCC wrote before
// DWARF 4 standardized DW_AT_linkage_name.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// inlinedAt is the chain of calls inlined at pc, innermost first (see
// inlinedFrame); nil when pc is in no inlined call. file and line are pc's
// own line-table row.
func (c *functionCalls) inlinedAt(pc uint64, file string, line int) []inlinedFrame {
	i, _ := slices.BinarySearchFunc(c.ranges, pc, func(r inlinedRange, pc uint64) int { return cmp.Compare(r.lo, pc+1) })
	// i is the first range starting above pc. Ranges nest, so the
	// innermost one holding pc is the last one starting at or below pc or
	// one of its enclosing calls.
	j := int32(i - 1)
	for j >= 0 && pc >= c.ranges[j].hi {
		j = c.ranges[j].parent
	}
	var out []inlinedFrame
	for j >= 0 {
		r := &c.ranges[j]
		// A call whose function has no name is left out; the next frame
		// out then carries the line that calls it, as it should.
		if name := c.funcs[r.fn]; name != "" {
			out = append(out, inlinedFrame{function: name, file: file, line: line})
		}
		// A call line of 0 (the compiler made the call up) is no line,
		// as a line-table row of 0 is.
		file, line = "", int(r.callLine)
		if line != 0 {
			file = c.files[r.callFile]
		}
		j = r.parent
	}
	if len(out) > 0 {
		out = append(out, inlinedFrame{file: file, line: line})
	}
	return out
}
