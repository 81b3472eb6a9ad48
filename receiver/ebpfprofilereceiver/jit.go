package ebpfprofilereceiver

import (
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/perfmap"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// jitSymbols is a process's perf map (JIT runtimes: Node.js, Java, .NET,
// Python -X perf), opened the first time one of its stacks has a frame in
// memory no file backs. It lives as long as the program: a refreshed
// process entry takes it over, an exec starts a new one.
type jitSymbols struct {
	m        *perfmap.Map
	reported atomic.Bool // its problems were logged once
}

// jitFor returns e's perf map, creating it on first use.
func (e *processEntry) jitFor(pid int) *jitSymbols {
	if j := e.jit.Load(); j != nil {
		return j
	}
	j := &jitSymbols{m: perfmap.New("/proc", pid, perfmap.DefaultLimits)}
	if e.jit.CompareAndSwap(nil, j) {
		return j
	}
	return e.jit.Load()
}

// nameJITFrames names the user frames the symbolizer could not resolve in
// anonymous executable memory (or in memory mapped after the process was
// read) from the process's perf map, marking them profile.frame.type=jit.
// What the runtime appended to the map is read at most once per interval
// (readBefore is the interval's drain time), before the interval's first
// lookup (perfmap.Map.Lookup).
func (r *profileReceiver) nameJITFrames(proc *processEntry, frames []profilebuilder.Frame, readBefore time.Time) {
	if proc.snapshot == nil {
		return
	}
	var j *jitSymbols
	for i := range frames {
		f := &frames[i]
		if f.Kind == profilebuilder.Kernel || f.Function != "" || !anonymousCode(f.Mapping) {
			continue
		}
		if j == nil {
			j = proc.jitFor(proc.snapshot.PID)
		}
		// Return addresses point after the call; frame 0 is the PC.
		addr := f.Address
		if i > 0 && frames[i-1].Kind != profilebuilder.Kernel && addr > 0 {
			addr--
		}
		sym, ok := j.m.Lookup(addr, readBefore)
		if !ok {
			continue
		}
		d := perfmap.Describe(sym.Name)
		f.Function, f.File, f.Line, f.Kind = d.Function, d.File, int64(d.Line), profilebuilder.JIT
	}
	if j != nil && !j.reported.Load() {
		r.reportPerfMap(proc, j)
	}
}

// reportPerfMap logs, once per program, a perf map that could not be read
// or that held lines it refused: the application wrote it, so the agent
// says what it ignored rather than failing.
func (r *profileReceiver) reportPerfMap(proc *processEntry, j *jitSymbols) {
	st, err := j.m.Stats()
	if err == nil && st.Rejected == 0 && st.Dropped == 0 && st.Skipped == 0 {
		return
	}
	if !j.reported.CompareAndSwap(false, true) {
		return
	}
	r.set.Logger.Info("perf map: some JIT frames of this process stay unnamed",
		zap.Int("pid", proc.snapshot.PID), zap.String("path", j.m.Path()), zap.Error(err),
		zap.Int("symbols", st.Symbols), zap.Uint64("lines_rejected", st.Rejected),
		zap.Uint64("symbols_dropped", st.Dropped), zap.Int64("bytes_skipped", st.Skipped))
}

// anonymousCode reports whether a user frame's mapping is memory no file
// backs (where JIT runtimes put generated code), or unknown (mapped after
// the process was last read).
func anonymousCode(m *profilebuilder.Mapping) bool {
	if m == nil {
		return true
	}
	return m.File == "" || strings.HasPrefix(m.File, "[anon") || strings.HasPrefix(m.File, "//anon")
}
