// Package pdict builds a pprofile.ProfilesDictionary with constant-time
// deduplication. The pprofile.Set* helpers scan their table linearly, which is
// quadratic over an interval's worth of frames; a Builder keeps one lookup map
// per table beside the table it fills.
package pdict

import (
	"encoding/binary"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Builder fills dict, whose tables must be empty or hold only what this
// Builder put there.
type Builder struct {
	dict pprofile.ProfilesDictionary

	strings   map[string]int32
	functions map[Func]int32
	attrs     map[attrKey]int32 // string attributes without a unit
	values    map[string]int32  // every other attribute, by encoded content
	mappings  map[string]int32  // by encoded content
	locations map[string]int32  // by encoded content
	stacks    map[string]int32
	links     map[linkKey]int32

	key []byte // scratch for the encoded keys
}

// Func is a function by content.
type Func struct {
	Name, SystemName, File string
	StartLine              int64
}

// MappingKey describes one mapping of a binary into an address space.
type MappingKey struct {
	Start, Limit, Offset uint64
	File                 string
	Attr                 int32 // index into the attribute table, 0 for none
}

// Line is one line of a location: a function (index into the function
// table, 0 for none) and where in it.
type Line struct {
	Function     int32
	Line, Column int64
}

type linkKey struct {
	trace [16]byte
	span  [8]byte
}

type attrKey struct{ key, value string }

// New returns a Builder over dict and puts the zero entry every table must
// start with.
func New(dict pprofile.ProfilesDictionary) *Builder {
	b := &Builder{
		dict:      dict,
		strings:   map[string]int32{},
		functions: map[Func]int32{},
		attrs:     map[attrKey]int32{},
		values:    map[string]int32{},
		mappings:  map[string]int32{},
		locations: map[string]int32{},
		stacks:    map[string]int32{},
		links:     map[linkKey]int32{},
	}
	if dict.StringTable().Len() == 0 {
		dict.StringTable().Append("")
	}
	b.strings[""] = 0
	if dict.FunctionTable().Len() == 0 {
		dict.FunctionTable().AppendEmpty()
	}
	if dict.MappingTable().Len() == 0 {
		dict.MappingTable().AppendEmpty()
	}
	if dict.LocationTable().Len() == 0 {
		dict.LocationTable().AppendEmpty()
	}
	if dict.StackTable().Len() == 0 {
		dict.StackTable().AppendEmpty()
	}
	b.stacks[string(appendIndices(nil, nil))] = 0 // the empty stack
	if dict.LinkTable().Len() == 0 {
		dict.LinkTable().AppendEmpty()
	}
	b.links[linkKey{}] = 0
	if dict.AttributeTable().Len() == 0 {
		dict.AttributeTable().AppendEmpty()
	}
	return b
}

// Dictionary is the dictionary being built.
func (b *Builder) Dictionary() pprofile.ProfilesDictionary { return b.dict }

// String returns the index of s in the string table.
func (b *Builder) String(s string) int32 {
	if i, ok := b.strings[s]; ok {
		return i
	}
	i := int32(b.dict.StringTable().Len())
	b.dict.StringTable().Append(s)
	b.strings[s] = i
	return i
}

// Function returns the index of the function called name (its system name
// too) defined in file.
func (b *Builder) Function(name, file string) int32 {
	return b.FunctionOf(Func{Name: name, SystemName: name, File: file})
}

// FunctionOf returns the index of the function f.
func (b *Builder) FunctionOf(f Func) int32 {
	if i, ok := b.functions[f]; ok {
		return i
	}
	i := int32(b.dict.FunctionTable().Len())
	fn := b.dict.FunctionTable().AppendEmpty()
	fn.SetNameStrindex(b.String(f.Name))
	fn.SetSystemNameStrindex(b.String(f.SystemName))
	fn.SetFilenameStrindex(b.String(f.File))
	fn.SetStartLine(f.StartLine)
	b.functions[f] = i
	return i
}

// Attribute returns the index of the string attribute key=value.
func (b *Builder) Attribute(key, value string) int32 {
	k := attrKey{key, value}
	if i, ok := b.attrs[k]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	a := b.dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(b.String(key))
	a.Value().SetStr(value)
	b.attrs[k] = i
	return i
}

// AttributeOf returns the index of the attribute key=v in unit ("" for
// none), of any value type.
func (b *Builder) AttributeOf(key, unit string, v pcommon.Value) int32 {
	if unit == "" && v.Type() == pcommon.ValueTypeStr {
		return b.Attribute(key, v.Str())
	}
	b.key = appendString(b.key[:0], key)
	b.key = appendString(b.key, unit)
	// The type first: the string forms of 1 and "1" are equal.
	b.key = append(b.key, byte(v.Type()))
	b.key = appendString(b.key, v.AsString())
	if i, ok := b.values[string(b.key)]; ok {
		return i
	}
	i := int32(b.dict.AttributeTable().Len())
	a := b.dict.AttributeTable().AppendEmpty()
	a.SetKeyStrindex(b.String(key))
	a.SetUnitStrindex(b.String(unit))
	v.CopyTo(a.Value())
	b.values[string(b.key)] = i
	return i
}

// Mapping returns the index of the mapping m.
func (b *Builder) Mapping(m MappingKey) int32 {
	if m.Attr > 0 {
		return b.MappingOf(m.Start, m.Limit, m.Offset, m.File, []int32{m.Attr})
	}
	return b.MappingOf(m.Start, m.Limit, m.Offset, m.File, nil)
}

// MappingOf returns the index of the mapping of file at [start, limit) from
// offset, with attributes attrs (indices into the attribute table).
func (b *Builder) MappingOf(start, limit, offset uint64, file string, attrs []int32) int32 {
	b.key = binary.LittleEndian.AppendUint64(b.key[:0], start)
	b.key = binary.LittleEndian.AppendUint64(b.key, limit)
	b.key = binary.LittleEndian.AppendUint64(b.key, offset)
	b.key = appendString(b.key, file)
	b.key = appendIndices(b.key, attrs)
	if i, ok := b.mappings[string(b.key)]; ok {
		return i
	}
	key := string(b.key)
	i := int32(b.dict.MappingTable().Len())
	pm := b.dict.MappingTable().AppendEmpty()
	pm.SetMemoryStart(start)
	pm.SetMemoryLimit(limit)
	pm.SetFileOffset(offset)
	pm.SetFilenameStrindex(b.String(file))
	pm.AttributeIndices().Append(attrs...)
	b.mappings[key] = i
	return i
}

// Location returns the index of a location at address in mapping (0 for
// none), with one line in function (0 for an unresolved address) and an
// optional attribute (0 for none).
func (b *Builder) Location(mapping int32, address uint64, function int32, line int64, attr int32) int32 {
	var lines []Line
	if function > 0 {
		lines = []Line{{Function: function, Line: line}}
	}
	var attrs []int32
	if attr > 0 {
		attrs = []int32{attr}
	}
	return b.LocationOf(mapping, address, lines, attrs)
}

// LocationOf returns the index of a location at address in mapping (0 for
// none) with lines (innermost inlined call first, as OTLP orders them) and
// attributes attrs.
func (b *Builder) LocationOf(mapping int32, address uint64, lines []Line, attrs []int32) int32 {
	b.key = binary.LittleEndian.AppendUint32(b.key[:0], uint32(mapping))
	b.key = binary.LittleEndian.AppendUint64(b.key, address)
	b.key = binary.LittleEndian.AppendUint32(b.key, uint32(len(lines)))
	for _, l := range lines {
		b.key = binary.LittleEndian.AppendUint32(b.key, uint32(l.Function))
		b.key = binary.LittleEndian.AppendUint64(b.key, uint64(l.Line))
		b.key = binary.LittleEndian.AppendUint64(b.key, uint64(l.Column))
	}
	b.key = appendIndices(b.key, attrs)
	if i, ok := b.locations[string(b.key)]; ok {
		return i
	}
	key := string(b.key)
	i := int32(b.dict.LocationTable().Len())
	loc := b.dict.LocationTable().AppendEmpty()
	loc.SetMappingIndex(mapping)
	loc.SetAddress(address)
	for _, l := range lines {
		ol := loc.Lines().AppendEmpty()
		ol.SetFunctionIndex(l.Function)
		ol.SetLine(l.Line)
		ol.SetColumn(l.Column)
	}
	loc.AttributeIndices().Append(attrs...)
	b.locations[key] = i
	return i
}

// Stack returns the index of the stack of locations (leaf first).
func (b *Builder) Stack(locations []int32) int32 {
	b.key = appendIndices(b.key[:0], locations)
	if i, ok := b.stacks[string(b.key)]; ok {
		return i
	}
	key := string(b.key)
	i := int32(b.dict.StackTable().Len())
	s := b.dict.StackTable().AppendEmpty()
	s.LocationIndices().FromRaw(locations)
	b.stacks[key] = i
	return i
}

// Link returns the index of the link to trace/span; the zero IDs are index 0.
func (b *Builder) Link(trace [16]byte, span [8]byte) int32 {
	k := linkKey{trace, span}
	if i, ok := b.links[k]; ok {
		return i
	}
	i := int32(b.dict.LinkTable().Len())
	l := b.dict.LinkTable().AppendEmpty()
	l.SetTraceID(pcommon.TraceID(trace))
	l.SetSpanID(pcommon.SpanID(span))
	b.links[k] = i
	return i
}

// appendString appends s with its length first, so that concatenated
// fields cannot run into each other.
func appendString(dst []byte, s string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

// appendIndices appends a count and then fixed-width table indices.
func appendIndices(dst []byte, idx []int32) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(idx)))
	for _, i := range idx {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(i))
	}
	return dst
}
