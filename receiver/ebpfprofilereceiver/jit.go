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
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
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

// perfMapLookWaits are the waits before each look for a process's perf map
// after its first read (holdPerfMap), the last about 5 s after it, each
// look up to perfMapLookEvery late. Node.js wrote its map 70 ms after its
// start here, later on a loaded machine; most processes of a busy node are
// gone before the first look.
var perfMapLookWaits = []time.Duration{250 * time.Millisecond, 750 * time.Millisecond, 4 * time.Second}

// perfMapLookEvery is how often the looks that are due are taken.
const perfMapLookEvery = 250 * time.Millisecond

// jitSymbols is a process's perf map (JIT runtimes: Node.js, Java, .NET,
// Python -X perf) and, for a HotSpot JVM, its code cache; made on the
// perf map's first look, or the first time one of its stacks has a frame
// in memory no file backs. It lives as
// long as the program: a refreshed process entry takes it over, an exec
// starts a new one.
type jitSymbols struct {
	m        *perfmap.Map
	reported atomic.Bool // its problems were logged once
	// hotSpot: the program maps libjvm.so; notHotSpot: the snapshot found
	// without it (a later read may find it: the java launcher loads it
	// after its start). Its samples are named on the drain's path, so the
	// mappings are looked at once per snapshot, not per sample.
	hotSpot    atomic.Bool
	notHotSpot atomic.Pointer[symbolize.Process]
	// code: a HotSpot JVM's generated code, named from its memory.
	code hotSpotCode
	// v8: a Node.js process's JavaScript functions, named from its memory.
	v8 v8Functions

	// The requests to a HotSpot JVM to write its map (java_perf_map).
	askMu     sync.Mutex
	askedAt   time.Time // the last request's start
	asking    bool      // a request is under way
	askFailed bool      // a failure was logged (once per program)
	// written: the map file a request created, removed when the program
	// is over (close); closed: it is over.
	written *hotspot.PerfMapFile
	closed  bool

	// withoutMap counts the drains (lastWithoutMap the last) that left
	// frames of the program unnamed while it had no map; used on the
	// drain's path only.
	withoutMap     int
	lastWithoutMap time.Time
}

// close ends the program's perf map: the file a request made the JVM
// create is removed (HotSpot leaves it behind when it exits, and JVMs that
// come and go, a CI runner's builds, would leave one each in their /tmp).
func (j *jitSymbols) close() {
	_ = j.m.Close()
	j.code.close()
	j.v8.close()
	j.askMu.Lock()
	f := j.written
	j.written, j.closed = nil, true
	j.askMu.Unlock()
	if f != nil {
		_ = f.Remove() // a file that cannot be removed stays, as without the option
	}
}

// jitSymbolsOf returns the JIT symbols of the process pid started at
// start (clock ticks), if its entry has them: the process a kernel's
// report (a JVM's frame, a Node.js function) came from, not one that
// reused its pid. A process not in the table is not read for it.
func (t *processTable) jitSymbolsOf(pid int, start uint64) *jitSymbols {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.entries[pid]; e != nil && (e.startTime == 0 || e.startTime == start) {
		return e.jit.Load()
	}
	return nil
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
// read), marking them profile.frame.type=jit: a HotSpot JVM's from its code
// cache first (nameHotSpotCode), with the methods inlined at each as
// frames of their own, so the frames returned may be more than given;
// then from the process's perf map. What the runtime appended to the map
// is read at most once per interval (readBefore is the interval's drain
// time), before the interval's first lookup (perfmap.Map.Lookup).
func (r *profileReceiver) nameJITFrames(proc *processEntry, frames []profilebuilder.Frame, readBefore time.Time) []profilebuilder.Frame {
	if proc.snapshot == nil {
		return frames
	}
	var j *jitSymbols
	var inlined []inlinedAt
	// node: the process maps node's binary, looked up at its first
	// JavaScript frame, once per stack rather than per frame.
	var node *bool
	// unnamed: frames the map did not name; inAnon: those of them in
	// anonymous memory the process had mapped when it was read, a JIT's
	// code (the others may be in memory mapped since, or no code at all:
	// a frame-pointer walk through code without frame pointers).
	unnamed, inAnon := 0, 0
	for i := range frames {
		f := &frames[i]
		if sfi, ok := sampler.V8Function(f.Address); ok && f.Kind != profilebuilder.Kernel {
			if j == nil {
				j = proc.jitFor(proc.snapshot.PID)
			}
			// Only a walk with the process's V8 layout puts a function
			// in a stack.
			if node == nil {
				_, isV8 := v8Binary(proc.snapshot)
				node = &isV8
			}
			if *node {
				f.Address, f.Function, f.Kind = 0, "[unknown]", profilebuilder.JIT
				if vf, ok := r.nameV8Function(proc, j, sfi, readBefore); ok {
					f.Function, f.File, f.Line = vf.Name, vf.File, int64(vf.Line)
				}
				continue
			}
		}
		if _, _, ok := sampler.JavaInterpreted(f.Address); ok && f.Kind != profilebuilder.Kernel && !r.hotSpotCodeOff {
			if j == nil {
				j = proc.jitFor(proc.snapshot.PID)
			}
			// Only a JVM's walk enters interpreted frames so; elsewhere
			// such a word is a frame-pointer walk's stray value.
			if j.isHotSpot(proc.snapshot) {
				// Named from its Method*, else as the code cache names
				// the interpreter's code.
				frame := f.Address
				f.Address, f.Function, f.Kind = 0, "Interpreter", profilebuilder.JIT
				if jf, ok := r.nameInterpreted(proc, j, frame, readBefore); ok {
					f.Function, f.File, f.Line = jf.Function, jf.File, int64(jf.Line)
				}
				continue
			}
		}
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
		if !r.hotSpotCodeOff && j.isHotSpot(proc.snapshot) {
			if hs, ok := r.nameHotSpotCode(proc, j, addr, readBefore); ok {
				// The frame is the compiled method (the last); the
				// methods inlined into it go in front of it.
				own := hs[len(hs)-1]
				f.Function, f.File, f.Line, f.Kind = own.Function, own.File, int64(own.Line), profilebuilder.JIT
				if len(hs) > 1 {
					inlined = append(inlined, inlinedAt{i, hs[:len(hs)-1]})
				}
				continue
			}
		}
		sym, ok := j.m.Lookup(addr, readBefore)
		if !ok {
			unnamed++
			if f.Mapping != nil {
				inAnon++
			}
			continue
		}
		d := perfmap.Describe(sym.Name)
		f.Function, f.File, f.Line, f.Kind = d.Function, d.File, int64(d.Line), profilebuilder.JIT
	}
	if j != nil && !j.reported.Load() {
		r.reportPerfMap(proc, j)
	}
	// A JVM whose code cache is read has all its JIT code named from it:
	// its perf map would name nothing more (frames left are not in the
	// code cache: a frame-pointer walk's stray addresses, code freed since
	// the sample), so it is neither asked for one nor told of.
	if unnamed > 0 && !(j.isHotSpot(proc.snapshot) && j.code.readable()) {
		if r.cfg.JavaPerfMap && j.isHotSpot(proc.snapshot) {
			r.askJVMForPerfMap(proc, j)
		} else if inAnon > 0 {
			r.noteWithoutMap(proc, j, readBefore)
		}
	}
	return withInlined(frames, inlined)
}

// namesSeen keeps the names of a JIT runtime's frames (a JVM's code, a
// Node.js process's functions) read while the process ran, by the key its
// stacks hold, for the drains that can no longer read it (it exited). Two
// generations of at most max names each: when the newer fills, it becomes
// the older and the older one goes, so what the drains keep naming (and
// so remembering again) stays.
type namesSeen[V any] struct {
	newer, older map[uint64]V
}

func (s *namesSeen[V]) remember(key uint64, v V, max int) {
	if len(s.newer) >= max {
		s.newer, s.older = nil, s.newer
	}
	if s.newer == nil {
		s.newer = map[uint64]V{}
	}
	s.newer[key] = v
}

func (s *namesSeen[V]) remembered(key uint64) (V, bool) {
	if v, ok := s.newer[key]; ok {
		return v, true
	}
	v, ok := s.older[key]
	return v, ok
}

// len is how many names are kept.
func (s *namesSeen[V]) len() int { return len(s.newer) + len(s.older) }

// inlinedAt is the methods a JIT inlined at frames[i], innermost first.
type inlinedAt struct {
	i       int
	methods []hotspot.Frame
}

// withInlined returns frames with each inlined method as a frame of its
// own (the same address, typed jit) in front of the frame it was inlined
// into, as the symbolizer expands DWARF's inlined functions.
func withInlined(frames []profilebuilder.Frame, inlined []inlinedAt) []profilebuilder.Frame {
	if len(inlined) == 0 {
		return frames
	}
	n := len(frames)
	for _, in := range inlined {
		n += len(in.methods)
	}
	out := make([]profilebuilder.Frame, 0, n)
	next := 0
	for _, in := range inlined {
		out = append(out, frames[next:in.i]...)
		for _, m := range in.methods {
			f := frames[in.i]
			f.Function, f.File, f.Line = m.Function, m.File, int64(m.Line)
			out = append(out, f)
		}
		next = in.i
	}
	return append(out, frames[next:]...)
}

// withoutMapDrains is how many drains must find a program's JIT code
// unnamed and its map absent before the agent says so: a runtime writes
// its map after its start (Node.js 70 ms after, here), so a program's
// first drain may come before it.
const withoutMapDrains = 2

// maxWithoutMapPrograms bounds the programs noteWithoutMap tells of.
const maxWithoutMapPrograms = 100

// noteWithoutMap logs once per program file that its JIT code has no perf
// map to name it, and how to make the runtime write one: its frames are
// [unknown], and nothing in the profile says why. It runs for each such
// sample of the drain: the checks that need no lock come first.
func (r *profileReceiver) noteWithoutMap(proc *processEntry, j *jitSymbols, drain time.Time) {
	if j.withoutMap >= withoutMapDrains || !j.lastWithoutMap.Before(drain) {
		return
	}
	if st, err := j.m.Stats(); err != nil || st.Present {
		return
	}
	j.withoutMap++
	j.lastWithoutMap = drain
	exe := proc.snapshot.ExePath
	if j.withoutMap != withoutMapDrains || exe == "" {
		return
	}
	// Past the bound nothing is stored: a node that runs one-off JIT
	// programs (a CI runner's) would otherwise grow the set for ever.
	if r.withoutMapCount.Load() >= maxWithoutMapPrograms {
		return
	}
	if _, told := r.withoutMap.LoadOrStore(exe, true); told {
		return
	}
	r.withoutMapCount.Add(1)
	hint := "make the runtime write /tmp/perf-PID.map (Node.js: --perf-basic-prof; .NET: DOTNET_PerfMapEnabled=1; CPython 3.12+: -X perf)"
	if j.isHotSpot(proc.snapshot) {
		hint = "set java_perf_map: true in the receiver, or run jcmd PID Compiler.perfmap"
	}
	r.set.Logger.Info("perf map: none, so this program's JIT code stays [unknown]",
		zap.Int("pid", proc.snapshot.PID), zap.String("executable", exe), zap.String("path", j.m.Path()), zap.String("hint", hint))
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
	return m == nil || anonymousPath(m.File)
}

// anonymousPath reports whether a mapping's path is memory no file backs.
func anonymousPath(path string) bool {
	return path == "" || strings.HasPrefix(path, "[anon") || strings.HasPrefix(path, "//anon")
}

// holdPerfMap opens pid's perf map, if it writes one, while the process
// runs (perfmap.Map.Hold): its samples are named at the interval's drain,
// and a program that exited by then (a Node.js script or test run of a few
// seconds) can no longer be reached through /proc. It is called after each
// read of the process, for a process with executable memory no file backs
// (a JIT runtime's code), and a few times in the seconds after the process
// was first read (lookAgain: started is its start time), whatever its
// memory: a runtime writes its map and maps its code after its start
// (Node.js here: 70 and 100 ms), and a code mapping that is writable too
// (V8's) is not a change of executable memory the kernel reports. A JVM's
// code cache is opened on the same looks (openHotSpot). done is true when
// there is nothing more to look for: the map or the JVM's code cache is
// open, or the process is gone.
func (t *processTable) holdPerfMap(pid int, lookAgain bool, started uint64) (done bool) {
	t.mu.Lock()
	e := t.entries[pid]
	if e == nil || (lookAgain && e.startTime != started) || !e.exitedAt.IsZero() || e.snapshot == nil {
		t.mu.Unlock()
		return true
	}
	// Made while the entry is in the table: an entry closed after this
	// closes its perf map too, and Hold on a closed map does nothing.
	// A Node.js process's functions are named from its first read on,
	// not from the first look (250 ms later): most of a short script's
	// life.
	j := e.jit.Load()
	_, node := v8Binary(e.snapshot)
	if j == nil && (lookAgain || hasAnonymousCode(e.snapshot) || (node && t.openV8 != nil)) {
		j = e.jitFor(pid)
	}
	t.mu.Unlock()
	if j == nil {
		return false
	}
	// A JVM's code cache is read as soon as the JVM has one.
	hotSpotOpen := false
	if t.openHotSpot != nil && j.isHotSpot(e.snapshot) {
		t.openHotSpot(e, j)
		hotSpotOpen = j.code.readable()
	}
	// So is a Node.js process's V8 layout.
	v8Open := false
	if t.openV8 != nil {
		t.openV8(e, j)
		v8Open = j.v8.readable()
	}
	if err := j.m.Hold(); err != nil {
		t.logger.Debug("hold perf map", zap.Int("pid", pid), zap.Error(err))
	}
	return j.m.Held() || hotSpotOpen || v8Open
}

// perfMapLook is a look for a process's perf map to come (holdPerfMap).
type perfMapLook struct {
	pid   int
	start uint64 // the process's start time
	at    time.Time
	n     int // index into perfMapLookWaits
}

// maxPerfMapLooks bounds the looks waiting: a look goes at its first turn
// when the process is gone, as most on a busy node are.
const maxPerfMapLooks = 4096

// lookForPerfMapLater has holdPerfMap look for pid's perf map at each of
// perfMapLookWaits after now, until it is done. One timer serves every
// process, every perfMapLookEvery while looks wait: a timer per process
// would wake the agent for each of the processes a busy node starts.
func (t *processTable) lookForPerfMapLater(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[pid]
	if e == nil || t.closed || len(t.perfMapLooks) >= maxPerfMapLooks {
		return
	}
	t.perfMapLooks = append(t.perfMapLooks, perfMapLook{pid: pid, start: e.startTime, at: time.Now().Add(perfMapLookWaits[0])})
	if t.perfMapTimer == nil {
		t.perfMapTimer = time.AfterFunc(perfMapLookEvery, t.lookForPerfMaps)
	}
}

// lookForPerfMaps takes the looks that are due.
func (t *processTable) lookForPerfMaps() {
	now := time.Now()
	t.mu.Lock()
	var due []perfMapLook
	waiting := t.perfMapLooks[:0]
	for _, l := range t.perfMapLooks {
		if l.at.After(now) {
			waiting = append(waiting, l)
		} else {
			due = append(due, l)
		}
	}
	t.perfMapLooks = waiting
	t.mu.Unlock()
	var again []perfMapLook
	for _, l := range due {
		if !t.holdPerfMap(l.pid, true, l.start) && l.n+1 < len(perfMapLookWaits) {
			l.n++
			l.at = now.Add(perfMapLookWaits[l.n])
			again = append(again, l)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.perfMapLooks = append(t.perfMapLooks, again...)
	if len(t.perfMapLooks) == 0 || t.closed {
		t.perfMapLooks, t.perfMapTimer = nil, nil
		return
	}
	t.perfMapTimer = time.AfterFunc(perfMapLookEvery, t.lookForPerfMaps)
}

// hasAnonymousCode reports whether p maps executable memory no file backs.
func hasAnonymousCode(p *symbolize.Process) bool {
	for i := range p.Mappings {
		if anonymousPath(p.Mappings[i].Path) {
			return true
		}
	}
	return false
}
