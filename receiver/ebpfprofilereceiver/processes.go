package ebpfprofilereceiver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
	"github.com/hotpath-dev/hotpath/internal/cputime"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/procinfo"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

// processEntry is what the receiver knows about one sampled process. It is
// created when the kernel first reports the process sampled (or when a drain
// meets a pid it never heard of) and dropped after the interval in which it
// exited or went idle, never by scanning /proc. A process that is never
// sampled costs nothing here.
type processEntry struct {
	resource profilebuilder.Process
	// keep: the include/exclude filters' verdict, given at the read and
	// given again by the drain when the process's SDK publishes a service
	// (checkContext); read by the drain.
	keep      bool
	startTime uint64             // clock ticks after boot; tells a reused pid apart
	snapshot  *symbolize.Process // nil when the process was gone before it could be read
	// unread: the process was gone before it could be read
	// (goneBeforeRead); a snapshot it has is of the files the kernel saw
	// it map, given at its exit (exited).
	unread   bool
	mappings []profilebuilder.Mapping
	readAt   time.Time
	// readMono is readAt on the kernel's exec clock (sampler.MonotonicNow):
	// an exec the kernel recorded after it may have come before or during
	// the read, and what was read may be the image the process left.
	readMono uint64
	exitedAt time.Time
	// execs is processTable.execs[pid] when the read began: a different
	// count now means what was read is an image the process left.
	execs uint64
	// sampledAt is the last drain that had samples of this process;
	// mapsReadAt the last re-read for a change of its executable memory.
	// Guarded by processTable.mu.
	sampledAt, mapsReadAt time.Time
	// unwindDeferred: attaching unwind tables would have needed one-time
	// work while the budget was spent; retried at once when the process has
	// many samples, else by the worker as the next budget interval begins
	// (retryDeferred; retryQueued while it waits there). attachQueued: that
	// work goes to the worker once the entry is installed. Guarded by
	// processTable.mu.
	unwindDeferred, attachQueued, retryQueued bool
	// unsettled: read while the process was exec'ing (its executable was
	// not mapped yet), or kept across its exec event (the dynamic loader
	// may not have mapped its libraries yet): read again at the next
	// chance rather than trusted. Guarded by processTable.mu.
	unsettled bool
	// dwarf: the kernel unwinds its user stacks with unwind tables;
	// unwindDecided: tables were attached or found not needed at least
	// once (until then a binary built without frame pointers is walked
	// with them, and its stacks may break off early).
	dwarf, unwindDecided atomic.Bool
	// endedEarly counts its user stacks (in samples) that ended before the
	// outermost frame, by reason; guarded by processTable.mu.
	endedEarly map[sampler.StackEnd]uint64
	// jit: its perf map, opened when first needed (jit.go).
	jit atomic.Pointer[jitSymbols]
	// The process's OpenTelemetry process context (context.go): the
	// service its SDK published, where the context's header is (0: none
	// found yet) and when it was published; the next look for it or for
	// an update, and how many looks found none. Guarded by
	// processTable.mu once the entry is installed.
	contextService     string
	contextAddr        uint64
	contextPublishedAt uint64
	contextDue         time.Time
	contextMisses      int
}

type processTable struct {
	cfg        *Config
	host       *profilebuilder.Host
	logger     *zap.Logger
	symbolizer *symbolize.Symbolizer
	work       *binaryWork
	procRoot   string
	// buildIDs: each executable's build ID, read once per file identity,
	// so every sample of a process carries it from its first interval on,
	// even when the process is gone by the time the interval is processed.
	buildIDs *buildid.Cache

	// unwind, when set (unwinding: auto, sampler open), decides for each
	// snapshot whether the kernel unwinds it with tables.
	unwind atomic.Pointer[unwinder.Unwinder]
	// python, when set (unwinding: auto), gives CPython processes Python
	// frames (python.go).
	python atomic.Pointer[pythonFrames]
	// forget, when set (sampler open), makes the kernel announce a pid
	// again at its next sample.
	forget atomic.Pointer[func(pid int) error]
	// lastExec, when set (unwinding: auto, sampler open), returns when the
	// kernel saw pid exec last (sampler.LastExec): it knows at once what
	// the exec event tells user space later.
	lastExec atomic.Pointer[func(pid int) (uint64, bool)]
	// mappedFiles, when set (unwinding: auto, sampler open), takes the
	// executable file mappings the kernel saw an exited process make
	// (sampler.TakeMappedFiles).
	mappedFiles atomic.Pointer[func(pid int) []symbolize.KnownMapping]
	// onRead, when set, is told the files of each process read (trace
	// context markers are looked up per binary from them).
	onRead func(pid int, snap *symbolize.Process)
	// openHotSpot, when set, is given each JVM the perf map's looks meet
	// (holdPerfMap), to read its code cache as soon as it has one.
	openHotSpot func(e *processEntry, j *jitSymbols)
	// openV8, when set, is given each process the perf map's looks meet,
	// to read a Node.js process's V8 layout as soon as it is seen.
	openV8 func(e *processEntry, j *jitSymbols)

	// attachQueue feeds the worker that attaches unwind tables needing
	// one-time work (attachWorker).
	attachQueue chan *processEntry
	workerDone  chan struct{}

	mu      sync.Mutex
	entries map[int]*processEntry
	// execs counts exec events per pid: a read that began before the
	// process exec'd must not be installed after the exec dropped the old
	// entry (it would describe a half-replaced image and stay).
	execs  map[int]uint64
	closed bool // after closeAll: late lifecycle work must not reopen files
	// refreshDue: processes whose executable memory changed, re-read
	// together once the burst (a dynamic loader at work) settles.
	refreshDue   map[int]struct{}
	refreshTimer *time.Timer
	// perfMapLooks wait for perfMapTimer (lookForPerfMapLater).
	perfMapLooks []perfMapLook
	perfMapTimer *time.Timer
	// lastDrain is when the previous drain began: an exited process is
	// dropped only once a whole drain began after its exit was reported.
	lastDrain time.Time
	// drainStarts are when the last idleIntervals drains began, oldest
	// first (zero until that many have): a process is idle once it was
	// read and last sampled before the oldest, not merely idleIntervals
	// intervals ago. A drain can take several intervals on a loaded node
	// (the first one reads every process there is); counted in time, a
	// process read during it and not sampled since was dropped as idle
	// while it lived, and when it exited later it had no entry to name it.
	drainStarts [idleIntervals]time.Time
	// left: what was read of the image each process left at its last
	// exec, until a drain began after the exec (leftImage).
	left map[int]leftImage
	// queued: the command names the kernel sent with first-sample and
	// exec events that wait for a reader (queuedName). A drain can meet
	// such a pid before its event is handled (its reader is busy with a
	// slow read) and after the process is gone from /proc: its samples
	// are named after the event's comm instead of the unknown service.
	queued map[int]queuedName

	// cgroupIDs finds the container of a cgroup by the id the kernel's
	// events carry (eventView), for processes gone before they are read;
	// nil where the node has no cgroup v2 hierarchy. Made at first use.
	cgroupIDs     *cgroupattr.IDs
	cgroupIDsOnce sync.Once
}

// eventView is what the kernel's latest first-sample or exec event said of
// a process: its command name ("": not known) and its cgroup (the cgroup v2
// id, 0: not known). They name and place a process that is gone before
// /proc/PID can be read: a short-lived command, in a container or not.
type eventView struct {
	comm   string
	cgroup uint64
	// parent is the process's parent at the event and start when the
	// process started (clock ticks after boot); 0: not known. At an exec
	// they find the image a forked child ran until then (leftImage).
	parent int
	start  uint64
	// at is when the event was sent, on the kernel's exec clock
	// (processEntry.readMono's); 0: not known.
	at uint64
}

// viewOf is what ev says of its process.
func viewOf(ev sampler.ProcEvent) eventView {
	return eventView{comm: ev.Comm, cgroup: ev.CgroupID, parent: int(ev.PPID), start: ev.StartTime, at: ev.At}
}

// queuedName is what the latest queued first-sample or exec event of a pid
// said of it and how many of those events wait.
type queuedName struct {
	view   eventView
	events int
}

// leftImage is the image a process left at an exec. The samples it took
// before the exec are still in the kernel's counts and come with the next
// drain, after the exec event: a forked shell's child is sampled between its
// fork and its exec (in the kernel, tearing down the shell's memory for the
// new program), and the new program may be gone by then, or never sampled.
// Those samples are named against the image they ran in, not left as
// addresses under no service.
type leftImage struct {
	entry *processEntry // nil: the old image was never read
	// resource is the entry's, in the cgroup the process was in at its
	// exec: a process is moved into a container's cgroup before it execs
	// the container's program (runc init, a shell that writes its pid to
	// cgroup.procs), and the work before the exec after the move (the
	// exec's teardown of the old memory) is the container's, as the
	// kernel's CPU accounting has it. Samples from before the move are
	// given the container too: nothing in a sample tells them apart.
	resource profilebuilder.Process
	at       time.Time // when the exec event was handled
	// view is the new image's command name and cgroup (the exec event's):
	// the service and container of a new image that exits before it can
	// be read.
	view eventView
	// parent is the process's parent at the exec, where it had been read
	// (its pid; 0: no such parent). A child forked by a shell execs within
	// microseconds, so the receiver mostly reads it first after its exec,
	// or never, or while the exec runs (the read finds the new image, the
	// exec event comes after it): until the exec it ran its parent's image
	// (a copy of its memory, or the memory itself after vfork), and its
	// samples from before are named against the parent's entry when entry
	// does not fit them (leftImagesOf), under the parent's service.
	// inContainer is the container of the cgroup the child exec'd in,
	// where known (containerKnown): the work before the exec is the
	// container's, as for an entry of its own.
	parent         int
	inContainer    cgroupattr.Container
	containerKnown bool
}

// buildIDCacheSize bounds the executables whose build IDs are remembered.
const buildIDCacheSize = 1024

func newProcessTable(cfg *Config, host *profilebuilder.Host, logger *zap.Logger, symbolizer *symbolize.Symbolizer, work *binaryWork) *processTable {
	t := &processTable{cfg: cfg, host: host, logger: logger, symbolizer: symbolizer, work: work,
		procRoot: "/proc", entries: map[int]*processEntry{}, execs: map[int]uint64{}, refreshDue: map[int]struct{}{}, left: map[int]leftImage{}, queued: map[int]queuedName{},
		buildIDs:    buildid.NewCache(buildIDCacheSize),
		attachQueue: make(chan *processEntry, attachQueueLen),
		workerDone:  make(chan struct{}),
	}
	go t.attachWorker()
	return t
}

// attachQueueLen bounds the processes waiting for their unwind tables; past
// it a process is marked deferred (its tables come when it is heavy).
const attachQueueLen = 256

// installLocked makes e the entry of pid and hands it to the unwind worker
// when its tables need one-time work (or marks it deferred when the queue is
// full). t.mu must be held and t not closed.
func (t *processTable) installLocked(pid int, e *processEntry) {
	t.entries[pid] = e
	if !e.attachQueued {
		return
	}
	select {
	case t.attachQueue <- e:
	default:
		e.unwindDeferred = true
		t.work.deferred(workUnwindTable, 1)
	}
}

// attachWorker attaches the unwind tables of queued processes that are
// still current (not exited, not replaced by a later read), one at a time,
// until closeAll.
func (t *processTable) attachWorker() {
	defer close(t.workerDone)
	for e := range t.attachQueue {
		pid := int(e.resource.PID)
		t.mu.Lock()
		current := t.entries[pid] == e && e.exitedAt.IsZero()
		e.retryQueued = false
		t.mu.Unlock()
		if current {
			t.attachUnwind(e, false)
		}
	}
}

// retryDeferred hands the processes of es whose unwind tables were
// deferred, and that are still current, to the unwind worker; the worker
// attaches them while the budget lasts and defers them again past it. A
// full queue leaves the rest for the next call.
func (t *processTable) retryDeferred(es []*processEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	for _, e := range es {
		if !e.unwindDeferred || e.retryQueued || e.snapshot == nil || t.entries[int(e.resource.PID)] != e || !e.exitedAt.IsZero() {
			continue
		}
		// The last drain's plan may have deferred its symbol tables'
		// loads, which the unwinder reads the binaries through: the new
		// interval's budget allows them (the next drain's plan decides
		// again).
		e.snapshot.DeferLoads.Store(false)
		select {
		case t.attachQueue <- e:
			e.retryQueued = true
		default:
			return
		}
	}
}

// seen handles the kernel's first sample of pid (since it started, exec'd,
// or was forgotten): read it, unless it is the process already known — the
// kernel forgot it (LRU), an idle process woke up, or it was sampled on its
// way out after its exit event — rather than a new process that reused the
// pid. start is the process's start time as the kernel sent it with the
// event (clock ticks after boot; 0: not known, /proc tells), view what
// the event said of it.
func (t *processTable) seen(pid int, start uint64, view eventView) {
	t.mu.Lock()
	known, ok := t.entries[pid]
	execs := t.execs[pid]
	settled := ok && !known.unsettled
	t.mu.Unlock()
	if settled && known.startTime != 0 {
		// Gone, or the same process: what was read of it while it lived
		// stays, as does what its exit gave a process gone before its read
		// (exited). A read now would find at best a zombie (no executable,
		// no environment, no mappings) and its remaining samples would lose
		// their names and service.
		if start == 0 {
			var err error
			if _, start, err = procinfo.ReadStat(t.procRoot, pid); err != nil {
				return
			}
		}
		if start == known.startTime {
			return
		}
	}
	t.store(pid, t.read(pid, start, view), execs)
}

// store makes e the entry of pid, releasing the one it replaces — unless
// the process exec'd since the read began (execs was the count then).
func (t *processTable) store(pid int, e *processEntry, execs uint64) {
	t.mu.Lock()
	if t.closed || t.execs[pid] != execs {
		t.mu.Unlock()
		e.close()
		return
	}
	prev := t.entries[pid]
	if prev != nil && prev != e && prev.startTime == e.startTime {
		// The same process, read again (its first-sample event handled
		// after a drain read it, or after its exec): the drains that had
		// its samples still did.
		e.sampledAt = prev.sampledAt
		if prev.unsettled {
			// Read again after its exec (execed kept it): the same
			// program, whose perf map goes with it.
			e.jit.Store(prev.jit.Swap(nil))
		}
	}
	t.installLocked(pid, e)
	t.mu.Unlock()
	if prev != nil && prev != e {
		prev.close()
	}
}

// execed puts what was read of pid's old image aside (leftImage): the
// kernel announces the new one with its next sample, and view, the new
// image's command name and cgroup, names and places it if it is gone before
// it can be read. It returns false, and keeps the entry, when the entry was
// read after the exec (the first sample's event came before the exec, the
// read after it): that entry is the new image, and the kernel may unwind
// with the tables it gave it. Dropping it would take them away until the
// next read. The kept entry is read again all the same when the new image's
// first sample is announced: it may predate the libraries the dynamic
// loader maps, and a change of executable memory is only reported against
// what that sample found.
func (t *processTable) execed(pid int, view eventView) bool {
	t.mu.Lock()
	t.execs[pid]++
	e := t.entries[pid]
	t.mu.Unlock()
	// An entry of a process gone before its read names nothing: leave
	// drops it.
	if e != nil && e.snapshot != nil && t.readAfterExec(pid, e, view) {
		t.mu.Lock()
		kept := t.entries[pid] == e
		if kept {
			e.execs = t.execs[pid]
			e.unsettled = true
		}
		t.mu.Unlock()
		if kept {
			// What was read is the new image: the image before the exec
			// was never read, and may be the parent's.
			t.leaveToParent(pid, view)
			return false
		}
	}
	t.leave(pid, view)
	return true
}

// readAfterExec reports whether e's read began after the exec that view
// announces: what was read is the new image. The event's time tells, also
// for a process gone by now; else the kernel's record of the process's
// last exec (execAfterRead) does, while it lives.
func (t *processTable) readAfterExec(pid int, e *processEntry, view eventView) bool {
	if view.at != 0 && e.readMono != 0 {
		return view.at < e.readMono
	}
	after, known := t.execAfterRead(pid, e)
	return known && !after
}

// leaveToParent records pid's exec as leave does for a process whose image
// before the exec was never read: its samples from before are named against
// its parent's entry, if the parent was read and started before it
// (leftImage.parent). It keeps pid's entry.
func (t *processTable) leaveToParent(pid int, view eventView) {
	left := leftImage{at: time.Now(), view: view}
	t.setParent(&left, pid)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	prev := t.left[pid]
	t.left[pid] = left
	t.mu.Unlock()
	prev.entry.close()
}

// setParent gives left (pid's, at the exec its view announces) the
// process's parent, if the parent was read.
func (t *processTable) setParent(left *leftImage, pid int) {
	if t.parentEntry(pid, left.view) != nil {
		left.parent = left.view.parent
		left.inContainer, left.containerKnown = t.containerOfCgroup(left.view.cgroup)
	}
}

// parentEntry is the entry of pid's parent at its exec (view.parent), or
// nil: no parent known, not read, or a later process under its pid.
func (t *processTable) parentEntry(pid int, view eventView) *processEntry {
	if view.parent <= 0 || view.parent == pid {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.parentEntryLocked(view.parent, view.start)
}

// parentEntryLocked is the entry of process parent if it was read and
// started no later than its child, which started at childStart (0: not
// known); nil otherwise. t.mu is held.
func (t *processTable) parentEntryLocked(parent int, childStart uint64) *processEntry {
	p := t.entries[parent]
	if p == nil || p.snapshot == nil || (childStart != 0 && p.startTime > childStart) {
		return nil
	}
	return p
}

// leave moves pid's entry aside as the image it left at an exec, replacing
// the one an earlier exec left; the entry's unwind tables go (the kernel
// dropped them at the exec), its snapshot stays open to name the samples
// taken before the exec. view is the exec event's.
func (t *processTable) leave(pid int, view eventView) {
	// Most exec'ing processes (a shell's children) were never read, or
	// were gone before their read: their image before the exec may be
	// their parent's. An entry of a process gone before its read names
	// nothing; a drain names the new image afresh, by the exec event's
	// view. (A read that began before the exec is not installed: execed
	// counted the exec first.)
	t.mu.Lock()
	e := t.entries[pid]
	gone := e != nil && e.snapshot == nil
	if gone {
		delete(t.entries, pid)
	}
	t.mu.Unlock()
	if e == nil || gone {
		if gone {
			e.close()
			t.detachFromKernel(pid)
		}
		t.leaveToParent(pid, view)
		return
	}
	cgroup, err := cgroupattr.Read(t.procRoot, pid)
	cgroupRead := err == nil
	if !cgroupRead {
		// Gone: the cgroup the exec event names, where the node has
		// cgroup v2; else the cgroup of its read stays.
		cgroup, cgroupRead = t.containerOfCgroup(view.cgroup)
	}
	left := leftImage{at: time.Now(), view: view}
	t.setParent(&left, pid)
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return // closeAll took every entry
	}
	e = t.entries[pid]
	delete(t.entries, pid)
	prev := t.left[pid]
	left.entry = e
	if e != nil {
		left.resource = e.resource
		if cgroupRead {
			left.resource.Container = cgroup
		}
	}
	t.left[pid] = left
	t.mu.Unlock()
	prev.entry.close()
	if e != nil {
		t.detachFromKernel(pid)
	}
}

// leftCandidate is an image a process may have run before its last exec
// and the resource its samples from then go under.
type leftCandidate struct {
	entry    *processEntry
	resource profilebuilder.Process
}

// leftImagesOf returns the images pid may have run before its last exec,
// the first n of c, in the order to try: what was read of its own, then its
// parent's (leftImage.parent) under its own pid.
func (t *processTable) leftImagesOf(pid int) (c [2]leftCandidate, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.left[pid]
	if !ok {
		return c, 0
	}
	if l.entry != nil {
		c[n] = leftCandidate{entry: l.entry, resource: l.resource}
		n++
	}
	if l.parent == 0 {
		return c, n
	}
	p := t.parentEntryLocked(l.parent, l.view.start)
	if p == nil {
		return c, n // gone, or its pid reused
	}
	res := p.resource
	res.PID = uint32(pid)
	if l.containerKnown {
		res.Container = l.inContainer
	}
	c[n] = leftCandidate{entry: p, resource: res}
	return c, n + 1
}

// execAfterRead reports whether the kernel recorded pid's last exec after
// e's read began (what was read may be the image the process left). known
// is false when it has no record: unwinding is not auto, the process did
// not exec since the sampler opened, or e is nil; then only the exec events,
// counted in execs, tell.
func (t *processTable) execAfterRead(pid int, e *processEntry) (after, known bool) {
	lastExec := t.lastExec.Load()
	if lastExec == nil || e == nil || e.readMono == 0 {
		return false, false
	}
	at, ok := (*lastExec)(pid)
	if !ok {
		return false, false
	}
	return at >= e.readMono, true
}

// drop forgets pid: its entry, open files and unwind tables. It returns the
// entry dropped, or nil.
func (t *processTable) drop(pid int) *processEntry {
	t.mu.Lock()
	e, ok := t.entries[pid]
	delete(t.entries, pid)
	t.mu.Unlock()
	if !ok {
		return nil
	}
	e.close()
	t.detachFromKernel(pid)
	return e
}

// detachFromKernel takes back what the kernel was given for pid: its unwind
// tables and its Python frame walk.
func (t *processTable) detachFromKernel(pid int) {
	t.detachUnwind(pid)
	if py := t.python.Load(); py != nil {
		py.detach(pid)
	}
}

// mapsChanged notes that pid's executable memory changed since its last
// sample; it is re-read once the burst settles (a dynamic loader maps several
// libraries in a row), and at most once per mapsRereadEvery: a change within
// that time of the last re-read is read when the time is up.
func (t *processTable) mapsChanged(pid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.entries[pid]; !ok || t.closed {
		return // not read yet: its first read will see the new mapping
	}
	t.refreshDue[pid] = struct{}{}
	if t.refreshTimer == nil {
		t.refreshTimer = time.AfterFunc(mapsSettleDelay, t.refreshChanged)
	}
}

func (t *processTable) refreshChanged() {
	t.mu.Lock()
	changed := t.refreshDue
	t.refreshDue, t.refreshTimer = map[int]struct{}{}, nil
	t.mu.Unlock()
	now := time.Now()
	// later: how soon the first of the processes read again too recently
	// to be read now may be read. Dropping its change instead would leave a
	// library it loaded soon after another (a Python program importing one
	// C extension after another) unread until the interval's end, and
	// unread for good in a process that exits before that: no unwind
	// table for the library, and its frames cut the process's stacks.
	var later time.Duration
	for pid := range changed {
		t.mu.Lock()
		e := t.entries[pid]
		readNow := false
		if e != nil && e.exitedAt.IsZero() { // a gone one keeps what was read of it
			if wait := mapsRereadEvery - now.Sub(e.mapsReadAt); wait > 0 {
				t.refreshDue[pid] = struct{}{}
				if later == 0 || wait < later {
					later = wait
				}
			} else {
				e.mapsReadAt = now
				readNow = true
			}
		}
		t.mu.Unlock()
		if readNow {
			t.refresh(pid, now)
			t.holdPerfMap(pid, false, 0)
		}
	}
	if later > 0 {
		t.mu.Lock()
		if t.refreshTimer == nil && !t.closed {
			t.refreshTimer = time.AfterFunc(later, t.refreshChanged)
		}
		t.mu.Unlock()
	}
}

// refresh re-reads a live process whose stacks hit addresses outside its
// snapshot (libraries mapped after it was read), at most once per interval:
// readBefore is the interval's drain time. It returns the entry in force,
// which is nil when the process's entry went meanwhile (exec, exit) and the
// new read could not take its place.
func (t *processTable) refresh(pid int, readBefore time.Time) *processEntry {
	t.mu.Lock()
	old := t.entries[pid]
	execs := t.execs[pid]
	// exitedAt is written under t.mu by the lifecycle watcher.
	current := old != nil && (!old.readAt.Before(readBefore) || !old.exitedAt.IsZero())
	t.mu.Unlock()
	if current {
		return old
	}
	e := t.read(pid, 0, eventView{})
	if e.snapshot == nil || (old != nil && e.startTime != old.startTime) {
		e.close()
		return old // gone meanwhile (or the pid is another process's now): keep what we had
	}
	t.mu.Lock()
	if t.closed || t.entries[pid] != old || t.execs[pid] != execs {
		t.mu.Unlock()
		e.close()
		return old
	}
	if old != nil {
		e.sampledAt, e.mapsReadAt = old.sampledAt, old.mapsReadAt
		e.endedEarly = old.endedEarly
		// Same program: its perf map read so far, and the map file it
		// may own, go with it; closing old must not end them.
		e.jit.Store(old.jit.Swap(nil))
	}
	t.installLocked(pid, e)
	t.mu.Unlock()
	old.close()
	return e
}

// lookup returns the entry for pid, reading the process if it was never
// observed: its first-sample event may still be queued, or was lost. A
// process gone by then is named after the latest command name the kernel
// sent for it (a queued event's, or its last exec's).
func (t *processTable) lookup(pid int) *processEntry {
	t.mu.Lock()
	e, ok := t.entries[pid]
	execs := t.execs[pid]
	view := t.left[pid].view // the program it exec'd, if it did lately
	if q, queued := t.queued[pid]; queued {
		view = q.view // the latest the kernel sent, not handled yet
	}
	t.mu.Unlock()
	if ok {
		return e
	}
	e = t.read(pid, 0, view)
	t.mu.Lock()
	if prev, ok := t.entries[pid]; ok {
		// Read concurrently by the lifecycle watcher; keep one.
		e.close()
		e = prev
	} else if !t.closed && t.execs[pid] == execs {
		t.installLocked(pid, e)
	}
	t.mu.Unlock()
	return e
}

// namesEvent: the event carries a process's command name, which a drain
// uses if it meets the pid before a reader handles the event.
func namesEvent(ev sampler.ProcEvent) bool {
	return (ev.Kind == sampler.EventSeen || ev.Kind == sampler.EventExec) && ev.Comm != ""
}

// eventQueued records ev's command name as it is queued for its reader.
func (t *processTable) eventQueued(ev sampler.ProcEvent) {
	if !namesEvent(ev) {
		return
	}
	t.mu.Lock()
	q := t.queued[int(ev.PID)]
	t.queued[int(ev.PID)] = queuedName{view: viewOf(ev), events: q.events + 1}
	t.mu.Unlock()
}

// eventHandled forgets ev's queued name once its reader has acted on it:
// the entry it read, or the image it left, names the pid from then on.
func (t *processTable) eventHandled(ev sampler.ProcEvent) {
	if !namesEvent(ev) {
		return
	}
	pid := int(ev.PID)
	t.mu.Lock()
	if q := t.queued[pid]; q.events > 1 {
		q.events--
		t.queued[pid] = q
	} else {
		delete(t.queued, pid)
	}
	t.mu.Unlock()
}

// exited records pid's exit, reported at at; view is what the exit event
// said of it. A process gone before it could be read (its entry has no
// snapshot, or it has no entry: an exec dropped one that had none, or a
// drain dropped it as idle) is given a snapshot of the executable files
// the kernel saw it map (symbolize.SnapshotKnown): its samples are named
// where another process's read has those files' tables in memory. A
// shell's short commands (ls, true, a compiler's driver) are mostly such
// processes: they exit within milliseconds of their first sample.
// It reports whether the process was one gone before its read (not
// filtered out) and whether its samples are named that way.
func (t *processTable) exited(pid int, at time.Time, view eventView) (unread, named bool) {
	var known []symbolize.KnownMapping
	if take := t.mappedFiles.Load(); take != nil {
		known = (*take)(pid) // also frees the kernel's list
	}
	t.mu.Lock()
	e := t.entries[pid]
	if e != nil {
		e.exitedAt = at
	}
	if e != nil && (e.snapshot != nil || !e.keep) {
		t.mu.Unlock()
		return false, false // read while it lived (or filtered out)
	}
	// Else a kernel thread, or a process whose memory map could not be
	// read, which the files it mapped name too.
	unread = e == nil || e.unread
	if len(known) == 0 {
		t.mu.Unlock()
		return unread, false // the kernel kept no list of its files
	}
	n := &processEntry{resource: profilebuilder.Process{PID: uint32(pid), Host: t.host}, exitedAt: at}
	if e != nil {
		n.resource, n.keep, n.unread, n.startTime, n.readAt, n.readMono, n.execs = e.resource, e.keep, e.unread, e.startTime, e.readAt, e.readMono, e.execs
	} else if view.comm == "" {
		// The exit event's comm is the process's name at its end; without
		// it, the latest a queued event or its last exec sent.
		view = t.left[pid].view
		if q, queued := t.queued[pid]; queued {
			view = q.view
		}
	}
	t.mu.Unlock()
	if e == nil {
		n.readAt, n.readMono = at, sampler.MonotonicNow()
		if t.goneBeforeRead(n, pid, view); !n.keep {
			return false, false
		}
	}
	if n.snapshot = t.symbolizer.SnapshotKnown(pid, known); n.snapshot == nil {
		return unread, false // none of its files has a table in memory
	}
	for _, m := range n.snapshot.Mappings {
		n.mappings = append(n.mappings, profilebuilder.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path})
	}
	t.mu.Lock()
	installed := !t.closed && t.entries[pid] == e
	if installed {
		if e != nil {
			n.sampledAt, n.mapsReadAt, n.endedEarly = e.sampledAt, e.mapsReadAt, e.endedEarly
		}
		t.installLocked(pid, n)
	}
	t.mu.Unlock()
	if !installed {
		n.close()
		return unread, false
	}
	e.close()
	return unread, true
}

// forgetExitedBefore drops processes whose exit was reported before the
// previous drain began, and processes with no samples for idleIntervals
// drains, and as many intervals: the kernel announces those again when they
// next run. An exited process is kept through one more drain than its exit
// event suggests: the exit event comes at the start of the kernel's exit
// work, which is still sampled (tearing down a large address space takes a
// while) and may land in the next drain's counts; those samples keep the
// process's names and service. A process not sampled in this drain is
// checked for life (one stat), which catches exits the kernel could not
// report.
func (t *processTable) forgetExitedBefore(drain time.Time, interval time.Duration) {
	t.mu.Lock()
	// Idle: no samples for idleIntervals drains and as many intervals
	// (drainStarts).
	idleSince := drain.Add(-idleIntervals * interval)
	if t.drainStarts[0].Before(idleSince) {
		idleSince = t.drainStarts[0]
	}
	copy(t.drainStarts[:], t.drainStarts[1:])
	t.drainStarts[idleIntervals-1] = drain
	exitedBefore := t.lastDrain
	t.lastDrain = drain
	var drop []int
	var check []int
	for pid, e := range t.entries {
		switch {
		case !e.exitedAt.IsZero() && e.exitedAt.Before(exitedBefore):
			drop = append(drop, pid)
		case !e.exitedAt.IsZero():
		case e.readAt.Before(idleSince) && e.sampledAt.Before(idleSince):
			drop = append(drop, pid)
		case e.sampledAt.Before(drain.Add(-interval / 2)):
			check = append(check, pid)
		}
	}
	t.mu.Unlock()
	for _, pid := range check {
		if _, err := os.Stat(filepath.Join(t.procRoot, strconv.Itoa(pid))); errors.Is(err, os.ErrNotExist) {
			drop = append(drop, pid)
		}
	}
	t.mu.Lock()
	for pid := range t.execs {
		if _, ok := t.entries[pid]; !ok {
			delete(t.execs, pid) // no entry to protect any more
		}
	}
	// An image left before this drain began ran before the map switch: its
	// samples were in this drain or an earlier one.
	var left []*processEntry
	for pid, l := range t.left {
		if l.at.Before(drain) {
			delete(t.left, pid)
			left = append(left, l.entry)
		}
	}
	t.mu.Unlock()
	for _, e := range left {
		e.close()
	}
	forget := t.forget.Load()
	for _, pid := range drop {
		e := t.drop(pid)
		if e != nil && forget != nil && e.exitedAt.IsZero() {
			if err := (*forget)(pid); err != nil {
				t.logger.Debug("forget idle process", zap.Int("pid", pid), zap.Error(err))
			}
		}
	}
}

// tracked reports whether pid is a live process the table follows.
func (t *processTable) tracked(pid int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.entries[pid]
	return ok && e.exitedAt.IsZero()
}

// markSampled records that e had samples in the drain at drainedAt.
func (t *processTable) markSampled(e *processEntry, drainedAt time.Time) {
	t.mu.Lock()
	e.sampledAt = drainedAt
	t.mu.Unlock()
}

func (t *processTable) isUnwindDeferred(e *processEntry) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return e.unwindDeferred
}

func (t *processTable) detachUnwind(pid int) {
	if u := t.unwind.Load(); u != nil {
		if err := u.Detach(pid); err != nil {
			t.logger.Debug("drop unwind tables of process", zap.Int("pid", pid), zap.Error(err))
		}
	}
}

// closeAll releases every snapshot's open files.
func (t *processTable) closeAll() {
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.attachQueue)
	}
	for pid, e := range t.entries {
		delete(t.entries, pid)
		e.close()
	}
	for pid, l := range t.left {
		delete(t.left, pid)
		l.entry.close()
	}
	t.mu.Unlock()
	<-t.workerDone
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
func (t *processTable) target(pid int, e *processEntry) controlapi.Target {
	tg := controlapi.Target{PID: pid, Service: e.resource.ServiceName, Executable: e.resource.ExePath, Unwinding: "frame_pointer"}
	if e.dwarf.Load() {
		tg.Unwinding = "dwarf"
	}
	// Pending only means something when unwinding is auto: without
	// tables, frame pointers are the decision.
	tg.UnwindPending = t.unwind.Load() != nil && e.snapshot != nil && !e.unwindDecided.Load()
	for end, n := range e.endedEarly {
		if tg.StacksEndedEarly == nil {
			tg.StacksEndedEarly = map[string]uint64{}
		}
		tg.StacksEndedEarly[end.String()] = n
	}
	return tg
}

// close releases what was read of the process when its program is over
// (exit, exec, a new process with its pid, the receiver's end); a refresh
// hands its perf map to the new entry first.
func (e *processEntry) close() {
	if e == nil {
		return
	}
	if e.snapshot != nil {
		_ = e.snapshot.Close()
	}
	if j := e.jit.Swap(nil); j != nil {
		j.close()
	}
}

func (t *processTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// read reads pid from /proc; start is its start time if the kernel sent it
// (0: read from /proc too), view what its latest event said of it.
func (t *processTable) read(pid int, start uint64, view eventView) *processEntry {
	t.mu.Lock()
	execs := t.execs[pid]
	t.mu.Unlock()
	var e *processEntry
	cpu := cputime.Measure(func() { e = t.readProcess(pid, start, view) })
	t.work.charge(workProcessRead, 1, cpu)
	e.execs = execs
	// At first sight too, not only when a stack needs it: a short
	// CPU-bound process (a compiler run) would otherwise spend its first
	// tens of milliseconds on frame-pointer stacks. Binaries already known
	// cost a map update here; new ones are one-time work under the budget,
	// done by the worker so that analysing one binary does not hold up
	// reading the next new processes before they exit.
	if u := t.unwind.Load(); u != nil && e.snapshot != nil {
		if u.NeedsWork(e.snapshot) {
			e.attachQueued = true // queued once installed (installLocked)
		} else {
			t.attachUnwind(e, false)
		}
	}
	if t.onRead != nil && e.snapshot != nil {
		t.onRead(pid, e.snapshot)
	}
	if py := t.python.Load(); py != nil && e.snapshot != nil {
		py.attach(e.snapshot, e.startTime)
	}
	return e
}

// containerOfCgroup is the container of the cgroup with the cgroup v2 id
// an event sent (cgroupattr.IDs), and false when it is not known: id 0, no
// cgroup v2 hierarchy, or no such cgroup.
func (t *processTable) containerOfCgroup(id uint64) (cgroupattr.Container, bool) {
	if id == 0 {
		return cgroupattr.Container{}, false
	}
	t.cgroupIDsOnce.Do(func() {
		ids, err := cgroupattr.NewIDs(t.procRoot)
		if err != nil {
			t.logger.Debug("the containers of processes gone before they are read are not known", zap.Error(err))
			return
		}
		t.cgroupIDs = ids
	})
	return t.cgroupIDs.Container(id)
}

// keeps is the include and exclude filters' verdict on a process read
// from /proc.
func (t *processTable) keeps(pid int, exePath, exeName, service string) bool {
	return (t.cfg.Include.empty() || t.cfg.Include.matches(pid, exePath, exeName, service)) &&
		!t.cfg.Exclude.matches(pid, exePath, exeName, service)
}

// filtersByService: a process's service name can change the filters'
// verdict on it.
func (t *processTable) filtersByService() bool {
	return len(t.cfg.Include.Services) > 0 || len(t.cfg.Exclude.Services) > 0
}

func (t *processTable) readProcess(pid int, start uint64, view eventView) *processEntry {
	e := &processEntry{resource: profilebuilder.Process{PID: uint32(pid), Host: t.host}, readAt: time.Now(), readMono: sampler.MonotonicNow()}
	info, err := procinfo.Read(t.procRoot, pid, start)
	if err != nil {
		e.startTime = start
		t.goneBeforeRead(e, pid, view)
		return e
	}
	e.startTime = info.StartTime
	e.resource.ExeName = info.ExeName
	e.resource.ExePath = info.ExePath
	e.resource.Container = info.Container
	// A user process's maps are read once, for its process context and
	// its snapshot; the context's service name decides the filters too.
	var maps []byte
	var mapsErr error
	if info.ExePath != "" {
		if maps, mapsErr = procmaps.Read(t.procRoot, pid); mapsErr == nil {
			t.readContext(e, maps, e.readAt)
		}
	}
	e.resource.ServiceName = t.serviceName(info, e.contextService)
	e.keep = t.keeps(pid, info.ExePath, info.ExeName, e.resource.ServiceName)
	if !e.keep || info.ExePath == "" {
		return e // filtered out, or a kernel thread: nothing to symbolize in user space
	}
	exe := filepath.Join(t.procRoot, strconv.Itoa(pid), "exe")
	var snap *symbolize.Process
	var snapErr error
	if mapsErr != nil {
		snapErr = fmt.Errorf("snapshot %w", mapsErr)
	} else {
		snap, snapErr = t.symbolizer.SnapshotMaps(pid, maps)
	}
	// The snapshot stat'ed the executable's file already: a build ID cached
	// for that identity needs no stat of its own. Without a snapshot, or a
	// mapping of the executable in it, the identity is zero and LookupID
	// stats the file.
	var exeID fileid.ID
	if snapErr == nil {
		if i := slices.IndexFunc(snap.Mappings, func(m symbolize.Mapping) bool { return m.Path == info.ExePath }); i >= 0 {
			exeID = snap.Mappings[i].ID
		}
	}
	if b, _, _, err := t.buildIDs.LookupID(exeID, exe); err == nil {
		e.resource.Build = b
	}
	if snapErr != nil {
		t.logger.Debug("snapshot process", zap.Int("pid", pid), zap.Error(snapErr))
		return e
	}
	e.snapshot = snap
	e.mappings = make([]profilebuilder.Mapping, len(snap.Mappings))
	e.unsettled = true
	for i, m := range snap.Mappings {
		e.mappings[i] = profilebuilder.Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: m.Path}
		if m.Path == info.ExePath {
			e.unsettled = false
			e.mappings[i].Build = e.resource.Build
		}
	}
	return e
}

// goneBeforeRead fills e for pid, which exited before it could be read:
// its frames stay as raw addresses (unless exited names them from the
// files the kernel saw it map), its service is the command name the kernel
// sent, if any (a short-lived compiler or shell command on a busy node),
// and its container the one of the cgroup the kernel sent. Its start time
// is the kernel's, if e has none yet: the first-sample event the kernel
// sends again when it samples the process on its way out (after its exit
// event, see seen) then keeps this entry, with its exit and the names
// exited gave it, instead of reading the gone process once more.
func (t *processTable) goneBeforeRead(e *processEntry, pid int, view eventView) {
	e.unread = true
	if e.startTime == 0 {
		e.startTime = view.start
	}
	e.resource.ServiceName = profileschema.ProcessService("", "", view.comm)
	e.resource.Container, _ = t.containerOfCgroup(view.cgroup)
	e.keep = t.cfg.Include.empty() && !t.cfg.Exclude.matches(pid, "", "", e.resource.ServiceName)
}

// attachUnwind gives the process unwind tables when it needs them. Tables
// of binaries not analysed yet are one-time work: with the budget spent they
// wait, unless the process is heavy (many samples in the last interval).
func (t *processTable) attachUnwind(e *processEntry, heavy bool) {
	u := t.unwind.Load()
	if u == nil || e.snapshot == nil {
		return
	}
	needsWork := u.NeedsWork(e.snapshot)
	if !heavy && needsWork && t.work.overBudget() {
		t.mu.Lock()
		e.unwindDeferred = true
		t.mu.Unlock()
		t.work.deferred(workUnwindTable, 1)
		return
	}
	var dwarf bool
	var err error
	runtime.LockOSThread() // the charges below are per thread
	defer runtime.UnlockOSThread()
	tablesBefore := t.work.chargedOnThread()
	// The kernel is told only if the process did not exec since it was
	// read: at exec the kernel gave the new image its own table. Its exec
	// event may still be on its way (the read began before the exec and
	// the attach comes after it): the kernel's own record says so first.
	pid := e.snapshot.PID
	current := func() bool {
		if after, _ := t.execAfterRead(pid, e); after {
			return false
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.execs[pid] == e.execs
	}
	cpu := cputime.Measure(func() { dwarf, err = u.Attach(e.snapshot, current) })
	// Symbol tables read on the way were charged as such already.
	cpu -= t.work.chargedOnThread() - tablesBefore
	var n uint64
	if needsWork {
		n = 1
	}
	t.work.charge(workUnwindTable, n, cpu)
	e.dwarf.Store(dwarf)
	e.unwindDecided.Store(true)
	t.mu.Lock()
	e.unwindDeferred = false
	t.mu.Unlock()
	if err != nil {
		t.logger.Info("unwind tables: some binaries of this process unwind with frame pointers only",
			zap.Int("pid", e.snapshot.PID), zap.Error(err))
	}
}

// setUnwinder starts (u != nil) or stops table-based unwinding; known
// processes are attached at once, so re-enabling sampling at runtime
// restores their tables.
// setExecClock makes the table judge reads against the kernel's record of
// each process's last exec (sampler.LastExec). A lookup that fails counts as
// no record (the exec events decide, as without the clock) and is passed to
// onErr.
func (t *processTable) setExecClock(lastExec func(pid uint32) (uint64, bool, error), onErr func(pid int, err error)) {
	f := func(pid int) (uint64, bool) {
		ns, ok, err := lastExec(uint32(pid))
		if err != nil {
			onErr(pid, err)
		}
		return ns, ok
	}
	t.lastExec.Store(&f)
}

// setMappedFiles makes exited take each exited process's file mappings
// from the kernel's record (sampler.TakeMappedFiles). A failed take counts
// as none and is passed to onErr.
func (t *processTable) setMappedFiles(take func(pid uint32) ([]symbolize.KnownMapping, error), onErr func(pid int, err error)) {
	f := func(pid int) []symbolize.KnownMapping {
		known, err := take(uint32(pid))
		if err != nil {
			onErr(pid, err)
		}
		return known
	}
	t.mappedFiles.Store(&f)
}

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
		t.attachUnwind(e, true)
	}
}

// serviceName is the service of a process: the one its OpenTelemetry SDK
// published (published, from its process context), else OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) in its environment, else
// the first service_name_rules entry that matches, else the program an
// interpreter runs, else the executable's name.
func (t *processTable) serviceName(info procinfo.Info, published string) string {
	if published != "" {
		return published
	}
	if info.EnvService != "" {
		return info.EnvService
	}
	for _, r := range t.cfg.ServiceNameRules {
		if globMatch(r.Executable, info.ExePath, info.ExeName) {
			return r.Service
		}
	}
	if info.App != "" {
		return info.App // the program an interpreter runs
	}
	return profileschema.ProcessService(info.ExeName, info.ExePath, info.Comm)
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
			out = append(out, t.target(pid, e))
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
		return []controlapi.Target{t.target(pid, e)}, nil
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
