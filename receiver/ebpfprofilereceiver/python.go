package ebpfprofilereceiver

import (
	"context"
	"debug/elf"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// pythonFrames gives CPython processes Python frames (unwinding: auto):
// it recognises the interpreter binary once per file identity, tells the
// kernel where each CPython process keeps its thread states, and names
// the frames the kernel recorded by reading the process's code objects.
type pythonFrames struct {
	sampler    *sampler.Sampler
	symbolizer *symbolize.Symbolizer
	logger     *zap.Logger
	processes  metric.Int64Counter

	mu       sync.Mutex
	binaries map[fileid.ID]pythonBinary
	procs    map[int]*pythonProcess
}

// pythonProcess is a walked process's code objects, and what they were
// read for: a read of the same process again (its mappings changed: an
// extension module loaded) keeps them.
type pythonProcess struct {
	*python.Process
	in    *python.Interpreter
	bias  uint64
	start uint64 // the process's start time: a reused pid is another process

	rechecked time.Time   // when the cached code objects were last checked again (recheckLocked)
	recheck   *time.Timer // a check scheduled for the end of the current wait, or nil
}

// close stops a scheduled check and releases the process's memory file.
// The caller has taken the process out of pythonFrames.procs (under its
// lock), so a check already under way finds it gone and does nothing.
func (pp *pythonProcess) close() {
	if pp.recheck != nil {
		pp.recheck.Stop()
		pp.recheck = nil
	}
	_ = pp.Close()
}

// pythonBinary is what a mapped file turned out to be.
type pythonBinary struct {
	in  *python.Interpreter // nil: not one the agent can walk
	err error
}

// inspectPython is python.Inspect; tests replace it to play a CPython
// version the agent does not know.
var inspectPython = python.Inspect

// maxPythonBinaries bounds the per-binary results kept (a host has a few
// interpreters; every other binary whose name starts with "python" costs
// one entry).
const maxPythonBinaries = 256

func newPythonFrames(s *sampler.Sampler, sym *symbolize.Symbolizer, logger *zap.Logger, processes metric.Int64Counter) *pythonFrames {
	return &pythonFrames{sampler: s, symbolizer: sym, logger: logger, processes: processes,
		binaries: map[fileid.ID]pythonBinary{}, procs: map[int]*pythonProcess{}}
}

// attach looks for a CPython interpreter among snap's mappings and turns
// the kernel's frame walk on for the process, or off when there is none
// (an exec may have replaced a Python program). start is the process's
// start time.
func (p *pythonFrames) attach(snap *symbolize.Process, start uint64) {
	pid := snap.PID
	for i, m := range snap.Mappings {
		if m.OpenErr != "" || !python.MaybeInterpreter(m.Path) {
			continue
		}
		b := p.binary(snap, i)
		if errors.Is(b.err, python.ErrNotPython) {
			continue
		}
		if b.in == nil {
			p.count("unknown_version") // logged once per binary (binary)
			break
		}
		bias, ok := b.in.Bias(m.Start, m.Offset)
		if !ok {
			continue
		}
		// The process is known before the kernel walks it: the walk's
		// first samples report their code objects (readCode) at once.
		p.mu.Lock()
		if old := p.procs[pid]; old == nil || old.in != b.in || old.bias != bias || old.start != start {
			if old != nil {
				old.close()
			}
			p.procs[pid] = &pythonProcess{Process: python.NewProcess("/proc", pid, b.in, bias), in: b.in, bias: bias, start: start}
		}
		p.mu.Unlock()
		err := p.sampler.SetPythonProcess(uint32(pid), sampler.NewPythonProcess(b.in.RuntimeVA+bias, b.in.Offsets))
		if err != nil {
			p.logger.Info("python: cannot walk this process's frames", zap.Int("pid", pid), zap.Error(err))
			break
		}
		p.count("walked")
		return
	}
	p.detach(pid)
}

// readCode reads code object code of process pid into its cache when the
// kernel first finds it on one of the process's stacks
// (sampler.EventPythonCode). Frames are named at the interval's drain,
// from the process's memory: a process that exited by then (a script that
// ran a few seconds, a test run) has none left to read, and its cached
// code objects are what names its frames.
func (p *pythonFrames) readCode(pid int, code uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	proc := p.procs[pid]
	if proc == nil {
		return
	}
	now := time.Now()
	// An error (not a code object, the process just exited) leaves the
	// drain to try, as without this read.
	_, _ = proc.Resolve(code, 0, time.Time{})
	p.recheckLocked(pid, proc, now)
}

// codeRecheckEvery is how long a process's cached code objects go
// unchecked at least while new ones are reported: 100 ms, longer for a
// large cache (a check reads one header per entry: 16,384 entries every
// 6.4 s are about 0.5 % of a core, and only while new code keeps coming).
func codeRecheckEvery(cached int) time.Duration {
	return 100 * time.Millisecond * time.Duration(max(1, cached/256))
}

// recheckLocked checks proc's cached code objects again
// (python.Process.Recheck) now that a new one was reported. New code objects
// come in batches (a module's functions, compiled together) and one of a
// batch may have taken the memory of a freed one (the module's top-level
// code, run once), which the kernel does not report again: its siblings'
// reports are the sign to look. At most once per codeRecheckEvery; a report
// in between schedules a check at the end of that time, so the last batch
// is looked at too. Entries checked at or after now (the one just read)
// are left alone.
func (p *pythonFrames) recheckLocked(pid int, proc *pythonProcess, now time.Time) {
	wait := codeRecheckEvery(proc.Len()) - now.Sub(proc.rechecked)
	if wait <= 0 {
		proc.Recheck(now)
		proc.rechecked = now
		return
	}
	if proc.recheck != nil {
		return // one is scheduled
	}
	proc.recheck = time.AfterFunc(wait, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.procs[pid] != proc {
			return // detached, or read again as another process
		}
		proc.recheck = nil
		at := time.Now()
		proc.Recheck(at)
		proc.rechecked = at
	})
}

func (p *pythonFrames) count(outcome string) {
	p.processes.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// binary inspects mapping i's file once per file identity.
func (p *pythonFrames) binary(snap *symbolize.Process, i int) pythonBinary {
	id := snap.Mappings[i].ID
	p.mu.Lock()
	b, ok := p.binaries[id]
	p.mu.Unlock()
	if ok {
		return b
	}
	b = p.inspect(snap, i)
	if b.in == nil && !errors.Is(b.err, python.ErrNotPython) {
		p.logger.Info("python: this CPython's frames are not walked; its processes show native frames only",
			zap.Int("pid", snap.PID), zap.String("binary", snap.Mappings[i].Path), zap.Error(b.err))
	}
	p.mu.Lock()
	if len(p.binaries) >= maxPythonBinaries {
		clear(p.binaries)
	}
	p.binaries[id] = b
	p.mu.Unlock()
	return b
}

func (p *pythonFrames) inspect(snap *symbolize.Process, i int) pythonBinary {
	f, err := p.symbolizer.OpenMapping(snap, i)
	if err != nil {
		return pythonBinary{err: err}
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return pythonBinary{err: python.ErrNotPython}
	}
	in, err := inspectPython(ef)
	return pythonBinary{in: in, err: err}
}

// detach turns the walk off for pid and forgets its code objects.
func (p *pythonFrames) detach(pid int) {
	p.mu.Lock()
	proc := p.procs[pid]
	delete(p.procs, pid)
	p.mu.Unlock()
	if proc == nil {
		return
	}
	proc.close()
	if err := p.sampler.DeletePythonProcess(uint32(pid)); err != nil {
		p.logger.Debug("python: stop walking an exited process", zap.Int("pid", pid), zap.Error(err))
	}
}

// close forgets every process (sampling stops).
func (p *pythonFrames) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pid, proc := range p.procs {
		proc.close()
		delete(p.procs, pid)
	}
}

// interleave inserts the Python frames py (leaf first) into frames (leaf
// first, kernel frames, then user frames) where they ran: each run of
// Python frames up to an entry frame (3.11; 3.10 and older: every frame)
// or a shim frame (3.12, not shown) goes just leafward of the matching
// _PyEval_EvalFrameDefault native frame, innermost first (or its .cold
// part, where Debian's CPython 3.14 and 3.15, built with profile guidance,
// run the loop). Runs the native
// stack has no eval frame for (it ended early) go at the root end. When the
// native stack has more eval frames than there are runs and the kernel
// recorded every Python frame, the innermost eval frames get none: a
// thread caught entering or leaving _PyEval_EvalFrameDefault, before it
// links its frame into the thread state or after it unlinked it (3.10 and
// older do that at every call, and at every item a generator yields), would
// otherwise have each Python frame placed one eval call too deep. A frame
// whose code object cannot be read stays out: no frame rather than a wrong
// one.
func (p *pythonFrames) interleave(pid int, frames []profilebuilder.Frame, stack pythonStack, notBefore time.Time, out []profilebuilder.Frame) []profilebuilder.Frame {
	// Held throughout: an exec or exit may close the process meanwhile.
	p.mu.Lock()
	defer p.mu.Unlock()
	proc := p.procs[pid]
	py := stack.frames
	if proc == nil || len(py) == 0 {
		return append(out, frames...)
	}
	next := 0 // next Python frame to place
	run := func() {
		for next < len(py) {
			f := py[next]
			next++
			if f.Shim {
				return // 3.12 on: the frames before it were this eval call's
			}
			if pf, err := proc.Resolve(f.Code, f.Instr, notBefore); err == nil {
				out = append(out, profilebuilder.Frame{Function: pf.Function, File: pf.File, Line: int64(pf.Line), Kind: profilebuilder.Python})
			}
			if f.Entry {
				return
			}
		}
	}
	isEval := func(f profilebuilder.Frame) bool {
		return f.Kind != profilebuilder.Kernel && (f.Function == "_PyEval_EvalFrameDefault" || f.Function == "_PyEval_EvalFrameDefault.cold")
	}
	skip := 0 // innermost eval frames without a run of their own
	if !stack.cut {
		evals := 0
		for _, f := range frames {
			if isEval(f) {
				evals++
			}
		}
		skip = max(evals-pythonRuns(py), 0)
	}
	for _, f := range frames {
		if isEval(f) {
			if skip > 0 {
				skip--
			} else {
				run()
			}
		}
		out = append(out, f)
	}
	for next < len(py) {
		run()
	}
	return out
}

// pythonRuns is how many runs interleave places: each ends after an entry
// frame or at a shim frame.
func pythonRuns(py []sampler.PythonFrame) int {
	runs := 0
	for i := 0; i < len(py); runs++ {
		for i < len(py) {
			f := py[i]
			i++
			if f.Shim || f.Entry {
				break
			}
		}
	}
	return runs
}

// setPython starts (p != nil) or stops the Python frame walk; known live
// processes are attached at once.
func (t *processTable) setPython(p *pythonFrames) {
	if old := t.python.Swap(p); old != nil {
		old.close()
	}
	if p == nil {
		return
	}
	t.mu.Lock()
	live := make([]*processEntry, 0, len(t.entries))
	for _, e := range t.entries {
		if e.exitedAt.IsZero() && e.snapshot != nil {
			live = append(live, e)
		}
	}
	t.mu.Unlock()
	for _, e := range live {
		p.attach(e.snapshot, e.startTime)
	}
}

// pythonStack is the Python frames the kernel appended to a sample's user
// stack (leaf first); cut: it may have stopped before the outermost.
type pythonStack struct {
	frames []sampler.PythonFrame
	cut    bool
}

// takePythonFrames takes the Python frames the kernel appended off s's
// user stack, so the symbolizer and leaf-caller recovery see native
// frames only.
func takePythonFrames(s *sampler.Sample) pythonStack {
	var py pythonStack
	s.UserStack, py.frames, py.cut = sampler.SplitPythonFrames(s.UserStack, nil)
	return py
}

// addPythonFrames interleaves py into the sample's frames (see interleave).
func (r *profileReceiver) addPythonFrames(proc *processEntry, frames []profilebuilder.Frame, py pythonStack, readBefore time.Time) []profilebuilder.Frame {
	p := r.procs.python.Load()
	if len(py.frames) == 0 || p == nil || proc.snapshot == nil {
		return frames
	}
	return p.interleave(proc.snapshot.PID, frames, py, readBefore, make([]profilebuilder.Frame, 0, len(frames)+len(py.frames)))
}
