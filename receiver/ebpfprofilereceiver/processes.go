package ebpfprofilereceiver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/procinfo"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

// processEntry is what the receiver knows about one sampled process. It is
// created when the kernel first reports the process and dropped after the
// interval in which it exited, never by scanning /proc.
type processEntry struct {
	resource profilebuilder.Process
	keep     bool
	snapshot *symbolize.Process // nil when the process was gone before it could be read
	mappings []profilebuilder.Mapping
	readAt   time.Time
	exitedAt time.Time
	// dwarf: the kernel unwinds its user stacks with unwind tables.
	dwarf atomic.Bool
	// endedEarly counts its user stacks (in samples) that ended before the
	// outermost frame, by reason; guarded by processTable.mu.
	endedEarly map[sampler.StackEnd]uint64
	// jit: its perf map, opened when first needed (jit.go).
	jit atomic.Pointer[jitSymbols]
}

type processTable struct {
	cfg        *Config
	hostName   string
	logger     *zap.Logger
	symbolizer *symbolize.Symbolizer

	// unwind, when set (unwinding: auto, sampler open), decides for each
	// snapshot whether the kernel unwinds it with tables.
	unwind atomic.Pointer[unwinder.Unwinder]
	// python, when set (unwinding: auto), gives CPython processes Python
	// frames (python.go).
	python atomic.Pointer[pythonFrames]

	mu      sync.Mutex
	entries map[int]*processEntry
	closed  bool // after closeAll: late lifecycle work must not reopen files
}

func newProcessTable(cfg *Config, hostName string, logger *zap.Logger, symbolizer *symbolize.Symbolizer) *processTable {
	return &processTable{cfg: cfg, hostName: hostName, logger: logger, symbolizer: symbolizer, entries: map[int]*processEntry{}}
}

// observe reads a process now; exec replaces what was known (same pid, new
// program).
func (t *processTable) observe(pid int, exec bool) {
	t.mu.Lock()
	_, known := t.entries[pid]
	t.mu.Unlock()
	if known && !exec {
		return
	}
	e := t.read(pid)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		e.close()
		return
	}
	prev := t.entries[pid]
	t.entries[pid] = e
	t.mu.Unlock()
	prev.close()
}

// refresh re-reads a live process whose stacks hit addresses outside its
// snapshot (libraries the dynamic loader or dlopen mapped after it was read),
// at most once per interval: readBefore is the interval's drain time.
func (t *processTable) refresh(pid int, readBefore time.Time) *processEntry {
	t.mu.Lock()
	old := t.entries[pid]
	t.mu.Unlock()
	if old != nil && (!old.readAt.Before(readBefore) || !old.exitedAt.IsZero()) {
		return old
	}
	e := t.read(pid)
	if e.snapshot == nil {
		e.close()
		return old // gone meanwhile: keep what we had
	}
	if old != nil {
		e.jit.Store(old.jit.Load()) // same program: its perf map read so far
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		e.close()
		return old
	}
	t.entries[pid] = e
	t.mu.Unlock()
	old.close()
	return e
}

// lookup returns the entry for pid, reading the process if it was never
// observed (its first-sample event may still be queued).
func (t *processTable) lookup(pid int) *processEntry {
	t.mu.Lock()
	e, ok := t.entries[pid]
	t.mu.Unlock()
	if ok {
		return e
	}
	e = t.read(pid)
	t.mu.Lock()
	if prev, ok := t.entries[pid]; ok {
		// Read concurrently by the lifecycle watcher; keep one.
		e.close()
		e = prev
	} else {
		t.entries[pid] = e
	}
	t.mu.Unlock()
	return e
}

func (t *processTable) exited(pid int, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.entries[pid]; ok {
		e.exitedAt = at
	}
}

// forgetExitedBefore drops processes that exited before a drain began: all
// their samples were in that drain.
func (t *processTable) forgetExitedBefore(drain time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for pid, e := range t.entries {
		if !e.exitedAt.IsZero() && e.exitedAt.Before(drain) {
			delete(t.entries, pid)
			e.close()
			if u := t.unwind.Load(); u != nil {
				if err := u.Detach(pid); err != nil {
					t.logger.Debug("drop unwind tables of exited process", zap.Int("pid", pid), zap.Error(err))
				}
			}
			if py := t.python.Load(); py != nil {
				py.detach(pid)
			}
		}
	}
}

// closeAll releases every snapshot's open files.
func (t *processTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for pid, e := range t.entries {
		delete(t.entries, pid)
		e.close()
	}
}

// countEndedEarly adds n samples whose user stack ended early for reason.
func (t *processTable) countEndedEarly(e *processEntry, reason sampler.StackEnd, n uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.endedEarly == nil {
		e.endedEarly = map[sampler.StackEnd]uint64{}
	}
	e.endedEarly[reason] += n
}

// target describes e for the control endpoint; t.mu must be held.
func (e *processEntry) target(pid int) controlapi.Target {
	tg := controlapi.Target{PID: pid, Service: e.resource.ServiceName, Executable: e.resource.ExePath, Unwinding: "frame_pointer"}
	if e.dwarf.Load() {
		tg.Unwinding = "dwarf"
	}
	for end, n := range e.endedEarly {
		if tg.StacksEndedEarly == nil {
			tg.StacksEndedEarly = map[string]uint64{}
		}
		tg.StacksEndedEarly[end.String()] = n
	}
	return tg
}

func (e *processEntry) close() {
	if e != nil && e.snapshot != nil {
		_ = e.snapshot.Close()
	}
}

func (t *processTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

func (t *processTable) read(pid int) *processEntry {
	e := &processEntry{resource: profilebuilder.Process{PID: uint32(pid), HostName: t.hostName}, readAt: time.Now()}
	info, err := procinfo.Read("/proc", pid)
	if err != nil {
		// Exited before we could look: its frames stay as raw addresses.
		e.resource.ServiceName = profileschema.UnknownService
		e.keep = t.cfg.Include.empty() && !t.cfg.Exclude.matches(pid, "", "", e.resource.ServiceName)
		return e
	}
	e.resource.ExeName = info.ExeName
	e.resource.ExePath = info.ExePath
	e.resource.ContainerID = info.ContainerID
	e.resource.ServiceName = t.serviceName(info)
	e.keep = (t.cfg.Include.empty() || t.cfg.Include.matches(pid, info.ExePath, info.ExeName, e.resource.ServiceName)) &&
		!t.cfg.Exclude.matches(pid, info.ExePath, info.ExeName, e.resource.ServiceName)
	if !e.keep || info.ExePath == "" {
		return e // filtered out, or a kernel thread: nothing to symbolize in user space
	}
	snap, err := t.symbolizer.Snapshot(pid)
	if err != nil {
		t.logger.Debug("snapshot process", zap.Int("pid", pid), zap.Error(err))
		return e
	}
	e.snapshot = snap
	e.mappings = make([]profilebuilder.Mapping, len(snap.Mappings))
	for i, m := range snap.Mappings {
		e.mappings[i] = profilebuilder.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path}
	}
	// At exec too, not only at the first sample: a short CPU-bound process
	// (a compiler run) would otherwise spend its first tens of milliseconds
	// — a large share of its samples — on frame-pointer stacks. Tables are
	// per binary and cached, so a process whose binaries are known costs
	// one map update here.
	t.attachUnwind(e)
	if py := t.python.Load(); py != nil && e.snapshot != nil {
		py.attach(e.snapshot)
	}
	return e
}

// attachUnwind gives the process unwind tables when it needs them.
func (t *processTable) attachUnwind(e *processEntry) {
	u := t.unwind.Load()
	if u == nil || e.snapshot == nil {
		return
	}
	dwarf, err := u.Attach(e.snapshot)
	e.dwarf.Store(dwarf)
	if err != nil {
		t.logger.Info("unwind tables: some binaries of this process unwind with frame pointers only",
			zap.Int("pid", e.snapshot.PID), zap.Error(err))
	}
}

// setUnwinder starts (u != nil) or stops table-based unwinding; known
// processes are attached at once, so re-enabling sampling at runtime
// restores their tables.
func (t *processTable) setUnwinder(u *unwinder.Unwinder) {
	t.unwind.Store(u)
	t.mu.Lock()
	live := make([]*processEntry, 0, len(t.entries))
	for _, e := range t.entries {
		if e.exitedAt.IsZero() {
			live = append(live, e)
		}
	}
	t.mu.Unlock()
	for _, e := range live {
		e.dwarf.Store(false)
		t.attachUnwind(e)
	}
}

func (t *processTable) serviceName(info procinfo.Info) string {
	if info.EnvService != "" {
		return info.EnvService
	}
	for _, r := range t.cfg.ServiceNameRules {
		if globMatch(r.Executable, info.ExePath, info.ExeName) {
			return r.Service
		}
	}
	if info.ExeName != "" {
		return info.ExeName
	}
	return profileschema.UnknownService
}

func (f Filter) matches(pid int, exePath, exeName, service string) bool {
	for _, p := range f.PIDs {
		if p == pid {
			return true
		}
	}
	for _, g := range f.Executables {
		if globMatch(g, exePath, exeName) {
			return true
		}
	}
	for _, g := range f.Services {
		if globMatch(g, service) {
			return true
		}
	}
	return false
}

func globMatch(pattern string, names ...string) bool {
	for _, n := range names {
		if n == "" {
			continue
		}
		if ok, _ := filepath.Match(pattern, n); ok {
			return true
		}
	}
	return false
}

// targets lists the live processes the agent has sampled, by pid.
func (t *processTable) targets() []controlapi.Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]controlapi.Target, 0, len(t.entries))
	for pid, e := range t.entries {
		if e.exitedAt.IsZero() {
			out = append(out, e.target(pid))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out
}

// resolveTargets finds the processes a capture asks for: one pid (read now
// if it was never sampled), or every live process of a service.
func (t *processTable) resolveTargets(pid int, service string) ([]controlapi.Target, error) {
	switch {
	case pid != 0 && service != "":
		return nil, errors.New("capture one pid or one service, not both")
	case pid < 0:
		return nil, fmt.Errorf("pid must be positive (got %d)", pid)
	case pid > 0:
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return nil, unknownTargetError(fmt.Sprintf("no process %d on this host", pid), t.targets())
		}
		e := t.lookup(pid)
		t.mu.Lock()
		defer t.mu.Unlock()
		return []controlapi.Target{e.target(pid)}, nil
	case service != "":
		var out []controlapi.Target
		for _, tg := range t.targets() {
			if tg.Service == service {
				out = append(out, tg)
			}
		}
		if len(out) == 0 {
			return nil, unknownTargetError(fmt.Sprintf("no running process of service %q has been sampled", service), t.targets())
		}
		return out, nil
	}
	return nil, errors.New("name the process to capture: a pid or a service")
}
