package stackaggregatorprocessor

import (
	"encoding/binary"
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Frames, stacks, links and sample-attribute sets are identified by their
// content, never by an input dictionary index: every input Profiles brings its
// own dictionary, so the same frame has a different index in each batch.
//
// A frameDict interns that content for one window. Its ids are dense int32
// (0 is never a valid id, so a zero value in a cache means "not looked up").

// attr is one key/value/unit attribute, kept by value so a window never holds
// on to an input Profiles.
type attr struct {
	key, unit string
	value     pcommon.Value
}

type function struct {
	name, systemName, file string
	startLine              int64
}

type line struct {
	fn           function
	hasFn        bool
	line, column int64
}

type mapping struct {
	file                 string
	start, limit, offset uint64
	attrs                []attr
}

// frame is a location by content.
type frame struct {
	address uint64
	mapping *mapping // nil: no mapping
	lines   []line
	attrs   []attr
}

// link is a trace link by content (trace ID then span ID).
type link [24]byte

// frameDict interns frames, stacks, links and sample-attribute sets of one
// window by content.
type frameDict struct {
	frames   []frame // index = frame id; [0] unused
	frameIdx map[string]int32

	stackFrames []int32 // all stacks' frame ids, leaf first, back to back
	stackOff    []int32 // stack id → start in stackFrames; [0] unused; len = stacks+1
	stackIdx    map[string]int32

	links   []link
	linkIdx map[link]int32

	attrSets   [][]attr
	attrSetIdx map[string]int32
}

func newFrameDict() *frameDict {
	return &frameDict{
		frames:     make([]frame, 1),
		frameIdx:   map[string]int32{},
		stackOff:   []int32{0, 0},
		stackIdx:   map[string]int32{},
		links:      make([]link, 1),
		linkIdx:    map[link]int32{},
		attrSets:   make([][]attr, 1),
		attrSetIdx: map[string]int32{},
	}
}

// stack returns the frame ids of stack id (leaf first).
func (d *frameDict) stack(id int32) []int32 {
	return d.stackFrames[d.stackOff[id]:d.stackOff[id+1]]
}

// internStack returns the id of the stack with these frame ids; key is their
// byte encoding (see appendStackKey).
func (d *frameDict) internStack(key []byte, frames []int32) int32 {
	if id, ok := d.stackIdx[string(key)]; ok {
		return id
	}
	id := int32(len(d.stackOff) - 1)
	d.stackFrames = append(d.stackFrames, frames...)
	d.stackOff = append(d.stackOff, int32(len(d.stackFrames)))
	d.stackIdx[string(key)] = id
	return id
}

// lookupStack is internStack without inserting (0 when absent).
func (d *frameDict) lookupStack(key []byte) int32 { return d.stackIdx[string(key)] }

func appendStackKey(b []byte, frames []int32) []byte {
	for _, f := range frames {
		b = binary.LittleEndian.AppendUint32(b, uint32(f))
	}
	return b
}

// syntheticStack interns a one-frame stack whose frame has only a function
// name: the "[truncated]" and "[other]" folds.
func (d *frameDict) syntheticStack(name string) int32 {
	fr := frame{lines: []line{{fn: function{name: name}, hasFn: true}}}
	key := string(appendFrameKey(nil, &fr))
	id, ok := d.frameIdx[key]
	if !ok {
		id = int32(len(d.frames))
		d.frames = append(d.frames, fr)
		d.frameIdx[key] = id
	}
	frames := []int32{id}
	return d.internStack(appendStackKey(nil, frames), frames)
}

func (d *frameDict) internLink(l link) int32 {
	if id, ok := d.linkIdx[l]; ok {
		return id
	}
	id := int32(len(d.links))
	d.links = append(d.links, l)
	d.linkIdx[l] = id
	return id
}

// --- content keys -------------------------------------------------------

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendValue(b []byte, v pcommon.Value) []byte {
	b = append(b, byte(v.Type()))
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return appendString(b, v.Str())
	case pcommon.ValueTypeInt:
		return binary.LittleEndian.AppendUint64(b, uint64(v.Int()))
	case pcommon.ValueTypeDouble:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(v.Double()))
	case pcommon.ValueTypeBool:
		if v.Bool() {
			return append(b, 1)
		}
		return append(b, 0)
	default:
		// Maps, slices and bytes: their JSON-ish string form is a faithful key.
		return appendString(b, v.AsString())
	}
}

func appendAttrs(b []byte, as []attr) []byte {
	b = binary.AppendUvarint(b, uint64(len(as)))
	for _, a := range as {
		b = appendString(b, a.key)
		b = appendString(b, a.unit)
		b = appendValue(b, a.value)
	}
	return b
}

func appendFrameKey(b []byte, fr *frame) []byte {
	b = binary.LittleEndian.AppendUint64(b, fr.address)
	if m := fr.mapping; m != nil {
		b = append(b, 1)
		b = appendString(b, m.file)
		b = binary.LittleEndian.AppendUint64(b, m.start)
		b = binary.LittleEndian.AppendUint64(b, m.limit)
		b = binary.LittleEndian.AppendUint64(b, m.offset)
		b = appendAttrs(b, m.attrs)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(fr.lines)))
	for _, l := range fr.lines {
		if l.hasFn {
			b = append(b, 1)
			b = appendString(b, l.fn.name)
			b = appendString(b, l.fn.systemName)
			b = appendString(b, l.fn.file)
			b = binary.AppendVarint(b, l.fn.startLine)
		} else {
			b = append(b, 0)
		}
		b = binary.AppendVarint(b, l.line)
		b = binary.AppendVarint(b, l.column)
	}
	return appendAttrs(b, fr.attrs)
}

// --- decoding from an input dictionary ------------------------------------

// inputDict reads one input Profiles' dictionary with bounds checks (input may
// come from another collector or a fuzzer) and caches each location's content
// key, so a location shared by many stacks is decoded once per batch.
type inputDict struct {
	dict    pprofile.ProfilesDictionary
	strs    pcommon.StringSlice
	locs    pprofile.LocationSlice
	stacks  pprofile.StackSlice
	links   pprofile.LinkSlice
	attrTab pprofile.KeyValueAndUnitSlice
	nFuncs  int

	locFrame []*frame // decoded location, nil until needed
	locKey   []string
	locBad   []bool
	// mapOf is each decoded mapping, nil until needed: the batch's
	// locations share a few mappings, and decoding one (its build-ID
	// attributes copied out of pdata) for every location was most of the
	// allocations of a merge.
	mapOf   []*mapping
	scratch []byte
}

func newInputDict(dict pprofile.ProfilesDictionary) *inputDict {
	locs := dict.LocationTable()
	return &inputDict{
		dict:     dict,
		strs:     dict.StringTable(),
		locs:     locs,
		stacks:   dict.StackTable(),
		links:    dict.LinkTable(),
		attrTab:  dict.AttributeTable(),
		nFuncs:   dict.FunctionTable().Len(),
		locFrame: make([]*frame, locs.Len()),
		locKey:   make([]string, locs.Len()),
		locBad:   make([]bool, locs.Len()),
		mapOf:    make([]*mapping, dict.MappingTable().Len()),
	}
}

func (in *inputDict) str(i int32) (string, bool) {
	if i < 0 || int(i) >= in.strs.Len() {
		return "", false
	}
	return in.strs.At(int(i)), true
}

func (in *inputDict) attrs(idx pcommon.Int32Slice) ([]attr, bool) {
	if idx.Len() == 0 {
		return nil, true
	}
	out := make([]attr, 0, idx.Len())
	for i := 0; i < idx.Len(); i++ {
		ai := idx.At(i)
		if ai <= 0 || int(ai) >= in.attrTab.Len() {
			return nil, false
		}
		kv := in.attrTab.At(int(ai))
		k, ok1 := in.str(kv.KeyStrindex())
		u, ok2 := in.str(kv.UnitStrindex())
		if !ok1 || !ok2 {
			return nil, false
		}
		v := pcommon.NewValueEmpty()
		kv.Value().CopyTo(v)
		out = append(out, attr{key: k, unit: u, value: v})
	}
	return out, true
}

// location decodes input location i; ok is false for any out-of-range index
// along the way.
func (in *inputDict) location(i int32) (key string, fr *frame, ok bool) {
	if i <= 0 || int(i) >= in.locs.Len() {
		return "", nil, false
	}
	if in.locBad[i] {
		return "", nil, false
	}
	if in.locFrame[i] != nil {
		return in.locKey[i], in.locFrame[i], true
	}
	fr, ok = in.decodeLocation(in.locs.At(int(i)))
	if !ok {
		in.locBad[i] = true
		return "", nil, false
	}
	in.scratch = appendFrameKey(in.scratch[:0], fr)
	in.locFrame[i] = fr
	in.locKey[i] = string(in.scratch)
	return in.locKey[i], fr, true
}

// mapping decodes input mapping i once; ok is false for any out-of-range
// index in it. The frames of the batch's locations share what it returns.
func (in *inputDict) mapping(i int32) (*mapping, bool) {
	if i <= 0 || int(i) >= len(in.mapOf) {
		return nil, false
	}
	if m := in.mapOf[i]; m != nil {
		return m, true
	}
	m := in.dict.MappingTable().At(int(i))
	file, ok := in.str(m.FilenameStrindex())
	if !ok {
		return nil, false
	}
	as, ok := in.attrs(m.AttributeIndices())
	if !ok {
		return nil, false
	}
	in.mapOf[i] = &mapping{file: file, start: m.MemoryStart(), limit: m.MemoryLimit(), offset: m.FileOffset(), attrs: as}
	return in.mapOf[i], true
}

func (in *inputDict) decodeLocation(loc pprofile.Location) (*frame, bool) {
	fr := &frame{address: loc.Address()}
	if mi := loc.MappingIndex(); mi != 0 {
		m, ok := in.mapping(mi)
		if !ok {
			return nil, false
		}
		fr.mapping = m
	}
	lines := loc.Lines()
	if lines.Len() > 0 {
		fr.lines = make([]line, lines.Len())
	}
	for j := 0; j < lines.Len(); j++ {
		l := lines.At(j)
		fr.lines[j] = line{line: l.Line(), column: l.Column()}
		fi := l.FunctionIndex()
		if fi == 0 {
			continue
		}
		if fi < 0 || int(fi) >= in.nFuncs {
			return nil, false
		}
		f := in.dict.FunctionTable().At(int(fi))
		name, ok1 := in.str(f.NameStrindex())
		sys, ok2 := in.str(f.SystemNameStrindex())
		file, ok3 := in.str(f.FilenameStrindex())
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		fr.lines[j].fn = function{name: name, systemName: sys, file: file, startLine: f.StartLine()}
		fr.lines[j].hasFn = true
	}
	as, ok := in.attrs(loc.AttributeIndices())
	if !ok {
		return nil, false
	}
	fr.attrs = as
	return fr, true
}

// frameID returns the window frame id of input location i, interning it when
// insert is set (else 0 when the window has not seen it).
func (d *frameDict) frameID(in *inputDict, i int32, insert bool) (int32, bool) {
	key, fr, ok := in.location(i)
	if !ok {
		return 0, false
	}
	if id, ok := d.frameIdx[key]; ok {
		return id, true
	}
	if !insert {
		return 0, true
	}
	id := int32(len(d.frames))
	d.frames = append(d.frames, *fr)
	d.frameIdx[key] = id
	return id, true
}

// sampleAttrSet interns a sample's attribute set (0 = none).
func (d *frameDict) sampleAttrSet(in *inputDict, idx pcommon.Int32Slice, insert bool) (int32, bool) {
	if idx.Len() == 0 {
		return 0, true
	}
	as, ok := in.attrs(idx)
	if !ok {
		return 0, false
	}
	in.scratch = appendAttrs(in.scratch[:0], as)
	if id, ok := d.attrSetIdx[string(in.scratch)]; ok || !insert {
		return id, true
	}
	id := int32(len(d.attrSets))
	d.attrSets = append(d.attrSets, as)
	d.attrSetIdx[string(in.scratch)] = id
	return id, true
}
