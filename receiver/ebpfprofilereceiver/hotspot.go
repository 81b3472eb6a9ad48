package ebpfprofilereceiver

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// hotSpotOpenTries bounds the drains that try to read a JVM's code cache
// while it is still starting (hotspot.ErrNotReady): HotSpot fills in what
// the reader needs before it runs any Java code, so a JVM not ready after
// several intervals will not be.
const hotSpotOpenTries = 4

// hotSpotScopeBytes bounds the scopes of compiled Java methods (what the
// JIT inlined where) that the agent keeps between drains, for all JVMs
// together.
const hotSpotScopeBytes = 2 << 20

// maxHotSpotNames bounds the names one drain keeps for a JVM's code
// addresses; past it they are read again.
const maxHotSpotNames = 1 << 12

// maxJavaFramesSeen bounds each of the two generations of a JVM's frames
// named while it ran (hotSpotCode.seen): 4,096 frames (a service's hot
// code, its warm-up's, a javac's whole run) are a few hundred KB.
const maxJavaFramesSeen = 1 << 12

// hotSpotCode names a HotSpot JVM's generated code (JIT-compiled methods,
// the interpreter, stubs) from the JVM's own memory (hotspot.CodeCache),
// with no perf map, no flag and no request to the JVM. It is used on the
// drain's path and closed when the program is over, from elsewhere.
type hotSpotCode struct {
	mu     sync.Mutex
	cache  *hotspot.CodeCache
	closed bool
	// failed: the code cache cannot be read (an unsupported JVM, or one
	// not ready after hotSpotOpenTries drains); tries, triedAt: the
	// drains that tried.
	failed  bool
	tries   int
	triedAt time.Time
	// names: this drain's (namesAt) names by code address (innermost
	// first, hotspot.CodeCache.Frames), nil for an address the code cache
	// has no name for.
	names   map[uint64][]hotspot.Frame
	namesAt time.Time
	// unwoundBy: the sampler told how to unwind the JVM's compiled frames
	// (a sampler turned off and on again by the kill switch is told
	// again).
	unwoundBy *sampler.Sampler
	// seen: the names of the JVM's frames (code addresses, interpreted
	// frames' entries; hotspot.CodeCache.Frames) as they were read while
	// it ran: when the kernel first found the frame on a stack
	// (sampler.EventJavaFrame) and at each drain that named it. A drain
	// reads the JVM's memory, which is gone once it exits: these name the
	// frames of a JVM that exited before the drain (a build's javac, a
	// test run's JVM, the last interval of any JVM).
	seen namesSeen[seenFrame]
}

// seenFrame is the name of a JVM's frame read while the JVM ran;
// reportedAt: when the kernel's report of it was read (zero when a drain
// read it).
type seenFrame struct {
	frames     []hotspot.Frame
	reportedAt time.Time
}

// remember keeps frames as the name of the JVM's frame key. h.mu is held.
func (h *hotSpotCode) remember(key uint64, frames []hotspot.Frame, reportedAt time.Time) {
	h.seen.remember(key, seenFrame{frames, reportedAt}, maxJavaFramesSeen)
}

// remembered returns the name remember kept for key. h.mu is held.
func (h *hotSpotCode) remembered(key uint64) (seenFrame, bool) {
	return h.seen.remembered(key)
}

// readable reports whether the JVM's code cache is open.
func (h *hotSpotCode) readable() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cache != nil
}

func (h *hotSpotCode) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cache != nil {
		_ = h.cache.Close()
		h.cache = nil
	}
	h.closed = true
}

// nameHotSpotCode names the code at addr of a JVM (proc maps libjvm.so)
// from its code cache (opened after the JVM's start, or by the first
// drain that needs it), or from what was read of it while the JVM ran
// (hotSpotCode.seen): the methods inlined there, innermost first, then the
// compiled method; or the one name of other code. ok is false where
// neither has a name (the JVM exited or the code was freed before the
// address was read, or the address is not in its code cache): the perf
// map, if any, is asked next. h.names stays beside h.seen: it also keeps,
// for one drain, the addresses that gave no name.
func (r *profileReceiver) nameHotSpotCode(proc *processEntry, j *jitSymbols, addr uint64, drain time.Time) (frames []hotspot.Frame, ok bool) {
	h := &j.code
	h.mu.Lock()
	defer h.mu.Unlock()
	// A frame the kernel first reported in this interval was read within
	// milliseconds of its first sample: it is named from that read, not
	// from the code there at the drain, which the JIT may have freed and
	// reused for other code since (a JVM's warm-up replaces code every
	// second: 798d0e4's CI failure). Frames reported earlier are read again,
	// as the code at an address may have changed since.
	if s, ok := h.remembered(addr); ok && s.reportedAt.After(drain.Add(-r.cfg.Interval)) {
		return s.frames, true
	}
	c := r.hotSpotCodeLocked(proc, h, drain)
	if c == nil {
		return nil, false
	}
	if !h.namesAt.Equal(drain) || len(h.names) >= maxHotSpotNames {
		h.names, h.namesAt = map[uint64][]hotspot.Frame{}, drain
	}
	if frames, ok := h.names[addr]; ok {
		return frames, frames != nil
	}
	frames, _, err := c.Frames(addr)
	switch {
	case err == nil && frames != nil:
		h.remember(addr, frames, time.Time{})
	case err != nil:
		// The JVM exited (or freed the code) since the sample: named as
		// it was while the JVM ran, if it was.
		if seen, ok := h.remembered(addr); ok {
			frames = seen.frames
		} else {
			r.set.Logger.Debug("hotspot: code address not named", zap.Int("pid", proc.snapshot.PID), zap.Error(err))
		}
	}
	h.names[addr] = frames
	return frames, frames != nil
}

// nameInterpreted names an interpreted frame of a JVM (frame, the stack's
// entry: sampler.JavaInterpreted) from the Method* the kernel found in it,
// at its bytecode index.
func (r *profileReceiver) nameInterpreted(proc *processEntry, j *jitSymbols, frame uint64, drain time.Time) (hotspot.Frame, bool) {
	h := &j.code
	h.mu.Lock()
	defer h.mu.Unlock()
	c := r.hotSpotCodeLocked(proc, h, drain)
	if c == nil {
		return hotspot.Frame{}, false
	}
	method, bci, _ := sampler.JavaInterpreted(frame)
	f, err := c.Interpreted(method, bci)
	if err != nil {
		if seen, ok := h.remembered(frame); ok {
			return seen.frames[0], true // the JVM exited since the sample
		}
		r.set.Logger.Debug("hotspot: interpreted method not named", zap.Int("pid", proc.snapshot.PID), zap.Error(err))
		return hotspot.Frame{}, false
	}
	h.remember(frame, []hotspot.Frame{f}, time.Time{})
	return f, true
}

// nameJavaFrameNow names a frame of JVM pid (started at start, in clock
// ticks) that the kernel found on one of its stacks for the first time
// (sampler.EventJavaFrame), while the JVM runs: its samples are named at
// the interval's drain, from its memory, and a JVM that exited by then has
// none left to read. The name kept here names the frame at the drain of
// this interval (read within milliseconds of the frame's first sample,
// before the JIT could free and reuse its code), and at any later drain
// that cannot read the JVM's memory (the JVM is gone); a later drain of a
// live JVM reads the frame again. Only JVMs whose code cache is open are
// walked so.
func (r *profileReceiver) nameJavaFrameNow(pid int, start, frame uint64) {
	j := r.procs.jitSymbolsOf(pid, start)
	if j == nil {
		return
	}
	h := &j.code
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cache == nil {
		return
	}
	if _, ok := h.remembered(frame); ok {
		return // reported again: the kernel's map forgot it
	}
	var frames []hotspot.Frame
	if method, bci, ok := sampler.JavaInterpreted(frame); ok {
		f, err := h.cache.Interpreted(method, bci)
		if err != nil {
			return // left to the drain, as without this read
		}
		frames = []hotspot.Frame{f}
	} else if frames, _, _ = h.cache.Frames(frame); frames == nil {
		return
	}
	h.remember(frame, frames, time.Now())
}

// hotSpotCodeLocked returns the JVM's code cache, opened after the JVM's
// start (openHotSpotEarly) or on the first drain that needs it, or nil
// when it cannot be read. r.mu and h.mu are held.
func (r *profileReceiver) hotSpotCodeLocked(proc *processEntry, h *hotSpotCode, drain time.Time) *hotspot.CodeCache {
	if h.closed || h.failed {
		return nil
	}
	if h.cache == nil {
		if !h.triedAt.Before(drain) {
			return nil // tried in this drain
		}
		h.triedAt = drain
		h.tries++
		c, err := r.openHotSpotCode(proc)
		if err != nil {
			// A JVM still starting, or one gone since the sample (its
			// files are no longer reachable through /proc/PID), is tried
			// again at the next drain that needs it.
			retry := errors.Is(err, hotspot.ErrNotReady) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH)
			if !retry || h.tries >= hotSpotOpenTries {
				h.failed = true
				r.countJVM("unreadable")
				r.reportHotSpotCode(proc, err)
			}
			return nil
		}
		h.cache = c
		r.countJVM("code_cache")
	}
	r.unwindHotSpotOnce(proc, h)
	return h.cache
}

// openHotSpotEarly reads the code cache of JVM proc as soon as it has one,
// on the looks that follow its start (holdPerfMap), and has the kernel
// walk its compiled and interpreted frames from then on. Read at the first
// drain that met one of its frames, as before, a JVM's first interval was
// walked by frame pointer: stacks cut at the first compiled frame, every
// interpreted one "Interpreter" or [unknown], and so all of every JVM that
// ended within it (a CI job's javac, a build tool's short run). A JVM not
// ready (or not readable) yet is left to the next look and to the drains,
// which report what cannot be read.
func (r *profileReceiver) openHotSpotEarly(proc *processEntry, j *jitSymbols) {
	if r.hotSpotCodeOff {
		return
	}
	h := &j.code
	h.mu.Lock()
	if h.cache == nil && !h.closed && !h.failed {
		if c, err := r.openHotSpotCode(proc); err == nil {
			h.cache = c
			r.countJVM("code_cache")
		}
	}
	// Not open, or the sampler told already (the looks and every re-read
	// of its memory map come here): r.mu, which a drain holds for its
	// whole symbolization, is not waited for again. A sampler made since
	// (the kill switch) is told by the next drain that names one of the
	// JVM's frames.
	skip := h.cache == nil || h.unwoundBy != nil
	h.mu.Unlock()
	if skip {
		return
	}
	// The sampler is r.mu's, which the drain holds before h.mu.
	r.mu.Lock()
	defer r.mu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cache != nil {
		r.unwindHotSpotOnce(proc, h)
	}
}

// unwindHotSpotOnce tells the sampler how to unwind the JVM's frames
// (unwindHotSpot) unless it was told: once per sampler, as the kill switch
// makes a new one. r.mu and h.mu are held, h's code cache open.
func (r *profileReceiver) unwindHotSpotOnce(proc *processEntry, h *hotSpotCode) {
	if h.unwoundBy != r.sampler {
		h.unwoundBy = r.sampler
		r.unwindHotSpot(proc, h.cache)
	}
}

// unwindHotSpot has the sampler unwind the JVM's compiled frames with the
// frame sizes its code cache records: HotSpot's compiled code keeps no
// frame pointer (unless -XX:+PreserveFramePointer), so the walk skipped
// from a compiled leaf to the first interpreted frame or stub, and named
// nothing between. Needs the in-kernel walk (unwinding: auto). The frames
// sampled before the JVM's code cache was first read (its first moments,
// openHotSpotEarly) are walked by frame pointer.
func (r *profileReceiver) unwindHotSpot(proc *processEntry, c *hotspot.CodeCache) {
	if r.sampler == nil || r.hotSpotUnwindOff || r.cfg.Unwinding != UnwindingAuto {
		return
	}
	pid := proc.snapshot.PID
	u, ok := c.Unwind()
	if !ok {
		r.set.Logger.Debug("hotspot: the JVM does not describe its frames; its compiled frames are walked by frame pointer", zap.Int("pid", pid))
		return
	}
	if err := r.sampler.SetJVMUnwind(uint32(pid), u); err != nil {
		r.set.Logger.Debug("hotspot: compiled frames are walked by frame pointer", zap.Int("pid", pid), zap.Error(err))
	}
}

// countJVM counts a JVM by how its JIT-compiled frames are named.
func (r *profileReceiver) countJVM(outcome string) {
	r.metrics.tb.ReceiverEbpfprofileJvmProcesses.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
}

// openHotSpotCode reads the code cache of the JVM proc: libjvm.so's
// executable mapping says where its description is.
func (r *profileReceiver) openHotSpotCode(proc *processEntry) (*hotspot.CodeCache, error) {
	p := proc.snapshot
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if filepath.Base(m.Path) == "libjvm.so" {
			return hotspot.OpenCodeCache(r.procs.procRoot, p.PID, hotspot.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, Path: m.Path}, r.hotSpotScopes)
		}
	}
	return nil, errors.New("libjvm.so is not mapped")
}

// reportHotSpotCode logs, once per libjvm.so, that a JVM's code cache
// could not be read: its JIT-compiled frames are named only from a perf
// map (java_perf_map), as before.
func (r *profileReceiver) reportHotSpotCode(proc *processEntry, err error) {
	lib := ""
	for i := range proc.snapshot.Mappings {
		if m := &proc.snapshot.Mappings[i]; filepath.Base(m.Path) == "libjvm.so" {
			lib = m.Path
		}
	}
	if _, told := r.hotSpotUnread.LoadOrStore(lib, true); told {
		r.set.Logger.Debug("hotspot: the JVM's code cache could not be read", zap.Int("pid", proc.snapshot.PID), zap.Error(err))
		return
	}
	r.set.Logger.Info("hotspot: the JVM's code cache could not be read, so its JIT-compiled frames are named only from a perf map (java_perf_map)",
		zap.Int("pid", proc.snapshot.PID), zap.String("libjvm", lib), zap.Error(err))
}
