package sampler

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python"
)

// MaxPythonProcesses bounds the CPython processes whose interpreter frames
// the kernel walks at once.
const MaxPythonProcesses = 4096

// PythonProcess tells the kernel where a CPython process keeps its
// interpreter state: the address of _PyRuntime and the structure offsets
// of its version (see bpf/python_walk.h).
type PythonProcess struct {
	Runtime            uint64
	RuntimeInterpHead  uint16
	InterpThreadsHead  uint16
	TStateNext         uint16
	TStateThreadID     uint16
	TStateCFrame       uint16
	CFrameCurrentFrame uint16
	FrameCode          uint16
	FramePrevious      uint16
	FramePrevInstr     uint16 // 3.10 and older: f_lasti, an int read as the low half of a word
	FrameIsEntry       uint16 // NoField when the version has none (3.12), EveryFrame (3.10 and older)
	FrameOwner         uint16 // NoField when the version has none (3.10 and older)
}

// NoField is an offset a CPython version does not have.
const NoField = 0xffff

// EveryFrame is FrameIsEntry of CPython 3.10 and older, where each Python
// frame has a _PyEval_EvalFrameDefault call of its own (PY_EVERY_FRAME).
const EveryFrame = 0xfffe

// frameWindow is the most of a frame the kernel reads at once, from its
// lowest field on (PY_FRAME_WINDOW in bpf/python_walk.h).
const frameWindow = 88

// maxPythonFrames is PY_MAX_FRAMES in bpf/python_walk.h: the most Python
// frames the kernel records for a sample.
const maxPythonFrames = 48

// PythonMarker separates a user stack's native frames from the Python
// frames the kernel appended (code object | entry bit, last instruction
// pairs, leaf first). No user-space address has it.
const PythonMarker = 0xfffffffffffffffe

// frameWindow is where the bytes of a frame the kernel reads start (its
// lowest field) and how many cover the fields it reads; an error when they
// do not fit its window.
func (p PythonProcess) frameWindow() (base, size uint16, err error) {
	type field struct{ off, size uint16 }
	// Words (pointers, and f_lasti's word) must be whole words of the window.
	fields := []field{{p.FrameCode, 8}, {p.FramePrevious, 8}, {p.FramePrevInstr, 8}}
	for _, b := range []uint16{p.FrameOwner, p.FrameIsEntry} {
		if b != NoField && b != EveryFrame {
			fields = append(fields, field{b, 1})
		}
	}
	base = p.FrameCode
	for _, f := range fields {
		base = min(base, f.off)
	}
	end := base
	for _, f := range fields {
		if (f.off-base)%f.size != 0 || f.off+f.size > base+frameWindow {
			return 0, 0, fmt.Errorf("frame field at %d does not fit the kernel's %d-byte window from %d", f.off, frameWindow, base)
		}
		end = max(end, f.off+f.size)
	}
	return base, end - base, nil
}

// enablePythonWalk turns the CPython frame walk on; it rides on the DWARF
// unwinder's kernel requirements (bpf_loop).
func enablePythonWalk(spec *ebpf.CollectionSpec) error {
	if err := spec.Variables[cpuProfileVarPythonWalk].Set(uint32(1)); err != nil {
		return fmt.Errorf("enable the Python frame walk: %w", err)
	}
	spec.Maps[cpuProfileMapPyProcs].MaxEntries = MaxPythonProcesses
	return nil
}

// SetPythonProcess makes the sampler append pid's Python frames to its
// user stacks.
func (s *Sampler) SetPythonProcess(pid uint32, p PythonProcess) error {
	// The kernel reads a frame's fields in one window, as few bytes as
	// cover them.
	base, window, err := p.frameWindow()
	if err != nil {
		return fmt.Errorf("python frames of pid %d: %w", pid, err)
	}
	v := cpuProfilePyProc{
		Runtime:            p.Runtime,
		RuntimeInterpHead:  p.RuntimeInterpHead,
		InterpThreadsHead:  p.InterpThreadsHead,
		TstateNext:         p.TStateNext,
		TstateThreadId:     p.TStateThreadID,
		TstateCframe:       p.TStateCFrame,
		CframeCurrentFrame: p.CFrameCurrentFrame,
		FrameCode:          p.FrameCode,
		FramePrevious:      p.FramePrevious,
		FramePrevInstr:     p.FramePrevInstr,
		FrameIsEntry:       p.FrameIsEntry,
		FrameOwner:         p.FrameOwner,
		FrameBase:          base,
		FrameWindow:        window,
	}
	return s.setProcess(s.objs.PyProcs, "python frames", pid, &v, MaxPythonProcesses)
}

// DeletePythonProcess stops the Python frame walk for pid.
func (s *Sampler) DeletePythonProcess(pid uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.dwarf {
		return nil
	}
	if err := s.objs.PyProcs.Delete(pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("python frames of pid %d: delete: %w", pid, err)
	}
	return nil
}

// PythonFrame is one interpreter frame the kernel recorded: the code
// object it runs and its last executed instruction. Entry marks the first
// frame of a _PyEval_EvalFrameDefault call: the frames after it belong to
// the next eval frame of the native stack.
type PythonFrame struct {
	Code, Instr uint64
	Entry       bool
	// Shim is the placeholder frame CPython 3.12 and later push at each eval entry: not a
	// Python function; the frames after it belong to the next eval frame.
	Shim bool
}

// SplitPythonFrames separates a user stack into its native frames and the
// Python frames the kernel appended after PythonMarker (leaf first), which
// it appends to py. cut reports whether the kernel may have stopped before
// the outermost Python frame: it recorded as many as it records at most,
// or the stack record was full.
func SplitPythonFrames(stack []uint64, py []PythonFrame) (native []uint64, _ []PythonFrame, cut bool) {
	i := slices.Index(stack, PythonMarker)
	if i < 0 {
		return stack, py, false
	}
	n := len(py)
	rest := stack[i+1:]
	for j := 0; j+1 < len(rest); j += 2 {
		py = append(py, PythonFrame{Code: rest[j] &^ 3, Instr: rest[j+1], Entry: rest[j]&1 == 1, Shim: rest[j]&2 == 2})
	}
	// The walk stops at the record's last two slots (py_frame_step).
	cut = len(py)-n >= maxPythonFrames || len(stack) >= maxStackDepth-2
	return stack[:i], py, cut
}

// NewPythonProcess is what the kernel needs for a CPython whose
// _PyRuntime is at runtime in the process and whose structures have
// offsets o.
func NewPythonProcess(runtime uint64, o python.Offsets) PythonProcess {
	isEntry, owner := uint16(NoField), o.FrameOwner
	switch {
	case o.Frames != python.InterpreterFrames:
		isEntry, owner = EveryFrame, NoField
	case o.HasIsEntry:
		isEntry = o.FrameIsEntry
	}
	cframeFrame := o.CFrameCurrentFrame
	if o.NoCFrame {
		cframeFrame = NoField
	}
	return PythonProcess{
		Runtime:            runtime,
		RuntimeInterpHead:  o.RuntimeInterpHead,
		InterpThreadsHead:  o.InterpThreadsHead,
		TStateNext:         o.TStateNext,
		TStateThreadID:     o.TStateThreadID,
		TStateCFrame:       o.TStateCFrame,
		CFrameCurrentFrame: cframeFrame,
		FrameCode:          o.FrameCode,
		FramePrevious:      o.FramePrevious,
		FramePrevInstr:     o.FramePrevInstr,
		FrameIsEntry:       isEntry,
		FrameOwner:         owner,
	}
}
