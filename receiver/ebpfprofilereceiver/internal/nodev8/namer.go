package nodev8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// Bounds on what one lookup reads, so that a corrupt or moving heap costs
// little and a huge script does not hold the profiler's memory.
const (
	maxNameBytes       = 256     // bytes of a function's name read
	maxFileNameBytes   = 4096    // bytes of a script's name read
	maxStringDepth     = 4       // ConsString, ThinString, SlicedString links followed
	maxLineEnds        = 1 << 20 // entries of a script's line table
	maxSourceBytes     = 8 << 20 // bytes of a script's source scanned for line ends
	maxContextLocals   = 1 << 16 // context locals of a ScopeInfo believed
	scopeTailSlots     = 8       // ScopeInfo slots read after the locals: name, inferred name, positions
	maxCachedScripts   = 256     // scripts kept per Namer ...
	maxCachedLineEnds  = 1 << 18 // ... and line-table entries kept over all of them (1 MB)
	sourceChunkBytes   = 64 << 10
	anonymousName      = "(anonymous)"
	lowestHeapAddress  = 1 << 16
	highestHeapAddress = 1 << 47 // x86-64 user space
)

// Function is a JavaScript function as a profile shows it.
type Function struct {
	Name string // V8's debug name; "(anonymous)" when it has none
	File string // the script's name (a path, a file:// URL or node:internal/...), "" when unknown
	Line int    // the function's first line, 1-based; 0 when unknown
}

// Namer names the functions of one process. It is used from one goroutine
// at a time: nothing in it is locked.
type Namer struct {
	mem *os.File
	l   *Layout
	// scripts caches what was read of each Script, by its address; the
	// Script's fields are read again at each use and an entry serves only
	// while they are unchanged, so a Script freed and another put at its
	// address is read anew.
	scripts        map[uint64]*scriptInfo
	cachedLineEnds int
}

// scriptInfo is what is kept of one Script.
type scriptInfo struct {
	name, source, lineEndsField uint64 // the Script's fields when read
	file                        string
	lineEnds                    []int32 // position of each line's end; nil when unknown
}

// Open opens procRoot/PID/mem to name the functions of process pid, whose
// V8 has layout l.
func Open(procRoot string, pid int, l *Layout) (*Namer, error) {
	if l == nil {
		return nil, errors.New("open a V8 process: no layout")
	}
	mem, err := os.Open(filepath.Join(procRoot, strconv.Itoa(pid), "mem"))
	if err != nil {
		return nil, fmt.Errorf("open the memory of process %d: %w", pid, err)
	}
	return &Namer{mem: mem, l: l, scripts: map[uint64]*scriptInfo{}}, nil
}

// Close releases the process's memory file.
func (n *Namer) Close() error { return n.mem.Close() }

// Function names the function whose SharedFunctionInfo is at sfi, the
// tagged pointer as V8 stores it (low bit set). Every object on the way is
// checked to be of the type expected: an address that no longer holds a
// SharedFunctionInfo gives an error, not a name.
func (n *Namer) Function(sfi uint64) (Function, error) {
	l := n.l
	addr, err := n.object(sfi, l.SharedFunctionInfoType, "SharedFunctionInfo")
	if err != nil {
		return Function{}, err
	}
	nameOrScopeInfo, err := n.word(addr + uint64(l.sfiNameOrScopeInfo))
	if err != nil {
		return Function{}, err
	}
	functionData, err := n.word(addr + uint64(l.sfiFunctionData))
	if err != nil {
		return Function{}, err
	}
	scriptOrDebugInfo, err := n.word(addr + uint64(l.sfiScriptOrDebugInfo))
	if err != nil {
		return Function{}, err
	}

	// The name: a String, or in the ScopeInfo once compiled; a Smi (zero)
	// when the function has none of its own.
	var name, inferred string
	start := -1 // the function's start position in the script's source
	if isHeapObject(nameOrScopeInfo) {
		objAddr, typ, err := n.typeOf(nameOrScopeInfo)
		if err != nil {
			return Function{}, fmt.Errorf("SharedFunctionInfo %#x: name: %w", sfi, err)
		}
		switch {
		case typ < l.firstNonstringType:
			if name, err = n.readString(nameOrScopeInfo, maxNameBytes); err != nil {
				return Function{}, fmt.Errorf("SharedFunctionInfo %#x: name: %w", sfi, err)
			}
		case typ == l.scopeInfoType:
			if name, start, err = n.scopeInfo(objAddr); err != nil {
				return Function{}, fmt.Errorf("SharedFunctionInfo %#x: %w", sfi, err)
			}
		default:
			return Function{}, fmt.Errorf("SharedFunctionInfo %#x: name is neither a String nor a ScopeInfo (type %#x)", sfi, typ)
		}
	}
	// A function not compiled yet (or flushed) has its positions and the
	// name V8 inferred for it (obj.method) in its UncompiledData.
	if isHeapObject(functionData) {
		if dataAddr, typ, err := n.typeOf(functionData); err == nil && l.isUncompiledData(typ) {
			if l.uncompiledStartPosition != 0 && start < 0 {
				if p, err := n.int32At(dataAddr + uint64(l.uncompiledStartPosition)); err == nil && p >= 0 {
					start = int(p)
				}
			}
			if l.uncompiledInferredName != 0 && name == "" {
				if ptr, err := n.word(dataAddr + uint64(l.uncompiledInferredName)); err == nil {
					inferred, _ = n.readStringIfString(ptr, maxNameBytes)
				}
			}
		}
	}
	fn := Function{Name: name}
	if fn.Name == "" {
		fn.Name = inferred
	}
	if fn.Name == "" {
		fn.Name = anonymousName
	}

	script, err := n.scriptOf(addr, scriptOrDebugInfo)
	if err != nil {
		return Function{}, fmt.Errorf("SharedFunctionInfo %#x: %w", sfi, err)
	}
	if script != 0 {
		s, err := n.script(script)
		if err != nil {
			return Function{}, fmt.Errorf("SharedFunctionInfo %#x: %w", sfi, err)
		}
		fn.File = s.file
		if start >= 0 {
			fn.Line = lineOf(s.lineEnds, start)
		}
	}
	return fn, nil
}

// isUncompiledData says whether typ is one of UncompiledData's types.
func (l *Layout) isUncompiledData(typ uint16) bool {
	for _, t := range l.uncompiledDataTypes {
		if t == typ {
			return true
		}
	}
	return false
}

// scriptOf returns the address of the function's Script, found in
// script_or_debug_info, through a DebugInfo while a debugger is attached;
// 0 when the function has none (undefined: builtins, native functions).
func (n *Namer) scriptOf(sfiAddr, scriptOrDebugInfo uint64) (uint64, error) {
	l := n.l
	if !isHeapObject(scriptOrDebugInfo) {
		return 0, nil
	}
	addr, typ, err := n.typeOf(scriptOrDebugInfo)
	if err != nil {
		return 0, fmt.Errorf("script: %w", err)
	}
	switch {
	case typ == l.scriptType:
		return addr, nil
	case l.debugInfoType != 0 && typ == l.debugInfoType:
		// DebugInfo's first field is its SharedFunctionInfo: if it is
		// not this one, the layout assumed is wrong.
		shared, err := n.word(addr + uint64(l.HeapObjectMap) + taggedSize)
		if err != nil {
			return 0, err
		}
		if shared != sfiAddr|heapObjectTag {
			return 0, nil
		}
		ptr, err := n.word(addr + uint64(l.debugInfoScript))
		if err != nil || !isHeapObject(ptr) {
			return 0, err
		}
		if addr, typ, err := n.typeOf(ptr); err == nil && typ == l.scriptType {
			return addr, nil
		}
		return 0, nil
	}
	return 0, nil // undefined
}

// scopeInfo reads a function's name (its own, else the one V8 inferred)
// and start position from its ScopeInfo. The slots hold the flags, the
// counts, then the context locals (names and infos), then optional slots
// that depend on flags whose bits change from version to version: saved
// class variable, receiver, the function variable (name, slot), the
// inferred name, then the position pair (start, end Smis). Rather than
// decode the flags, the slots after the locals are read: the first
// non-empty String is the name, and the first pair of Smis 0 <= start <
// end that follows a heap object (the inferred name slot, a String or
// undefined) is the position. From V8 12.8.44 the positions are at fixed
// slots. A start of -1 means not found.
func (n *Namer) scopeInfo(addr uint64) (name string, start int, err error) {
	l := n.l
	slots := addr + uint64(l.HeapObjectMap) + taggedSize
	head := make([]byte, (l.scopeFirstVars+1)*taggedSize)
	if err := n.read(slots, head); err != nil {
		return "", -1, err
	}
	slot := func(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i*taggedSize:]) }
	locals, ok := smiValue(slot(head, l.scopeNContextLocals))
	if !ok || locals < 0 || locals > maxContextLocals {
		return "", -1, errors.New("ScopeInfo: bad count of context locals")
	}
	skip := 2 * int(locals) // a name and an info each
	if locals > 0 {
		// Many locals have their names in a hash table, one slot.
		if first := slot(head, l.scopeFirstVars); isHeapObject(first) {
			if _, typ, err := n.typeOf(first); err == nil && typ >= l.firstNonstringType {
				skip = 1 + int(locals)
			}
		}
	}
	tail := make([]byte, scopeTailSlots*taggedSize)
	if err := n.read(slots+uint64(l.scopeFirstVars+skip)*taggedSize, tail); err != nil {
		return "", -1, err
	}
	start = -1
	if l.scopePositionsFixed {
		// ScopeInfo's position_info slots, right after the counts.
		s, ok1 := smiValue(slot(head, 3))
		e, ok2 := smiValue(slot(head, 4))
		if ok1 && ok2 && s >= 0 && s <= e {
			start = int(s)
		}
	}
	for i := 0; i < scopeTailSlots; i++ {
		v := slot(tail, i)
		if isHeapObject(v) {
			if name == "" {
				name, _ = n.readStringIfString(v, maxNameBytes)
			}
			continue
		}
		if start >= 0 || i == 0 || !isHeapObject(slot(tail, i-1)) || i+1 >= scopeTailSlots {
			continue
		}
		s, ok1 := smiValue(v)
		e, ok2 := smiValue(slot(tail, i+1))
		if ok1 && ok2 && s >= 0 && s < e {
			start = int(s)
			break // the name comes before the positions
		}
	}
	return name, start, nil
}

// script returns what is known of the Script at addr, from the cache
// while the Script's fields are unchanged.
func (n *Namer) script(addr uint64) (*scriptInfo, error) {
	l := n.l
	nameField, err := n.word(addr + uint64(l.scriptName))
	if err != nil {
		return nil, err
	}
	sourceField, err := n.word(addr + uint64(l.scriptSource))
	if err != nil {
		return nil, err
	}
	lineEndsField, err := n.word(addr + uint64(l.scriptLineEnds))
	if err != nil {
		return nil, err
	}
	if s, ok := n.scripts[addr]; ok && s.name == nameField && s.source == sourceField && s.lineEndsField == lineEndsField {
		return s, nil
	}
	s := &scriptInfo{name: nameField, source: sourceField, lineEndsField: lineEndsField}
	// A script with no name (eval, new Function) has undefined here.
	if s.file, err = n.readStringIfString(nameField, maxFileNameBytes); err != nil {
		return nil, fmt.Errorf("script name: %w", err)
	}
	s.lineEnds = n.lineEnds(lineEndsField)
	if s.lineEnds == nil {
		s.lineEnds = n.sourceLineEnds(sourceField)
	}
	if len(n.scripts) >= maxCachedScripts || n.cachedLineEnds+len(s.lineEnds) > maxCachedLineEnds {
		clear(n.scripts)
		n.cachedLineEnds = 0
	}
	if old, ok := n.scripts[addr]; ok {
		n.cachedLineEnds -= len(old.lineEnds)
	}
	n.scripts[addr] = s
	n.cachedLineEnds += len(s.lineEnds)
	return s, nil
}

// lineEnds reads Script::line_ends, a FixedArray of Smis, each the
// position of a line's end; nil when V8 has not computed it (undefined)
// or it cannot be read.
func (n *Namer) lineEnds(field uint64) []int32 {
	l := n.l
	if !isHeapObject(field) {
		return nil
	}
	addr, typ, err := n.typeOf(field)
	if err != nil || typ != l.fixedArrayType {
		return nil
	}
	lengthWord, err := n.word(addr + uint64(l.fixedArrayLength))
	if err != nil {
		return nil
	}
	count, ok := smiValue(lengthWord)
	if !ok || count <= 0 || count > maxLineEnds {
		return nil
	}
	b := make([]byte, count*taggedSize)
	if err := n.read(addr+uint64(l.fixedArrayData), b); err != nil {
		return nil
	}
	ends := make([]int32, count)
	for i := range ends {
		v, ok := smiValue(binary.LittleEndian.Uint64(b[i*taggedSize:]))
		if !ok || (i > 0 && v < ends[i-1]) {
			return nil
		}
		ends[i] = v
	}
	return ends
}

// sourceLineEnds computes the line ends from the script's source, as V8
// does (a line ends at \n, at \r not followed by \n, at U+2028 and U+2029;
// the source's end ends the last line), when the source is a sequential
// string (through ThinStrings) of at most maxSourceBytes; else nil.
func (n *Namer) sourceLineEnds(field uint64) []int32 {
	l := n.l
	for depth := 0; isHeapObject(field) && depth <= maxStringDepth; depth++ {
		addr, typ, err := n.typeOf(field)
		if err != nil || typ >= l.firstNonstringType {
			return nil
		}
		switch typ & l.stringRepresentationMask {
		case l.thinStringTag:
			if field, err = n.word(addr + uint64(l.thinActual)); err != nil {
				return nil
			}
			continue
		case l.seqStringTag:
		default:
			return nil // cons, sliced, external: not scanned
		}
		length, err := n.int32At(addr + uint64(l.stringLength))
		if err != nil || length < 0 {
			return nil
		}
		twoByte := typ&l.stringEncodingMask == l.twoByteStringTag
		chars, width := addr+uint64(l.seqOneByteChars), int64(1)
		if twoByte {
			chars, width = addr+uint64(l.seqTwoByteChars), 2
		}
		size := int64(length) * width
		if size > maxSourceBytes {
			return nil
		}
		var ends []int32
		var prevCR bool
		buf := make([]byte, min(size, sourceChunkBytes))
		for off := int64(0); off < size; off += int64(len(buf)) {
			b := buf[:min(int64(len(buf)), size-off)]
			if err := n.read(chars+uint64(off), b); err != nil {
				return nil
			}
			for i := 0; i < len(b); i += int(width) {
				c := uint16(b[i])
				if twoByte {
					c = binary.LittleEndian.Uint16(b[i:])
				}
				pos := int32((off + int64(i)) / width)
				if prevCR && c != '\n' {
					ends = append(ends, pos-1)
				}
				prevCR = c == '\r'
				if c == '\n' || c == 0x2028 || c == 0x2029 {
					ends = append(ends, pos)
				}
				if len(ends) > maxLineEnds {
					return nil
				}
			}
		}
		if prevCR {
			ends = append(ends, length-1)
		}
		return append(ends, length)
	}
	return nil
}

// lineOf maps a position in a script's source to its 1-based line: the
// first line whose end is at or after it. 0 when unknown.
func lineOf(ends []int32, pos int) int {
	if len(ends) == 0 || pos > int(ends[len(ends)-1]) {
		return 0
	}
	return sort.Search(len(ends), func(i int) bool { return int(ends[i]) >= pos }) + 1
}

// readStringIfString reads the string at ptr, or returns "" when ptr is
// not a string (undefined, a Smi); an error only when the string cannot
// be read.
func (n *Namer) readStringIfString(ptr uint64, limit int) (string, error) {
	if !isHeapObject(ptr) {
		return "", nil
	}
	_, typ, err := n.typeOf(ptr)
	if err != nil {
		return "", err
	}
	if typ >= n.l.firstNonstringType {
		return "", nil
	}
	return n.readString(ptr, limit)
}

// readString reads the String at ptr, at most limit bytes of its
// characters (a longer string is cut short).
func (n *Namer) readString(ptr uint64, limit int) (string, error) {
	var b strings.Builder
	budget := limit
	if err := n.appendString(&b, ptr, 0, -1, &budget, maxStringDepth); err != nil {
		return "", err
	}
	return b.String(), nil
}

// appendString appends to b the characters [from, from+count) of the
// String at ptr (count -1: to its end), reading at most *budget bytes.
func (n *Namer) appendString(b *strings.Builder, ptr uint64, from, count int, budget *int, depth int) error {
	l := n.l
	if depth < 0 {
		return errors.New("string: too many links (cons, thin, sliced)")
	}
	addr, typ, err := n.typeOf(ptr)
	if err != nil {
		return err
	}
	if typ >= l.firstNonstringType {
		return fmt.Errorf("%#x is not a string (type %#x)", ptr, typ)
	}
	length, err := n.int32At(addr + uint64(l.stringLength))
	if err != nil {
		return err
	}
	if length < 0 || from < 0 || from > int(length) {
		return fmt.Errorf("string %#x: bad length %d", ptr, length)
	}
	if count < 0 || from+count > int(length) {
		count = int(length) - from
	}
	switch typ & l.stringRepresentationMask {
	case l.seqStringTag:
		twoByte := typ&l.stringEncodingMask == l.twoByteStringTag
		width := 1
		chars := addr + uint64(l.seqOneByteChars)
		if twoByte {
			width = 2
			chars = addr + uint64(l.seqTwoByteChars)
		}
		count = min(count, *budget/width)
		if count <= 0 {
			return nil
		}
		raw := make([]byte, count*width)
		if err := n.read(chars+uint64(from*width), raw); err != nil {
			return err
		}
		*budget -= len(raw)
		if !twoByte {
			for _, c := range raw { // Latin-1
				b.WriteRune(rune(c))
			}
			return nil
		}
		units := make([]uint16, count)
		for i := range units {
			units[i] = binary.LittleEndian.Uint16(raw[2*i:])
		}
		b.WriteString(string(utf16.Decode(units)))
		return nil
	case l.consStringTag:
		first, err := n.word(addr + uint64(l.consFirst))
		if err != nil {
			return err
		}
		second, err := n.word(addr + uint64(l.consSecond))
		if err != nil {
			return err
		}
		firstAddr, _, err := n.typeOf(first)
		if err != nil {
			return err
		}
		firstLength, err := n.int32At(firstAddr + uint64(l.stringLength))
		if err != nil || firstLength < 0 || int(firstLength) > int(length) {
			return fmt.Errorf("cons string %#x: bad first part", ptr)
		}
		if from < int(firstLength) {
			if err := n.appendString(b, first, from, min(count, int(firstLength)-from), budget, depth-1); err != nil {
				return err
			}
		}
		if end := from + count; end > int(firstLength) && *budget > 0 {
			secondFrom := max(from-int(firstLength), 0)
			return n.appendString(b, second, secondFrom, end-int(firstLength)-secondFrom, budget, depth-1)
		}
		return nil
	case l.thinStringTag:
		actual, err := n.word(addr + uint64(l.thinActual))
		if err != nil {
			return err
		}
		return n.appendString(b, actual, from, count, budget, depth-1)
	case l.slicedStringTag:
		parent, err := n.word(addr + uint64(l.slicedParent))
		if err != nil {
			return err
		}
		offsetWord, err := n.word(addr + uint64(l.slicedOffset))
		if err != nil {
			return err
		}
		offset, ok := smiValue(offsetWord)
		if !ok || offset < 0 {
			return fmt.Errorf("sliced string %#x: bad offset", ptr)
		}
		return n.appendString(b, parent, int(offset)+from, count, budget, depth-1)
	default:
		return fmt.Errorf("string %#x: external strings are not read", ptr)
	}
}

// object checks that ptr is a tagged pointer to an object of type want,
// and returns its address.
func (n *Namer) object(ptr uint64, want uint16, what string) (uint64, error) {
	addr, typ, err := n.typeOf(ptr)
	if err != nil {
		return 0, err
	}
	if typ != want {
		return 0, fmt.Errorf("%#x is not a %s (instance type %#x, want %#x)", ptr, what, typ, want)
	}
	return addr, nil
}

// typeOf returns the address and instance type of the heap object at the
// tagged pointer ptr, after checking that its map is a Map (the map's own
// map has MAP_TYPE): a word that is not an object's start is unlikely to
// pass.
func (n *Namer) typeOf(ptr uint64) (uint64, uint16, error) {
	l := n.l
	if !isHeapObject(ptr) {
		return 0, 0, fmt.Errorf("%#x is not a pointer to a heap object", ptr)
	}
	addr := ptr &^ heapObjectTagMask
	if addr < lowestHeapAddress || addr >= highestHeapAddress {
		return 0, 0, fmt.Errorf("%#x is not a pointer to a heap object", ptr)
	}
	mapPtr, err := n.word(addr + uint64(l.HeapObjectMap))
	if err != nil {
		return 0, 0, err
	}
	typ, err := n.mapInstanceType(mapPtr)
	if err != nil {
		return 0, 0, fmt.Errorf("object %#x: %w", ptr, err)
	}
	return addr, typ, nil
}

// mapInstanceType returns the instance type a Map gives its objects.
func (n *Namer) mapInstanceType(mapPtr uint64) (uint16, error) {
	l := n.l
	if !isHeapObject(mapPtr) || mapPtr < lowestHeapAddress || mapPtr >= highestHeapAddress {
		return 0, fmt.Errorf("map %#x is not a pointer", mapPtr)
	}
	mapAddr := mapPtr &^ heapObjectTagMask
	metaMap, err := n.word(mapAddr + uint64(l.HeapObjectMap))
	if err != nil {
		return 0, err
	}
	if !isHeapObject(metaMap) || metaMap < lowestHeapAddress || metaMap >= highestHeapAddress {
		return 0, fmt.Errorf("map %#x has no map", mapPtr)
	}
	metaType, err := n.uint16At(metaMap&^heapObjectTagMask + uint64(l.MapInstanceType))
	if err != nil {
		return 0, err
	}
	if metaType != l.mapType {
		return 0, fmt.Errorf("map %#x is not a Map", mapPtr)
	}
	return n.uint16At(mapAddr + uint64(l.MapInstanceType))
}

func (n *Namer) read(addr uint64, b []byte) error {
	if addr >= highestHeapAddress {
		return fmt.Errorf("read V8's heap at %#x: not a user address", addr)
	}
	if _, err := n.mem.ReadAt(b, int64(addr)); err != nil {
		return fmt.Errorf("read V8's heap at %#x: %w", addr, err)
	}
	return nil
}

func (n *Namer) word(addr uint64) (uint64, error) {
	var b [8]byte
	if err := n.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (n *Namer) int32At(addr uint64) (int32, error) {
	var b [4]byte
	if err := n.read(addr, b[:]); err != nil {
		return 0, err
	}
	return int32(binary.LittleEndian.Uint32(b[:])), nil
}

func (n *Namer) uint16At(addr uint64) (uint16, error) {
	var b [2]byte
	if err := n.read(addr, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b[:]), nil
}

func isHeapObject(v uint64) bool { return v&heapObjectTagMask == heapObjectTag }

// smiValue decodes a Smi: the upper 32 bits, when the low bit is clear
// and the lower 32 bits are zero.
func smiValue(v uint64) (int32, bool) {
	if v&0xffffffff != 0 {
		return 0, false
	}
	return int32(v >> smiValueShift), true
}
