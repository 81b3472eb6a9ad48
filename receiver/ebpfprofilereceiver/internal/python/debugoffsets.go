package python

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// CPython 3.13 and later start _PyRuntime with _Py_DebugOffsets
// (Include/internal/pycore_runtime.h, 3.14 on pycore_debug_offsets.h): the
// offsets of the structures a debugger or profiler reads, written by the
// build itself, so the agent needs no table entry for such a build and
// reads them from the binary's initialised data. The struct's own layout
// changes between minor versions (3.14 and 3.15 add fields in the middle
// of its sections), so where each field sits is written down per minor
// version below, counted from that version's header; a later version stays
// unknown until its layout is added. TestDebugOffsetsMatchDWARF checks the
// 3.13 layout and what is derived from it against a 3.13 build's debug
// info; the end-to-end tests walk real 3.14 and 3.15 interpreters.

// debugOffsetsCookie opens _Py_DebugOffsets.
const debugOffsetsCookie = "xdebugpy"

// debugOffsetsLayout is where each field this package uses sits in one
// minor version's _Py_DebugOffsets (every field is a uint64).
type debugOffsetsLayout struct {
	size                                               int
	version, freeThreaded                              int
	runtimeInterpHead                                  int
	interpThreadsHead                                  int
	tstateNext, tstateCurrentFrame, tstateThreadID     int
	frameSize, framePrevious, frameExecutable          int
	frameInstrPtr, frameOwner                          int
	codeFilename, codeQualName, codeLineTable          int
	codeFirstLineNo, codeAdaptive                      int
	objectType                                         int
	bytesSize, bytesSval                               int
	unicodeState, unicodeLength, unicodeASCIIObjectEnd int
}

// debugOffsetsLayouts by minor version of CPython 3.
var debugOffsetsLayouts = map[uint32]*debugOffsetsLayout{
	13: {
		size:    584,
		version: 8, freeThreaded: 16,
		runtimeInterpHead:  40,
		interpThreadsHead:  72,
		tstateNext:         168,
		tstateCurrentFrame: 184,
		tstateThreadID:     192,
		frameSize:          224, framePrevious: 232, frameExecutable: 240, frameInstrPtr: 248, frameOwner: 264,
		codeFilename: 280, codeQualName: 296, codeLineTable: 304, codeFirstLineNo: 312, codeAdaptive: 344,
		objectType: 360,
		bytesSize:  520, bytesSval: 528,
		unicodeState: 544, unicodeLength: 552, unicodeASCIIObjectEnd: 560,
	},
	// 3.14: the interpreter state gains code_object_generation and
	// tlbc_generation, the thread state prev, interp, native_thread_id,
	// datastack_chunk and status before or among ours, the frame
	// localsplus and stackpointer, the code object name, co_tlbc and
	// others, the type object tp_flags; sets and longs come before bytes.
	14: {
		size:    760,
		version: 8, freeThreaded: 16,
		runtimeInterpHead:  40,
		interpThreadsHead:  72,
		tstateNext:         192,
		tstateCurrentFrame: 208,
		tstateThreadID:     216,
		frameSize:          248, framePrevious: 256, frameExecutable: 264, frameInstrPtr: 272, frameOwner: 288,
		codeFilename: 320, codeQualName: 336, codeLineTable: 344, codeFirstLineNo: 352, codeAdaptive: 384,
		objectType: 408,
		bytesSize:  600, bytesSval: 608,
		unicodeState: 624, unicodeLength: 632, unicodeASCIIObjectEnd: 640,
	},
	// 3.15: the thread state gains base_frame and the last profiled
	// frame before thread_id, and four fields after; an exception stack
	// item section, two type object fields and a heap type section come
	// before ours.
	15: {
		size:    888,
		version: 8, freeThreaded: 16,
		runtimeInterpHead:  40,
		interpThreadsHead:  72,
		tstateNext:         192,
		tstateCurrentFrame: 208,
		tstateThreadID:     240,
		frameSize:          312, framePrevious: 320, frameExecutable: 328, frameInstrPtr: 336, frameOwner: 352,
		codeFilename: 384, codeQualName: 400, codeLineTable: 408, codeFirstLineNo: 416, codeAdaptive: 448,
		objectType: 472,
		bytesSize:  696, bytesSval: 704,
		unicodeState: 720, unicodeLength: 728, unicodeASCIIObjectEnd: 736,
	},
}

// compactUnicodeExtra is what PyCompactUnicodeObject adds to PyASCIIObject
// (utf8_length and the utf8 pointer), the same in 3.12 to 3.15; the debug
// offsets give only the ASCII object's size (3.15 gives both).
const compactUnicodeExtra = 16

// debugOffsets reads the offsets of a CPython 3.13 or later whose
// _PyRuntime is at ELF address runtime and whose Py_Version word is version.
func debugOffsets(f *elf.File, runtime uint64, version uint32) (Offsets, error) {
	major, minor := version>>24, version>>16&0xff
	l := debugOffsetsLayouts[minor]
	if major != 3 || l == nil {
		return Offsets{}, fmt.Errorf("no known _Py_DebugOffsets layout for %d.%d", major, minor)
	}
	raw := make([]byte, l.size)
	if err := readAt(f, runtime, raw); err != nil {
		return Offsets{}, fmt.Errorf("read _Py_DebugOffsets: %w", err)
	}
	if !bytes.Equal(raw[:len(debugOffsetsCookie)], []byte(debugOffsetsCookie)) {
		return Offsets{}, fmt.Errorf("_PyRuntime does not start with _Py_DebugOffsets (cookie %q)", raw[:len(debugOffsetsCookie)])
	}
	word := func(at int) uint64 { return binary.LittleEndian.Uint64(raw[at:]) }
	if v := word(l.version); v != uint64(version) {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets says version %#x, Py_Version %#x", v, version)
	}
	if word(l.freeThreaded) != 0 {
		// Another object header (ob_tid, ob_ref_local…) and per-thread
		// frames: not walked.
		return Offsets{}, fmt.Errorf("free-threaded build")
	}
	var errs []string
	field := func(name string, at int) uint16 {
		v := word(at)
		if v >= 1<<16-1 { // 0xffff is the kernel's "no field"
			errs = append(errs, fmt.Sprintf("%s=%d", name, v))
			return 0
		}
		return uint16(v)
	}
	o := Offsets{
		RuntimeInterpHead: field("runtime_state.interpreters_head", l.runtimeInterpHead),
		InterpThreadsHead: field("interpreter_state.threads_head", l.interpThreadsHead),
		TStateNext:        field("thread_state.next", l.tstateNext),
		TStateThreadID:    field("thread_state.thread_id", l.tstateThreadID),
		TStateCFrame:      field("thread_state.current_frame", l.tstateCurrentFrame),
		NoCFrame:          true,
		FrameCode:         field("interpreter_frame.executable", l.frameExecutable),
		FramePrevious:     field("interpreter_frame.previous", l.framePrevious),
		FramePrevInstr:    field("interpreter_frame.instr_ptr", l.frameInstrPtr),
		FrameOwner:        field("interpreter_frame.owner", l.frameOwner),
		ObjectType:        field("pyobject.ob_type", l.objectType),
		VarObjectSize:     field("bytes_object.ob_size", l.bytesSize),
		CodeFirstLineNo:   field("code_object.firstlineno", l.codeFirstLineNo),
		CodeFilename:      field("code_object.filename", l.codeFilename),
		CodeQualName:      field("code_object.qualname", l.codeQualName),
		CodeLineTable:     field("code_object.linetable", l.codeLineTable),
		CodeAdaptive:      field("code_object.co_code_adaptive", l.codeAdaptive),
		BytesData:         field("bytes_object.ob_sval", l.bytesSval),
		UnicodeLength:     field("unicode_object.length", l.unicodeLength),
		UnicodeState:      field("unicode_object.state", l.unicodeState),
		UnicodeASCIIData:  field("unicode_object.asciiobject_size", l.unicodeASCIIObjectEnd),
	}
	o.UnicodeData = o.UnicodeASCIIData + compactUnicodeExtra
	if len(errs) > 0 {
		return Offsets{}, fmt.Errorf("_Py_DebugOffsets out of range: %v", errs)
	}
	return o, nil
}
