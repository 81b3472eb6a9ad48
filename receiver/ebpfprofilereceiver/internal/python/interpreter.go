// Package python names CPython frames: it recognises a CPython interpreter
// binary (the executable or libpython) and its version, gives the kernel
// the structure offsets its frame walk needs (bpf/python_walk.h), and turns
// the code objects that walk records into function, file and line by
// reading the process's memory.
//
// Offsets come from a table keyed by minor version (3.7 to 3.12), checked
// against the DWARF of a real build of that version in the tests, or, for
// 3.13 and later, from the _Py_DebugOffsets the build wrote into its own _PyRuntime
// (debugoffsets.go). A CPython with neither is reported (ErrUnknownVersion)
// and stays native-only: wrong offsets would give wrong frames.
package python

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
)

// FrameLayout is how a CPython version keeps its frames, and with them
// what a frame's instruction word is and how its code object maps
// instructions to lines.
type FrameLayout uint8

const (
	// InterpreterFrames (3.11 on): _PyInterpreterFrame, whose prev_instr
	// (3.13 on: instr_ptr) points at the last instruction; lines from the
	// location table (co_linetable, Objects/locations.md).
	InterpreterFrames FrameLayout = iota
	// FrameObjects310 (3.10): PyFrameObject, one _PyEval_EvalFrameDefault
	// call each; f_lasti counts 2-byte code units; lines from the PEP 626
	// co_linetable.
	FrameObjects310
	// FrameObjects (3.7 to 3.9): PyFrameObject; f_lasti counts bytes; lines
	// from co_lnotab.
	FrameObjects
)

// Offsets are byte offsets into one CPython version's structures.
type Offsets struct {
	Frames FrameLayout

	// Read by the kernel's walk.
	RuntimeInterpHead  uint16 // _PyRuntimeState.interpreters.head
	InterpThreadsHead  uint16 // PyInterpreterState.threads.head (FrameObjects*: .tstate_head)
	TStateNext         uint16 // PyThreadState.next
	TStateThreadID     uint16 // PyThreadState.thread_id (pthread_self)
	TStateCFrame       uint16 // PyThreadState.cframe (3.13: .current_frame, FrameObjects*: .frame; see NoCFrame)
	CFrameCurrentFrame uint16 // _PyCFrame.current_frame
	// NoCFrame: the thread state points at its current frame itself (3.13
	// removed _PyCFrame; 3.10 and older keep PyThreadState.frame);
	// CFrameCurrentFrame is unused.
	NoCFrame       bool
	FrameCode      uint16 // _PyInterpreterFrame.f_code (PyFrameObject.f_code)
	FramePrevious  uint16 // _PyInterpreterFrame.previous (PyFrameObject.f_back)
	FramePrevInstr uint16 // _PyInterpreterFrame.prev_instr (PyFrameObject.f_lasti, an int at a word's start)
	FrameIsEntry   uint16 // _PyInterpreterFrame.is_entry (3.11; see HasIsEntry)
	HasIsEntry     bool   // 3.12 marks eval entries with a shim frame instead
	FrameOwner     uint16 // _PyInterpreterFrame.owner (InterpreterFrames only)

	// Read in user space.
	ObjectType       uint16 // PyObject.ob_type
	VarObjectSize    uint16 // PyVarObject.ob_size
	CodeFirstLineNo  uint16 // PyCodeObject.co_firstlineno
	CodeFilename     uint16 // PyCodeObject.co_filename
	CodeQualName     uint16 // PyCodeObject.co_qualname (3.10 and older: co_name, qualified from the source by sourcenames.go)
	CodeLineTable    uint16 // PyCodeObject.co_linetable (bytes; 3.9 and older: co_lnotab)
	CodeAdaptive     uint16 // PyCodeObject.co_code_adaptive (the instructions; InterpreterFrames only)
	BytesData        uint16 // PyBytesObject.ob_sval
	UnicodeLength    uint16 // PyASCIIObject.length
	UnicodeState     uint16 // PyASCIIObject.state
	UnicodeASCIIData uint16 // sizeof(PyASCIIObject): data of a compact ASCII string
	UnicodeData      uint16 // sizeof(PyCompactUnicodeObject): data of another compact string
}

// frameObjects39 is the layout CPython 3.8 and 3.9 share (3.7 and 3.10
// differ from it in a few fields, below).
var frameObjects39 = Offsets{
	Frames:            FrameObjects,
	RuntimeInterpHead: 32,
	InterpThreadsHead: 8,
	TStateNext:        8,
	TStateThreadID:    176,
	TStateCFrame:      24,
	NoCFrame:          true,
	FrameCode:         32,
	FramePrevious:     24,
	FramePrevInstr:    104,
	ObjectType:        8,
	VarObjectSize:     16,
	CodeFirstLineNo:   40,
	CodeFilename:      104,
	CodeQualName:      112,
	CodeLineTable:     120,
	BytesData:         32,
	UnicodeLength:     16,
	UnicodeState:      32,
	UnicodeASCIIData:  48,
	UnicodeData:       72,
}

// knownOffsets by (major, minor), x86-64, from Include/cpython/pystate.h,
// Include/internal/pycore_frame.h (3.10 and older: Include/cpython/frameobject.h),
// Include/cpython/code.h and Include/cpython/unicodeobject.h of each
// version; TestOffsetsMatchDWARF checks them against builds' debug info.
var knownOffsets = map[[2]int]Offsets{
	// 3.7: the code object's fields 8 bytes earlier (no co_posonlyargcount),
	// the runtime's interpreters 8 bytes earlier.
	{3, 7}: func() Offsets {
		o := frameObjects39
		o.RuntimeInterpHead = 24
		o.CodeFirstLineNo, o.CodeFilename, o.CodeQualName, o.CodeLineTable = 36, 96, 104, 112
		return o
	}(),
	{3, 8}: frameObjects39,
	{3, 9}: frameObjects39,
	// 3.10: f_lasti counts code units and moved up; co_linetable (PEP 626)
	// replaced co_lnotab at the same place.
	{3, 10}: func() Offsets {
		o := frameObjects39
		o.Frames = FrameObjects310
		o.FramePrevInstr = 96
		return o
	}(),
	{3, 11}: {
		RuntimeInterpHead:  40,
		InterpThreadsHead:  16,
		TStateNext:         8,
		TStateThreadID:     152,
		TStateCFrame:       56,
		CFrameCurrentFrame: 8,
		FrameCode:          32,
		FramePrevious:      48,
		FramePrevInstr:     56,
		FrameIsEntry:       68,
		HasIsEntry:         true,
		FrameOwner:         69,
		ObjectType:         8,
		VarObjectSize:      16,
		CodeFirstLineNo:    72,
		CodeFilename:       112,
		CodeQualName:       128,
		CodeLineTable:      136,
		CodeAdaptive:       184,
		BytesData:          32,
		UnicodeLength:      16,
		UnicodeState:       32,
		UnicodeASCIIData:   48,
		UnicodeData:        72,
	},
	// 3.12: the frame starts with f_code, has no is_entry (a shim frame
	// owned by the C stack marks each eval entry instead), and str lost
	// its wstr fields.
	{3, 12}: {
		RuntimeInterpHead:  40,
		InterpThreadsHead:  72,
		TStateNext:         8,
		TStateThreadID:     136,
		TStateCFrame:       56,
		CFrameCurrentFrame: 0,
		FrameCode:          0,
		FramePrevious:      8,
		FramePrevInstr:     56,
		FrameOwner:         70,
		ObjectType:         8,
		VarObjectSize:      16,
		CodeFirstLineNo:    68,
		CodeFilename:       112,
		CodeQualName:       128,
		CodeLineTable:      136,
		CodeAdaptive:       192,
		BytesData:          32,
		UnicodeLength:      16,
		UnicodeState:       32,
		UnicodeASCIIData:   40,
		UnicodeData:        56,
	},
}

// Interpreter is what one CPython binary tells the agent; computed once per
// file identity and shared by every process that maps it.
type Interpreter struct {
	Major, Minor, Micro int    // Micro -1: not known (before 3.11)
	RuntimeVA           uint64 // ELF address of _PyRuntime
	CodeTypeVA          uint64 // ELF address of PyCode_Type
	Offsets             Offsets
	segments            symbolize.Segments // to place it in a process
}

func (in *Interpreter) String() string {
	if in.Micro < 0 {
		return fmt.Sprintf("CPython %d.%d", in.Major, in.Minor)
	}
	return fmt.Sprintf("CPython %d.%d.%d", in.Major, in.Minor, in.Micro)
}

// ErrNotPython: the binary holds no CPython runtime.
var ErrNotPython = errors.New("not a CPython interpreter")

// ErrUnknownVersion wraps the error for a CPython whose structure offsets
// the agent does not know.
var ErrUnknownVersion = errors.New("CPython version without known structure offsets")

// MaybeInterpreter reports whether a mapped file's name can be a CPython
// executable or library (python3.11, libpython3.11.so.1.0), so the agent
// does not open every binary of every process to find out.
func MaybeInterpreter(path string) bool {
	base := filepath.Base(path)
	return strings.HasPrefix(base, "python") || strings.HasPrefix(base, "libpython")
}

// Inspect recognises a CPython binary: the _PyRuntime and PyCode_Type
// symbols, and the version from Py_Version (CPython ≥ 3.11 exports it) or,
// before 3.11, from the API functions it exports (minorBefore311).
func Inspect(f *elf.File) (*Interpreter, error) {
	syms := map[string]uint64{"_PyRuntime": 0, "PyCode_Type": 0, "Py_Version": 0}
	for _, a := range addedIn {
		syms[a.name] = 0
	}
	findSymbols(f, syms)
	if syms["_PyRuntime"] == 0 {
		return nil, ErrNotPython
	}
	in := &Interpreter{RuntimeVA: syms["_PyRuntime"], CodeTypeVA: syms["PyCode_Type"], segments: symbolize.NewSegments(f.Progs)}
	var v uint32
	if syms["Py_Version"] == 0 {
		minor, err := minorBefore311(syms)
		if err != nil {
			return nil, fmt.Errorf("%w: no Py_Version symbol (CPython before 3.11), and %w", ErrUnknownVersion, err)
		}
		in.Major, in.Minor, in.Micro = 3, minor, -1
	} else {
		var err error
		if v, err = readUint32(f, syms["Py_Version"]); err != nil {
			return nil, fmt.Errorf("read Py_Version: %w", err)
		}
		in.Major, in.Minor, in.Micro = int(v>>24), int(v>>16&0xff), int(v>>8&0xff)
	}
	if in.CodeTypeVA == 0 {
		return nil, fmt.Errorf("%s: no PyCode_Type symbol", in)
	}
	if off, ok := knownOffsets[[2]int{in.Major, in.Minor}]; ok {
		in.Offsets = off
		return in, nil
	}
	off, err := debugOffsets(f, in.RuntimeVA, v)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrUnknownVersion, in, err)
	}
	in.Offsets = off
	return in, nil
}

// addedIn are functions CPython added to its API in a minor version
// before 3.11 and kept since: which of them a binary exports (its dynamic
// symbols: libpython's, or the executable's, which exports its API to
// extension modules) tells 3.7 to 3.10 apart, which carry no Py_Version.
// A build of those versions keeps its version string nowhere in its data
// (GCC writes PY_VERSION into Py_GetVersion's code as immediates).
var addedIn = []struct {
	minor int
	name  string
}{{8, "PyCode_NewWithPosOnlyArgs"}, {9, "PyFrame_GetCode"}, {10, "PyAIter_Check"}}

// minorBefore311 is the minor version of a CPython 3 before 3.11 (it has
// _PyRuntime, so 3.7 or later) from the functions it exports: each of
// addedIn up to its version, none after. syms holds addedIn's addresses.
func minorBefore311(syms map[string]uint64) (int, error) {
	minor := 7
	for _, a := range addedIn {
		if syms[a.name] == 0 {
			break
		}
		minor = a.minor
	}
	for _, a := range addedIn {
		if a.minor > minor && syms[a.name] != 0 {
			return 0, fmt.Errorf("it exports %s (3.%d) but not what 3.%d added", a.name, a.minor, minor+1)
		}
	}
	return minor, nil
}

// findSymbols fills the addresses of the wanted names from .dynsym, then
// .symtab (a stripped binary has only the first; CPython exports these).
func findSymbols(f *elf.File, want map[string]uint64) {
	for _, list := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, _ := list()
		missing := 0
		for _, s := range syms {
			if v, ok := want[s.Name]; ok && v == 0 && s.Value != 0 {
				want[s.Name] = s.Value
			}
		}
		for _, v := range want {
			if v == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
	}
}

// readUint32 reads the little-endian word at ELF address va from the file.
func readUint32(f *elf.File, va uint64) (uint32, error) {
	var b [4]byte
	if err := readAt(f, va, b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// readAt fills b from ELF address va of the file (initialised data: what
// a process has there before it runs).
func readAt(f *elf.File, va uint64, b []byte) error {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || va < p.Vaddr || va+uint64(len(b)) > p.Vaddr+p.Filesz {
			continue
		}
		_, err := p.ReadAt(b, int64(va-p.Vaddr))
		return err
	}
	return fmt.Errorf("address %#x (%d bytes) is in no loaded segment with file data", va, len(b))
}

// Bias is the difference between run-time and ELF addresses of the binary
// when its code at file offset fileOffset is mapped at start
// (symbolize.Segments.LoadBias).
func (in *Interpreter) Bias(start, fileOffset uint64) (uint64, bool) {
	return in.segments.LoadBias(start, fileOffset)
}
