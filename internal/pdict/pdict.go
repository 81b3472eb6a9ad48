// Package pdict builds a pprofile.ProfilesDictionary with constant-time
// deduplication. The pprofile.Set* helpers scan their table linearly, which is
// quadratic over an interval's worth of frames; a Builder keeps one lookup map
// per table beside the table it fills.
package pdict

import (
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Builder fills dict, whose tables must be empty or hold only what this
// Builder put there.
type Builder struct {
	dict pprofile.ProfilesDictionary

	strings   map[string]int32
	functions map[functionKey]int32
	mappings  map[MappingKey]int32
	locations map[locationKey]int32
	stacks    map[string]int32
	links     map[linkKey]int32
	attrs     map[attrKey]int32

	stackKey strings.Builder
}

type functionKey struct{ name, file int32 }

// MappingKey describes one mapping of a binary into an address space.
type MappingKey struct {
	Start, Limit, Offset uint64
	File                 string
	Attr                 int32 // index into the attribute table, 0 for none
}

type locationKey struct {
	mapping  int32
	address  uint64
	function int32
	line     int64
	attr     int32
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
		functions: map[functionKey]int32{},
		mappings:  map[MappingKey]int32{},
		locations: map[locationKey]int32{},
		stacks:    map[string]int32{},
		links:     map[linkKey]int32{},
		attrs:     map[attrKey]int32{},
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
	b.stacks[""] = 0
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

// Function returns the index of the function called name defined in file.
func (b *Builder) Function(name, file string) int32 {
	k := functionKey{b.String(name), b.String(file)}
	if i, ok := b.functions[k]; ok {
		return i
	}
	i := int32(b.dict.FunctionTable().Len())
	f := b.dict.FunctionTable().AppendEmpty()
	f.SetNameStrindex(k.name)
	f.SetSystemNameStrindex(k.name)
	f.SetFilenameStrindex(k.file)
	b.functions[k] = i
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

// Mapping returns the index of the mapping m.
func (b *Builder) Mapping(m MappingKey) int32 {
	if i, ok := b.mappings[m]; ok {
		return i
	}
	i := int32(b.dict.MappingTable().Len())
	pm := b.dict.MappingTable().AppendEmpty()
	pm.SetMemoryStart(m.Start)
	pm.SetMemoryLimit(m.Limit)
	pm.SetFileOffset(m.Offset)
	pm.SetFilenameStrindex(b.String(m.File))
	if m.Attr > 0 {
		pm.AttributeIndices().Append(m.Attr)
	}
	b.mappings[m] = i
	return i
}

// Location returns the index of a location at address in mapping (0 for
// none), with one line in function (0 for an unresolved address) and an
// optional attribute (0 for none).
func (b *Builder) Location(mapping int32, address uint64, function int32, line int64, attr int32) int32 {
	k := locationKey{mapping, address, function, line, attr}
	if i, ok := b.locations[k]; ok {
		return i
	}
	i := int32(b.dict.LocationTable().Len())
	l := b.dict.LocationTable().AppendEmpty()
	l.SetMappingIndex(mapping)
	l.SetAddress(address)
	if function > 0 {
		ln := l.Lines().AppendEmpty()
		ln.SetFunctionIndex(function)
		ln.SetLine(line)
	}
	if attr > 0 {
		l.AttributeIndices().Append(attr)
	}
	b.locations[k] = i
	return i
}

// Stack returns the index of the stack of locations (leaf first).
func (b *Builder) Stack(locations []int32) int32 {
	b.stackKey.Reset()
	for _, l := range locations {
		// Fixed-width little-endian bytes: cheap, collision-free key.
		b.stackKey.WriteByte(byte(l))
		b.stackKey.WriteByte(byte(l >> 8))
		b.stackKey.WriteByte(byte(l >> 16))
		b.stackKey.WriteByte(byte(l >> 24))
	}
	key := b.stackKey.String()
	if i, ok := b.stacks[key]; ok {
		return i
	}
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
