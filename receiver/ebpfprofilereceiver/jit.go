package ebpfprofilereceiver

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/perfmap"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// javaPerfMapEvery is the least time between two requests to one JVM
// (java_perf_map): HotSpot writes its whole code cache each time (a large
// service's map is megabytes), and code compiled since the last request
// stays unnamed until the next. A service's code settles in its first
// minutes; a request an interval later names what the warm-up compiled.
const javaPerfMapEvery = 2 * time.Minute

// javaPerfMapTimeout bounds one request: the listener's start and the
// JVM's writing of its map.
const javaPerfMapTimeout = 30 * time.Second

// jitSymbols is a process's perf map (JIT runtimes: Node.js, Java, .NET,
// Python -X perf), opened the first time one of its stacks has a frame in
// memory no file backs. It lives as long as the program: a refreshed
// process entry takes it over, an exec starts a new one.
type jitSymbols struct {
	m        *perfmap.Map
	reported atomic.Bool // its problems were logged once
	// hotSpot: the program maps libjvm.so; notHotSpot: the snapshot found
	// without it (a later read may find it: the java launcher loads it
	// after its start). Its samples are named on the drain's path, so the
	// mappings are looked at once per snapshot, not per sample.
	hotSpot    atomic.Bool
	notHotSpot atomic.Pointer[symbolize.Process]

	// The requests to a HotSpot JVM to write its map (java_perf_map).
	askMu     sync.Mutex
	askedAt   time.Time // the last request's start
	asking    bool      // a request is under way
	askFailed bool      // a failure was logged (once per program)
	// written: the map file a request created, removed when the program
	// is over (close); closed: it is over.
	written *hotspot.PerfMapFile
	closed  bool
}

// close ends the program's perf map: the file a request made the JVM
// create is removed (HotSpot leaves it behind when it exits, and JVMs that
// come and go, a CI runner's builds, would leave one each in their /tmp).
func (j *jitSymbols) close() {
	j.askMu.Lock()
	f := j.written
	j.written, j.closed = nil, true
	j.askMu.Unlock()
	if f != nil {
		_ = f.Remove() // a file that cannot be removed stays, as without the option
	}
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
	unnamed := 0
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
			unnamed++
			continue
		}
		d := perfmap.Describe(sym.Name)
		f.Function, f.File, f.Line, f.Kind = d.Function, d.File, int64(d.Line), profilebuilder.JIT
	}
	if j != nil && !j.reported.Load() {
		r.reportPerfMap(proc, j)
	}
	if unnamed > 0 && r.cfg.JavaPerfMap && j.isHotSpot(proc.snapshot) {
		r.askJVMForPerfMap(proc, j)
	}
}

// isHotSpot reports whether the program maps HotSpot's libjvm.so.
func (j *jitSymbols) isHotSpot(p *symbolize.Process) bool {
	if j.hotSpot.Load() {
		return true
	}
	if j.notHotSpot.Load() == p {
		return false
	}
	for i := range p.Mappings {
		if filepath.Base(p.Mappings[i].Path) == "libjvm.so" {
			j.hotSpot.Store(true)
			return true
		}
	}
	j.notHotSpot.Store(p)
	return false
}

// askJVMForPerfMap asks the JVM to write its perf map, on a goroutine of
// its own (the attach handshake takes milliseconds to seconds, the drain
// must not wait), unless a request is under way or the last one is less
// than javaPerfMapEvery old. Once the JVM has written it, the next
// interval reads the map from the start; a map file the request created is
// removed when the program is over (jitSymbols.close). A failure is logged once per
// program, and that program is not asked again; the frames stay
// addresses, as without the option.
func (r *profileReceiver) askJVMForPerfMap(proc *processEntry, j *jitSymbols) {
	ctx := r.ctx
	if ctx == nil || ctx.Err() != nil {
		return // shutting down: the final drain asks nothing
	}
	now := time.Now()
	j.askMu.Lock()
	// A JVM that did not answer is not asked again: each signal to one
	// that does not start its listener writes a thread dump to its output.
	if j.asking || j.askFailed || (!j.askedAt.IsZero() && now.Sub(j.askedAt) < javaPerfMapEvery) {
		j.askMu.Unlock()
		return
	}
	j.asking, j.askedAt = true, now
	j.askMu.Unlock()
	pid := proc.snapshot.PID
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		created, err := r.requestJavaPerfMap(ctx, pid)
		if err == nil {
			j.m.Reread()
		}
		j.askMu.Lock()
		j.asking = false
		logFailure := err != nil && !j.askFailed
		j.askFailed = j.askFailed || err != nil
		var remove *hotspot.PerfMapFile
		switch {
		case created == nil:
		case j.closed: // the program ended while the JVM wrote it
			remove = created
		case j.written == nil:
			j.written = created
		default: // removed by someone since the first, and created again
			j.written.Close()
			j.written = created
		}
		j.askMu.Unlock()
		if remove != nil {
			_ = remove.Remove()
		}
		switch {
		case err == nil:
			r.set.Logger.Debug("perf map: the JVM wrote it on request", zap.Int("pid", pid))
		case logFailure && ctx.Err() == nil:
			r.set.Logger.Info("perf map: could not ask the JVM to write it; its JIT-compiled frames stay unnamed",
				zap.Int("pid", pid), zap.Error(err))
		}
	}()
}

// requestJavaPerfMap is one request to the JVM pid (hotspot.RequestPerfMap).
func (r *profileReceiver) requestJavaPerfMap(ctx context.Context, pid int) (*hotspot.PerfMapFile, error) {
	jvm, err := hotspot.ReadJVM("/proc", pid)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, javaPerfMapTimeout)
	defer cancel()
	return hotspot.RequestPerfMap(ctx, "/proc", jvm)
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
