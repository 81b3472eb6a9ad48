package sampler

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
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
	FramePrevInstr     uint16
	FrameIsEntry       uint16
}

// PythonMarker separates a user stack's native frames from the Python
// frames the kernel appended (code object | entry bit, last instruction
// pairs, leaf first). No user-space address has it.
const PythonMarker = 0xfffffffffffffffe

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
	// The kernel reads a frame's fields in one window from f_code on
	// (PY_FRAME_WINDOW in bpf/python_walk.h).
	const window = 40
	inWindow := func(off uint16, align uint16) bool {
		return off >= p.FrameCode && off < p.FrameCode+window && (off-p.FrameCode)%align == 0
	}
	if !inWindow(p.FramePrevious, 8) || !inWindow(p.FramePrevInstr, 8) || !inWindow(p.FrameIsEntry, 1) {
		return fmt.Errorf("python frames of pid %d: frame offsets %+v do not fit the kernel's %d-byte window from f_code", pid, p, window)
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
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("python frames: sampler is closed")
	}
	if !s.dwarf {
		return errNoDWARF
	}
	if err := s.objs.PyProcs.Update(pid, &v, ebpf.UpdateAny); err != nil {
		if errors.Is(err, unix.E2BIG) {
			return fmt.Errorf("python frames of pid %d: %d processes have them already (the limit)", pid, MaxPythonProcesses)
		}
		return fmt.Errorf("python frames of pid %d: %w", pid, err)
	}
	return nil
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
}

// SplitPythonFrames separates a user stack into its native frames and the
// Python frames the kernel appended after PythonMarker (leaf first), which
// it appends to py.
func SplitPythonFrames(stack []uint64, py []PythonFrame) ([]uint64, []PythonFrame) {
	i := slices.Index(stack, PythonMarker)
	if i < 0 {
		return stack, py
	}
	rest := stack[i+1:]
	for j := 0; j+1 < len(rest); j += 2 {
		py = append(py, PythonFrame{Code: rest[j] &^ 1, Instr: rest[j+1], Entry: rest[j]&1 == 1})
	}
	return stack[:i], py
}
