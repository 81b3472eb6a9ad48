package nodev8

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrNotV8 is returned by ReadLayout for a file that has no v8dbg_
// symbols: it holds no V8, or one built without postmortem support.
var ErrNotV8 = errors.New("no V8 postmortem (v8dbg_) symbols in the file")

// The tagging scheme this package reads: a 64-bit heap without pointer
// compression, where a heap object's pointer has its low bit set and a
// Smi (small integer) is held in the upper 32 bits of a word whose low
// bit is clear.
const (
	taggedSize        = 8
	heapObjectTag     = 1
	heapObjectTagMask = 3
	smiTagMask        = 1
	smiValueShift     = 32
)

// Layout is one V8 build's object layout, read from the v8dbg_ symbols
// (V8's postmortem debugging constants) of the binary that holds V8:
// node itself, or libnode.so.
type Layout struct {
	// What the kernel needs to find a frame's function (all bytes).
	FPContext              int32  // v8dbg_off_fp_context_or_frame_type (or v8dbg_off_fp_context): a JS frame's context, a typed frame's Smi marker; negative, from the frame pointer
	FPFunction             int32  // v8dbg_off_fp_function: a JS frame's JSFunction, negative
	HeapObjectMap          uint32 // v8dbg_class_HeapObject__map__Map
	MapInstanceType        uint32 // v8dbg_class_Map__instance_type__uint16_t
	JSFunctionShared       uint32 // v8dbg_class_JSFunction__shared__SharedFunctionInfo
	FirstJSFunctionType    uint16 // instance types of JSFunction objects (JSFunction has subclasses, one type each) ...
	LastJSFunctionType     uint16 // ... from First to Last, both included
	SharedFunctionInfoType uint16 // v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE

	// version is V8's, major<<24 | minor<<16 | build; 0 when the binary
	// does not say.
	version uint32

	// Instance types.
	mapType, scopeInfoType, scriptType, fixedArrayType uint16
	debugInfoType                                      uint16 // 0: the build has no DebugInfo in script_or_debug_info
	uncompiledDataTypes                                []uint16

	// How strings are told apart: the low bits of a string's instance
	// type give its representation and encoding; types from
	// firstNonstringType up are not strings.
	firstNonstringType                       uint16
	stringRepresentationMask                 uint16
	seqStringTag, consStringTag              uint16
	slicedStringTag, thinStringTag           uint16
	stringEncodingMask                       uint16
	oneByteStringTag, twoByteStringTag       uint16
	stringLength                             uint32 // int32
	seqOneByteChars, seqTwoByteChars         uint32
	consFirst, consSecond                    uint32
	thinActual                               uint32
	slicedParent, slicedOffset               uint32 // offset: a Smi
	fixedArrayLength, fixedArrayData         uint32 // length: a Smi
	sfiNameOrScopeInfo, sfiFunctionData      uint32
	sfiScriptOrDebugInfo                     uint32
	debugInfoScript                          uint32
	scriptName, scriptSource, scriptLineEnds uint32
	uncompiledInferredName                   uint32 // 0: unknown
	uncompiledStartPosition                  uint32 // int32; 0: unknown

	// ScopeInfo: its slots start right after the map; the count of
	// context locals is at slot scopeNContextLocals and the locals' names
	// and infos start at slot scopeFirstVars. From V8 12.8.44 the
	// function's start and end positions are at fixed slots.
	scopeFirstVars, scopeNContextLocals int
	scopePositionsFixed                 bool
}

// v8dbg is the v8dbg_ symbols of one file, with their values.
type v8dbg struct {
	values map[string]int64
}

// lookup returns the value of the first of names the file has.
func (d v8dbg) lookup(names ...string) (int64, bool) {
	for _, n := range names {
		if v, ok := d.values["v8dbg_"+n]; ok {
			return v, true
		}
	}
	return 0, false
}

// ReadLayout reads the layout from the ELF file at path. Errors say what
// is missing or unsupported (e.g. pointer compression: v8dbg_TaggedSize != 8,
// non-x86-64, a missing symbol), in words a user understands.
func ReadLayout(path string) (*Layout, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read V8's layout: %w", err)
	}
	defer f.Close()
	d, version, err := readV8dbg(f)
	if err != nil {
		return nil, fmt.Errorf("read V8's layout from %s: %w", path, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, fmt.Errorf("%s: V8 for %v %v is not supported, only x86-64", path, f.Class, f.Machine)
	}
	l, err := layoutOf(d, version)
	if err != nil {
		return nil, fmt.Errorf("%s (V8 %s): %w", path, versionString(version), err)
	}
	return l, nil
}

// readV8dbg reads the values of the file's v8dbg_ symbols, and V8's
// version from v8::internal::Version's statics.
func readV8dbg(f *elf.File) (v8dbg, uint32, error) {
	syms, err := dataSymbols(f, elf.SHT_DYNSYM)
	if err != nil {
		return v8dbg{}, 0, err
	}
	if !hasV8dbg(syms) {
		// A static build may keep them in .symtab only.
		if s, err := dataSymbols(f, elf.SHT_SYMTAB); err == nil {
			syms = s
		}
	}
	d := v8dbg{values: map[string]int64{}}
	var vers [3]int64
	haveVers := 0
	for _, s := range syms {
		isVersion := -1
		switch s.Name {
		case "_ZN2v88internal7Version6major_E":
			isVersion = 0
		case "_ZN2v88internal7Version6minor_E":
			isVersion = 1
		case "_ZN2v88internal7Version6build_E":
			isVersion = 2
		}
		if !strings.HasPrefix(s.Name, "v8dbg_") && isVersion < 0 {
			continue
		}
		v, err := symbolValue(f, s)
		if err != nil {
			return v8dbg{}, 0, fmt.Errorf("symbol %s: %w", s.Name, err)
		}
		if isVersion >= 0 {
			vers[isVersion] = v
			haveVers++
			continue
		}
		d.values[s.Name] = v
	}
	if len(d.values) == 0 {
		return v8dbg{}, 0, ErrNotV8
	}
	var version uint32
	if haveVers == 3 && vers[0] > 0 && vers[0] < 256 && vers[1] >= 0 && vers[1] < 256 && vers[2] >= 0 && vers[2] < 1<<16 {
		version = v8Version(uint32(vers[0]), uint32(vers[1]), uint32(vers[2]))
	}
	return d, version, nil
}

// dataSymbols returns the symbols of f's symbol table of type typ
// (SHT_DYNSYM or SHT_SYMTAB) that can hold one of V8's constants: data
// objects of 1, 2, 4 or 8 bytes named v8dbg_ (or V8's version statics).
// The table is read in chunks and only those names are read, not all of
// it through debug/elf's Symbols: node's dynamic symbol table alone has
// 75,000 entries, which debug/elf turns into 18 MB of allocations in an
// agent that reads it once per binary.
func dataSymbols(f *elf.File, typ elf.SectionType) ([]elf.Symbol, error) {
	var table *elf.Section
	for _, sec := range f.Sections {
		if sec.Type == typ {
			table = sec
			break
		}
	}
	if table == nil || int(table.Link) >= len(f.Sections) {
		return nil, nil
	}
	strs := f.Sections[table.Link]
	const entSize = 24 // Elf64_Sym
	var out []elf.Symbol
	buf := make([]byte, 4096*entSize)
	name := make([]byte, maxSymbolName)
	for off := int64(0); off < int64(table.Size); off += int64(len(buf)) {
		n, err := table.ReadAt(buf, off)
		if n < entSize && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("read %s: %w", table.Name, err)
		}
		for e := buf[:n-n%entSize]; len(e) >= entSize; e = e[entSize:] {
			info, size := e[4], binary.LittleEndian.Uint64(e[16:])
			if elf.ST_TYPE(info) != elf.STT_OBJECT || (size != 1 && size != 2 && size != 4 && size != 8) {
				continue
			}
			m, err := strs.ReadAt(name, int64(binary.LittleEndian.Uint32(e[0:])))
			if m == 0 && err != nil {
				continue
			}
			nm := name[:m]
			if i := bytes.IndexByte(nm, 0); i >= 0 {
				nm = nm[:i]
			}
			if !bytes.HasPrefix(nm, []byte("v8dbg_")) && !bytes.HasPrefix(nm, []byte("_ZN2v88internal7Version")) {
				continue
			}
			out = append(out, elf.Symbol{Name: string(nm), Info: info, Section: elf.SectionIndex(binary.LittleEndian.Uint16(e[6:])),
				Value: binary.LittleEndian.Uint64(e[8:]), Size: size})
		}
	}
	return out, nil
}

// maxSymbolName bounds the names dataSymbols reads: V8's longest
// v8dbg_ name is about 100 bytes.
const maxSymbolName = 160

func hasV8dbg(syms []elf.Symbol) bool {
	for _, s := range syms {
		if strings.HasPrefix(s.Name, "v8dbg_") {
			return true
		}
	}
	return false
}

// symbolValue reads the value a data symbol holds in the file: st_size
// bytes at st_value, little-endian and sign-extended (frame offsets are
// negative). A symbol in a section with no contents (.bss) holds zero.
func symbolValue(f *elf.File, s elf.Symbol) (int64, error) {
	switch s.Size {
	case 1, 2, 4, 8:
	default:
		return 0, fmt.Errorf("size %d, want 1, 2, 4 or 8 bytes", s.Size)
	}
	for _, sec := range f.Sections {
		if sec.Flags&elf.SHF_ALLOC == 0 || s.Value < sec.Addr || s.Value+s.Size > sec.Addr+sec.Size {
			continue
		}
		if sec.Type == elf.SHT_NOBITS {
			return 0, nil
		}
		b := make([]byte, s.Size)
		if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
			return 0, err
		}
		switch s.Size {
		case 1:
			return int64(int8(b[0])), nil
		case 2:
			return int64(int16(binary.LittleEndian.Uint16(b))), nil
		case 4:
			return int64(int32(binary.LittleEndian.Uint32(b))), nil
		default:
			return int64(binary.LittleEndian.Uint64(b)), nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no section of the file", s.Value)
}

func v8Version(major, minor, build uint32) uint32 { return major<<24 | minor<<16 | build }

func versionString(v uint32) string {
	if v == 0 {
		return "of unknown version"
	}
	return fmt.Sprintf("%d.%d.%d", v>>24, v>>16&0xff, v&0xffff)
}

// layoutOf makes the layout from the symbols' values, checking that each
// needed one is there and that the build is one this package reads.
func layoutOf(d v8dbg, version uint32) (*Layout, error) {
	var missing []string
	need := func(names ...string) int64 {
		v, ok := d.lookup(names...)
		if !ok {
			missing = append(missing, "v8dbg_"+names[0])
		}
		return v
	}
	// The heap's shape first: what is not this package's cannot be read.
	if v, ok := d.lookup("TaggedSize"); ok && v != taggedSize {
		return nil, fmt.Errorf("V8 built with pointer compression (tagged values of %d bytes) is not supported", v)
	}
	// A Smi's value is shifted by the tag's size (SmiValueShift, 1) and
	// SmiShiftSize more bits: 31 for 64-bit Smis, 0 for 31-bit ones.
	if tag, ok := d.lookup("SmiValueShift"); ok {
		if shift := d.values["v8dbg_SmiShiftSize"]; tag+shift != smiValueShift {
			return nil, fmt.Errorf("V8 with Smis shifted by %d bits, not 32 (31-bit Smis, as with pointer compression), is not supported", tag+shift)
		}
	}
	if d.values["v8dbg_HeapObjectTag"] != heapObjectTag || d.values["v8dbg_HeapObjectTagMask"] != heapObjectTagMask ||
		d.values["v8dbg_SmiTag"] != 0 || d.values["v8dbg_SmiTagMask"] != smiTagMask {
		return nil, errors.New("V8's pointer tagging is not the one this profiler reads")
	}
	if _, ok := d.lookup("TaggedSize", "SmiValueShift"); !ok {
		return nil, errors.New("V8 too old: no v8dbg_TaggedSize or v8dbg_SmiValueShift to tell its pointer size")
	}

	l := &Layout{version: version}
	l.FPContext = int32(need("off_fp_context_or_frame_type", "off_fp_context"))
	l.FPFunction = int32(need("off_fp_function"))
	l.HeapObjectMap = uint32(need("class_HeapObject__map__Map"))
	l.MapInstanceType = uint32(need("class_Map__instance_type__uint16_t"))
	l.JSFunctionShared = uint32(need("class_JSFunction__shared__SharedFunctionInfo", "class_JSFunction__shared__Tagged_SharedFunctionInfo_"))
	jsFunctionType := uint16(need("type_JSFunction__JS_FUNCTION_TYPE"))
	l.SharedFunctionInfoType = uint16(need("type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE"))
	l.mapType = uint16(need("type_Map__MAP_TYPE"))
	l.scopeInfoType = uint16(need("type_ScopeInfo__SCOPE_INFO_TYPE"))
	l.scriptType = uint16(need("type_Script__SCRIPT_TYPE"))
	l.fixedArrayType = uint16(need("type_FixedArray__FIXED_ARRAY_TYPE"))
	if v, ok := d.lookup("type_DebugInfo__DEBUG_INFO_TYPE"); ok {
		l.debugInfoType = uint16(v)
	}
	for _, n := range []string{
		"type_UncompiledDataWithoutPreparseData__UNCOMPILED_DATA_WITHOUT_PREPARSE_DATA_TYPE",
		"type_UncompiledDataWithPreparseData__UNCOMPILED_DATA_WITH_PREPARSE_DATA_TYPE",
		"type_UncompiledDataWithoutPreparseDataWithJob__UNCOMPILED_DATA_WITHOUT_PREPARSE_DATA_WITH_JOB_TYPE",
		"type_UncompiledDataWithPreparseDataAndJob__UNCOMPILED_DATA_WITH_PREPARSE_DATA_AND_JOB_TYPE",
	} {
		if v, ok := d.lookup(n); ok {
			l.uncompiledDataTypes = append(l.uncompiledDataTypes, uint16(v))
		}
	}

	l.firstNonstringType = uint16(need("FirstNonstringType"))
	l.stringRepresentationMask = uint16(need("StringRepresentationMask"))
	l.seqStringTag = uint16(need("SeqStringTag"))
	l.consStringTag = uint16(need("ConsStringTag"))
	l.slicedStringTag = uint16(need("SlicedStringTag"))
	l.thinStringTag = uint16(need("ThinStringTag"))
	l.stringEncodingMask = uint16(need("StringEncodingMask"))
	l.oneByteStringTag = uint16(need("OneByteStringTag"))
	l.twoByteStringTag = uint16(need("TwoByteStringTag"))
	l.stringLength = uint32(need("class_String__length__int32_t"))
	l.seqOneByteChars = uint32(need("class_SeqOneByteString__chars__char"))
	l.seqTwoByteChars = uint32(need("class_SeqTwoByteString__chars__char"))
	l.consFirst = uint32(need("class_ConsString__first__String", "class_ConsString__first__Tagged_String_"))
	l.consSecond = uint32(need("class_ConsString__second__String", "class_ConsString__second__Tagged_String_"))
	l.thinActual = uint32(need("class_ThinString__actual__String", "class_ThinString__actual__Tagged_String_"))
	l.slicedParent = uint32(need("class_SlicedString__parent__String", "class_SlicedString__parent__Tagged_String_"))
	l.slicedOffset = uint32(need("class_SlicedString__offset__SMI"))
	l.fixedArrayLength = uint32(need("class_FixedArrayBase__length__SMI"))
	l.fixedArrayData = uint32(need("class_FixedArray__data__uintptr_t"))

	l.sfiNameOrScopeInfo = uint32(need("class_SharedFunctionInfo__name_or_scope_info__Object",
		"class_SharedFunctionInfo__name_or_scope_info__Tagged_Object_",
		"class_SharedFunctionInfo__name_or_scope_info__Tagged_NameOrScopeInfoT_"))
	l.sfiScriptOrDebugInfo = uint32(need("class_SharedFunctionInfo__script_or_debug_info__HeapObject",
		"class_SharedFunctionInfo__script_or_debug_info__Object",
		"class_SharedFunctionInfo__script__Tagged_HeapObject_"))
	if _, ok := d.lookup("class_SharedFunctionInfo__script__Tagged_HeapObject_"); ok {
		// V8 12.1 on keeps a function's DebugInfo in a table of the
		// isolate: the field holds the script only (node 22 and 24).
		l.debugInfoType = 0
	}
	if v, ok := d.lookup("class_SharedFunctionInfo__function_data__Object", "class_SharedFunctionInfo__function_data__Tagged_Object_"); ok {
		l.sfiFunctionData = uint32(v)
	} else {
		// Not exported since V8 12: right after the map, as it has been
		// from V8 8 on (so the OpenTelemetry profiler assumes too).
		l.sfiFunctionData = taggedSize
	}
	if l.debugInfoType != 0 {
		// DebugInfo (V8 up to 12.0, while a debugger is attached) holds
		// the SharedFunctionInfo, a Smi of hints, then the script: no
		// symbol says so, so Function checks the first is the function's.
		l.debugInfoScript = l.HeapObjectMap + 3*taggedSize
	}
	l.scriptName = uint32(need("class_Script__name__Object", "class_Script__name__Tagged_Object_"))
	l.scriptLineEnds = uint32(need("class_Script__line_ends__Object", "class_Script__line_ends__Tagged_Object_"))
	if v, ok := d.lookup("class_Script__source__Object", "class_Script__source__Tagged_Object_"); ok {
		l.scriptSource = uint32(v)
	} else {
		l.scriptSource = l.scriptName - taggedSize // just before the name, back to V8 8.4
	}
	if v, ok := d.lookup("class_UncompiledData__inferred_name__String", "class_UncompiledData__inferred_name__Tagged_String_"); ok {
		l.uncompiledInferredName = uint32(v)
	}
	if v, ok := d.lookup("class_UncompiledData__start_position__int32_t"); ok {
		l.uncompiledStartPosition = uint32(v)
	}

	l.scopeFirstVars = int(need("scopeinfo_idx_first_vars"))
	l.scopeNContextLocals = int(need("scopeinfo_idx_ncontextlocals"))
	if len(missing) > 0 {
		return nil, fmt.Errorf("V8's layout is incomplete: the binary has no %s", strings.Join(missing, ", "))
	}
	if l.scopeNContextLocals < 0 || l.scopeNContextLocals >= l.scopeFirstVars || l.scopeFirstVars > 16 {
		return nil, fmt.Errorf("unexpected ScopeInfo layout: context locals counted at slot %d, listed from slot %d", l.scopeNContextLocals, l.scopeFirstVars)
	}

	// ScopeInfo became a HeapObject of its own (slots right after the
	// map) in V8 9.1.71; before, it was a FixedArray, which is not read.
	_, scopeIsHeapObject := d.lookup("parent_ScopeInfo__HeapObject")
	if !scopeIsHeapObject && version < v8Version(11, 9, 0) {
		// From 11.9 the metadata lost the class hierarchy, but ScopeInfo
		// is a HeapObject still.
		return nil, errors.New("V8 before 9.1 (ScopeInfo a FixedArray) is not supported")
	}
	// The positions' fixed slots (3 and 4) come before the locals.
	l.scopePositionsFixed = version >= v8Version(12, 8, 44) && l.scopeFirstVars > 4

	// JSFunction has subclasses since V8 9.0.14, each an instance type of
	// its own numbered from JS_FUNCTION_TYPE: the Array, Promise and
	// RegExp constructors, the 11 typed array constructors, and, last
	// since V8 9.6.138, class constructors. Builds after 11.3 export the
	// range; before, it is counted here: 16 types, as read from V8 11.3's
	// objects (the OpenTelemetry profiler counts 15, which leaves class
	// constructors out). Earlier builds are not supported.
	first, okFirst := d.lookup("FirstJSFunctionType")
	last, okLast := d.lookup("LastJSFunctionType")
	switch {
	case okFirst && okLast:
		l.FirstJSFunctionType, l.LastJSFunctionType = uint16(first), uint16(last)
	case version == 0:
		return nil, errors.New("cannot tell which instance types are JSFunctions: no v8dbg_FirstJSFunctionType and no V8 version in the binary")
	case version >= v8Version(9, 6, 138):
		l.FirstJSFunctionType, l.LastJSFunctionType = jsFunctionType, jsFunctionType+15
	default:
		return nil, errors.New("V8 before 9.6 (Node.js before 17) is not supported")
	}

	if l.FPFunction >= 0 || l.FPContext >= 0 {
		return nil, fmt.Errorf("unexpected frame layout: function at %d, context at %d from the frame pointer (want both below it)", l.FPFunction, l.FPContext)
	}
	return l, nil
}
