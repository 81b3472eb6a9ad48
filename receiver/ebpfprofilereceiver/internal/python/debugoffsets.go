package python

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// CPython 3.13 starts _PyRuntime with _Py_DebugOffsets
// (Include/internal/pycore_runtime.h): the offsets of the structures a
// debugger or profiler reads, written by the build itself, so the agent
// needs no table entry for a 3.13 build and reads them from the binary's
// initialised data. The struct's own layout changes between minor
// versions (3.14 adds fields in the middle), so only the 3.13 layout below
// is read; a later version stays unknown until its layout is added.
// TestDebugOffsetsMatchDWARF checks the layout and what is derived from it
// against a 3.13 build's debug info.

// debugOffsetsCookie opens _Py_DebugOffsets.
const debugOffsetsCookie = "xdebugpy"

// debugOffsets313 is where each field this package uses sits in 3.13's
// _Py_DebugOffsets (every field is a uint64).
var debugOffsets313 = struct {
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
}{
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
}

// compactUnicodeExtra is what PyCompactUnicodeObject adds to PyASCIIObject
// (utf8_length and the utf8 pointer), the same in 3.12 and 3.13; the debug
// offsets give only the ASCII object's size.
const compactUnicodeExtra = 16

// debugOffsets reads the offsets of a CPython 3.13 whose _PyRuntime is at
// ELF address runtime and whose Py_Version word is version.
func debugOffsets(f *elf.File, runtime uint64, version uint32) (Offsets, error) {
	major, minor := version>>24, version>>16&0xff
	if major != 3 || minor != 13 {
		return Offsets{}, fmt.Errorf("no known _Py_DebugOffsets layout for %d.%d", major, minor)
	}
	l := &debugOffsets313
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
