package ebpfprofilereceiver

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/nodev8"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// maxV8FunctionsSeen bounds each of the two generations of a Node.js
// process's functions named while it ran (v8Functions.seen).
const maxV8FunctionsSeen = 1 << 12

// v8Functions names the JavaScript functions of a Node.js process from
// its V8 heap (nodev8.Namer), with no perf map and no flag on the
// process's side. The kernel puts a JavaScript frame's function (its
// SharedFunctionInfo) in the stack in place of the frame's pc
// (sampler.V8Function) once it has the process's layout (SetV8), and
// reports each function the first time it is on a stack
// (sampler.EventV8Function), which is named then, while the process
// lives: a script or a test run that exits before the interval's drain
// keeps its names.
type v8Functions struct {
	mu     sync.Mutex
	namer  *nodev8.Namer
	layout *nodev8.Layout
	closed bool
	// failed: the layout or the memory cannot be read (logged once per
	// binary).
	failed bool
	// setBy: the sampler given the layout (a sampler turned off and on
	// again by the kill switch is given it again).
	setBy *sampler.Sampler
	// seen: names read while the process ran, by SharedFunctionInfo.
	seen namesSeen[seenV8Function]
}

// seenV8Function is a function's name read while its process ran;
// reportedAt: when the kernel's report of it was read, drainedAt: the
// drain that read it (zero when the other did), so that a drain reads a
// function once however many stacks hold it.
type seenV8Function struct {
	f                     nodev8.Function
	reportedAt, drainedAt time.Time
}

// remember keeps f as the name of sfi. v.mu is held.
func (v *v8Functions) remember(sfi uint64, f seenV8Function) {
	v.seen.remember(sfi, f, maxV8FunctionsSeen)
}

// remembered returns the name remember kept for sfi. v.mu is held.
func (v *v8Functions) remembered(sfi uint64) (seenV8Function, bool) {
	return v.seen.remembered(sfi)
}

// readable reports whether the process's memory is open.
func (v *v8Functions) readable() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.namer != nil
}

// settled reports whether the kernel has the process's layout from
// sampler s, or it cannot have it (the layout or the memory could not be
// read).
func (v *v8Functions) settled(s *sampler.Sampler) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.failed || v.closed || (v.namer != nil && v.setBy == s)
}

func (v *v8Functions) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.namer != nil {
		_ = v.namer.Close()
		v.namer = nil
	}
	v.closed = true
}

// v8Binary returns the mapping of the file that holds V8 in p: node's own
// executable, or libnode.so for a program that links it (Electron-style
// embedders name theirs otherwise and are not looked at). ok is false for
// any other process.
func v8Binary(p *symbolize.Process) (symbolize.Mapping, bool) {
	for _, m := range p.Mappings {
		base := filepath.Base(m.Path)
		if m.Path != "" && (base == "node" || base == "nodejs" || strings.HasPrefix(base, "libnode.so")) {
			return m, true
		}
	}
	return symbolize.Mapping{}, false
}

// v8LayoutOf reads the V8 layout of the binary m of process pid, once per
// file (device, inode): nil with the error when it has none that can be
// used.
func (r *profileReceiver) v8LayoutOf(pid int, m symbolize.Mapping) (*nodev8.Layout, error) {
	key := fmt.Sprintf("%d:%d", m.Dev, m.Inode)
	if v, ok := r.v8Layouts.Load(key); ok {
		if l, ok := v.(*nodev8.Layout); ok {
			return l, nil
		}
		return nil, v.(error)
	}
	// The mapped file itself, even when its path was replaced or lies in
	// a container's root.
	proc := filepath.Join(r.procs.procRoot, fmt.Sprint(pid))
	path := filepath.Join(proc, "map_files", fmt.Sprintf("%x-%x", m.Start, m.Limit))
	l, err := nodev8.ReadLayout(path)
	if err != nil {
		err = fmt.Errorf("%s: %w", m.Path, err)
		r.v8Layouts.Store(key, err)
		return nil, err
	}
	r.v8Layouts.Store(key, l)
	return l, nil
}

// openV8Early reads the V8 layout of Node.js process proc and opens its
// memory on the looks that follow its start (holdPerfMap), and has the
// kernel put its JavaScript functions in its stacks from then on. A
// binary without a usable layout is logged once, and its JavaScript
// frames are named from a perf map only (--perf-basic-prof), as with
// unwinding: frame_pointer.
func (r *profileReceiver) openV8Early(proc *processEntry, j *jitSymbols) {
	// Only the in-kernel walk puts functions in the stacks: with frame
	// pointers alone, JavaScript frames are named from a perf map.
	if r.v8Off || r.cfg.Unwinding != UnwindingAuto {
		return
	}
	m, ok := v8Binary(proc.snapshot)
	if !ok {
		return
	}
	v := &j.v8
	v.mu.Lock()
	if v.namer == nil && !v.closed && !v.failed {
		pid := proc.snapshot.PID
		l, err := r.v8LayoutOf(pid, m)
		if err == nil {
			v.layout = l
			v.namer, err = nodev8.Open(r.procs.procRoot, pid, l)
		}
		if err != nil {
			v.failed = true
			if _, told := r.v8Unread.LoadOrStore(m.Path, true); !told {
				r.set.Logger.Info("nodev8: this Node.js binary's functions cannot be named from its memory, so its JavaScript frames are named only from a perf map (--perf-basic-prof)",
					zap.Int("pid", pid), zap.String("binary", m.Path), zap.Error(err))
			}
		}
	}
	skip := v.namer == nil || v.setBy == r.samplerNow.Load()
	v.mu.Unlock()
	if skip {
		return
	}
	// The sampler is r.mu's, which the drain holds before v.mu.
	r.mu.Lock()
	defer r.mu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.namer != nil && v.setBy != r.sampler {
		v.setBy = r.sampler
		if r.sampler == nil {
			return
		}
		if err := r.sampler.SetV8(uint32(proc.snapshot.PID), v.layout); err != nil {
			r.set.Logger.Debug("nodev8: JavaScript frames stay addresses", zap.Int("pid", proc.snapshot.PID), zap.Error(err))
		}
	}
}

// nameV8FunctionNow names a function of Node.js process pid (started at
// start, in clock ticks) that the kernel found on one of its stacks for
// the first time (sampler.EventV8Function), while the process runs.
func (r *profileReceiver) nameV8FunctionNow(pid int, start, sfi uint64) {
	j := r.procs.jitSymbolsOf(pid, start)
	if j == nil {
		return
	}
	v := &j.v8
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.namer == nil {
		return
	}
	if _, ok := v.remembered(sfi); ok {
		return // reported again: the kernel's map forgot it
	}
	f, err := v.namer.Function(sfi)
	if err != nil {
		return // left to the drain
	}
	v.remember(sfi, seenV8Function{f: f, reportedAt: time.Now()})
}

// nameV8Function names the JavaScript function sfi of Node.js process proc
// at the drain: from the report read within this interval, else from its
// memory now, once per drain (V8's garbage collector may have moved the
// function, and put another object at its address, since an earlier
// read), else from what was read while it ran (the process has exited).
// ok is false when none has a name.
func (r *profileReceiver) nameV8Function(proc *processEntry, j *jitSymbols, sfi uint64, drain time.Time) (nodev8.Function, bool) {
	v := &j.v8
	v.mu.Lock()
	defer v.mu.Unlock()
	s, seen := v.remembered(sfi)
	if seen && (s.reportedAt.After(drain.Add(-r.cfg.Interval)) || s.drainedAt.Equal(drain)) {
		return s.f, true
	}
	if v.namer != nil {
		f, err := v.namer.Function(sfi)
		if err == nil {
			v.remember(sfi, seenV8Function{f: f, drainedAt: drain})
			return f, true
		}
		if !seen {
			r.set.Logger.Debug("nodev8: function not named", zap.Int("pid", proc.snapshot.PID), zap.Error(err))
		}
	}
	return s.f, seen
}
