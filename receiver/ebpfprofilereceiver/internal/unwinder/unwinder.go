//go:build linux

// Package unwinder decides which processes the in-kernel DWARF unwinder
// walks and keeps their binaries' unwind tables loaded.
//
// A process gets tables only when one of its binaries was built without
// frame pointers (most distribution libraries, glibc included, and the C/C++
// linked into cgo binaries); then only those binaries get tables, and frames
// without rows (Go code, code built with frame pointers) are walked with the
// frame pointer in the same pass.
// Tables are compiled lazily, when a process is first sampled, shared by
// every process that maps the same file, and kept within a memory budget:
// tables no live process uses are evicted first; a binary that does not fit
// is left to frame pointers and counted. A table no live process has used
// for KeepUnused is unloaded too (Expire): the kernel charges the tables to
// the agent's memory cgroup, and a node that ran a burst of new binaries (a
// CI job) would otherwise keep the budget's worth after the burst is over.
package unwinder

import (
	"container/list"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"

	"github.com/hotpath-dev/hotpath/internal/binarycache"
	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// Kernel is the part of the sampler the unwinder drives.
type Kernel interface {
	LoadUnwindTable(rows []unwindtable.Row) (sampler.UnwindTable, error)
	DeleteUnwindTable(id uint32) error
	SetExeUnwind(id fileid.ID, text sampler.FileText, t sampler.UnwindTable) error
	DeleteExeUnwind(id fileid.ID) error
	SetProcessUnwind(pid uint32, ms []sampler.UnwindMapping) error
	DeleteProcessUnwindIfSet(pid uint32, ms []sampler.UnwindMapping) error
}

// KeepUnused is how long a table no live process uses stays loaded: the
// symbolizer's symbol tables leave its cache after the same idle time, and
// a table that comes back after it is read from the binary cache on disk
// (when the receiver has one), not compiled again. A binary run at least
// this often (a CI job's compiler, a health check's shell) keeps its table,
// and with it the table a new process gets at exec.
const KeepUnused = symbolize.DefaultKeepUnused

// Stats is the unwinder's state, for telemetry.
type Stats struct {
	Processes   int    // processes unwound with tables
	Tables      int    // tables loaded in the kernel
	TableBytes  uint64 // their kernel memory
	Binaries    int    // files analysed (frame pointers or not), or sharing the analysis of another file of their build
	OverBudget  uint64 // times a table did not fit in the budget
	Evicted     uint64 // unused tables unloaded to make room
	Expired     uint64 // tables unloaded after KeepUnused without a live process
	BuildErrors uint64 // binaries whose .eh_frame could not be compiled
}

// Unwinder is safe for concurrent use.
type Unwinder struct {
	kernel   Kernel
	sym      *symbolize.Symbolizer
	maxBytes uint64
	disk     *binarycache.Cache // nil: nothing kept across restarts
	log      *zap.Logger

	// analysing: binaries whose .eh_frame is being analysed, by identity.
	analysing singleflight.Group
	// testHookWork, when set (tests), is called as an analysis ("analyse")
	// or a table's load into the kernel ("load") begins, and as Attach
	// goes from looking its binaries up to taking mu ("lock").
	testHookWork func(what string)

	// binMu guards binaries, the map alone: the process reader asks it
	// about every new process (NeedsWork), and must not wait while mu is
	// held to load a large table into the kernel. Taken after mu, never
	// held across work.
	binMu    sync.Mutex
	binaries map[fileid.ID]*binary
	// byContent finds a binary by its build (symbolize's content key):
	// files of one build under different identities (one image layer
	// under each container's overlay mount, which gives each its own
	// device number) share one binary, analysed once, with one table.
	byContent map[string]*binary

	mu        sync.Mutex
	lru       *list.List // of *binary with a loaded table and no users, least recently used first
	procs     map[uint32]attached
	bytes     uint64
	tables    int
	overBudg  uint64
	buildErrs uint64
	evicted   uint64
	expired   uint64
}

// binary is what is known about one file.
type binary struct {
	path       string
	contentKey string // its build, "" when unknown (SymbolTable.ContentKey)
	// ids (the identities of its files, in binaries) and text let the
	// kernel give a process that execs one of them the table at exec, and
	// find it for one that maps one (Kernel.SetExeUnwind). Changed
	// holding mu and binMu.
	ids      []fileid.ID
	text     sampler.FileText
	needs    bool                // built without frame pointers: needs a table; set before b is in binaries
	table    sampler.UnwindTable // ID 0 while not loaded
	inKernel atomic.Bool         // table is loaded; readable holding binMu alone
	users    int
	lruElem  *list.Element
	unused   time.Time         // when users last went to 0 (or the table was loaded), while in lru
	seen     time.Time         // when a process's Attach last looked it up; guarded by binMu
	pending  []unwindtable.Row // compiled while analysing, until loaded
	// loading, while an Attach loads the table (without mu), is closed
	// when it is done, loaded or not. Changed holding mu and binMu.
	loading chan struct{}
}

func (b *binary) loaded() bool { return b.inKernel.Load() }

// attached is what the kernel was given for one process: the binaries whose
// tables it uses and the mappings written.
type attached struct {
	users []*binary
	ms    []sampler.UnwindMapping
}

// New returns an Unwinder that keeps at most maxBytes of tables loaded. disk,
// when not nil, keeps each binary's verdict and rows across restarts.
func New(kernel Kernel, sym *symbolize.Symbolizer, maxBytes uint64, disk *binarycache.Cache, log *zap.Logger) *Unwinder {
	if log == nil {
		log = zap.NewNop()
	}
	return &Unwinder{
		kernel: kernel, sym: sym, maxBytes: maxBytes, disk: disk, log: log,
		binaries:  map[fileid.ID]*binary{},
		byContent: map[string]*binary{},
		lru:       list.New(),
		procs:     map[uint32]attached{},
	}
}

// Attach (re)decides how process p is unwound: with tables for its
// binaries that lack frame pointers, or with frame pointers alone. It
// returns whether p is unwound with tables. Errors are about one binary or
// the kernel and leave p on frame pointers. current, when not nil, is asked
// just before the kernel is told: false means p exec'd since it was read,
// and the kernel is left alone (at exec it gave the new image its own
// table, which what was read here would replace).
func (u *Unwinder) Attach(p *symbolize.Process, current func() bool) (bool, error) {
	type candidate struct {
		m *symbolize.Mapping
		t *symbolize.SymbolTable
		// verdict: the analysis of a binary not known when looked at,
		// or of a known one whose table is not loaded (its rows), worked
		// out before u.mu is taken (below).
		verdict *analysis
	}
	var cands []candidate
	now := time.Now()
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if !unwindable(m) {
			continue
		}
		// A binary already analysed and found to keep frame pointers needs
		// nothing, not even its symbol table: the tenth process of a
		// binary costs a map lookup. After a restart the verdict comes
		// from the disk cache.
		u.binMu.Lock()
		b, known := u.binaries[m.ID]
		if !known && m.ID != (fileid.ID{}) {
			if c, ok := u.disk.GetUnwind(m.ID); ok && c.HasFramePointers {
				b, known = &binary{path: m.Path, ids: []fileid.ID{m.ID}}, true
				u.binaries[m.ID] = b
			}
		}
		if known {
			b.seen = now
		}
		// A known binary needing a table that is not in the kernel was
		// evicted (or its load failed): its rows are read again here,
		// unless another Attach is loading it.
		reload := known && b.needs && !b.loaded() && b.loading == nil
		u.binMu.Unlock()
		if known && !b.needs {
			continue
		}
		// Go code keeps frame pointers on amd64 and has no FDEs; a Go
		// binary with cgo has them for its C and C++ (DuckDB, SQLite…),
		// which is usually built without: the frame-pointer analysis of
		// its .eh_frame decides, like for any other binary.
		t := u.sym.MappingTable(p, i)
		if t == nil {
			continue
		}
		if !known {
			// Another file of the same build analysed already: its
			// verdict and table are this file's.
			if b, known = u.ofContent(m, t, now); known {
				if !b.needs {
					continue
				}
				u.binMu.Lock()
				reload = !b.loaded() && b.loading == nil
				u.binMu.Unlock()
			}
		}
		c := candidate{m: m, t: t}
		// Compiling a binary's .eh_frame takes up to hundreds of
		// milliseconds for a large C++ binary. It is done without u.mu,
		// which the process reader waits for when it attaches a new
		// process of known binaries: a short-lived process must not wait
		// for another binary's analysis and exit unread.
		if !known || reload {
			c.verdict = u.analyse(m, t)
		}
		cands = append(cands, c)
	}

	if u.testHookWork != nil {
		u.testHookWork("lock")
	}
	pid := uint32(p.PID)
	var errs []error
	// The process's binaries that need a table are taken at once (users),
	// loaded or not: no load, for this process or another, evicts them
	// before the kernel is told. The tables not loaded are loaded without
	// u.mu (loadTable), which the exec and exit events (Detach) take.
	type use struct {
		b    *binary
		m    *symbolize.Mapping
		bias uint64
	}
	var uses []use
	var loads []tableLoad
	var others []chan struct{} // tables another Attach is loading
	u.mu.Lock()
	for _, c := range cands {
		b := u.binaryLocked(c.m, c.t, c.verdict)
		if !b.needs {
			continue
		}
		bias, ok := c.t.LoadBias(c.m.Start, c.m.Offset)
		if !ok {
			continue
		}
		u.useLocked(b)
		uses = append(uses, use{b, c.m, bias})
		switch {
		case b.loaded():
		case b.loading != nil:
			others = append(others, b.loading)
		default:
			l := tableLoad{b: b, t: c.t, rows: b.pending}
			if c.verdict != nil && c.verdict.rows != nil {
				l.rows = c.verdict.rows
			}
			b.pending = nil
			u.binMu.Lock()
			b.loading = make(chan struct{})
			u.binMu.Unlock()
			loads = append(loads, l)
		}
	}
	u.mu.Unlock()

	for _, l := range loads {
		if err := u.loadTable(l); err != nil {
			errs = append(errs, err)
		}
	}
	for _, done := range others {
		<-done // its failure is the other Attach's to report
	}

	u.mu.Lock()
	defer u.mu.Unlock()
	var users []*binary
	var ms []sampler.UnwindMapping
	for _, x := range uses {
		if !x.b.loaded() {
			// Over the budget, or its table could not be built or
			// loaded: frame pointers for its frames.
			u.releaseLocked([]*binary{x.b})
			continue
		}
		users = append(users, x.b)
		// The process's entry holds the first MaxUnwindMappings; the
		// kernel finds the others' tables through the process's memory
		// map (exe_unwinds holds every loaded table's files), so a program
		// with a hundred libraries (a browser, a desktop toolkit) unwinds
		// through all of them. The process holds those tables too, so that
		// they stay loaded while it lives.
		if len(ms) < sampler.MaxUnwindMappings {
			ms = append(ms, sampler.UnwindMapping{Start: x.m.Start, End: x.m.Limit, Bias: x.bias, Table: x.b.table})
		}
	}
	if current != nil && !current() {
		u.releaseLocked(users)
		return false, errors.Join(errs...)
	}
	old := u.procs[pid]
	delete(u.procs, pid)
	u.releaseLocked(old.users)
	if len(ms) == 0 {
		if len(old.ms) > 0 {
			errs = append(errs, u.kernel.DeleteProcessUnwindIfSet(pid, old.ms))
		}
		return false, errors.Join(errs...)
	}
	if err := u.kernel.SetProcessUnwind(pid, ms); err != nil {
		u.releaseLocked(users)
		return false, errors.Join(append(errs, err)...)
	}
	u.procs[pid] = attached{users, ms}
	return true, errors.Join(errs...)
}

// tableLoad is a table one Attach loads into the kernel: b's, with the rows
// compiled before (nil: compiled by loadTable, from t).
type tableLoad struct {
	b    *binary
	t    *symbolize.SymbolTable
	rows []unwindtable.Row
}

// loadTable loads l's table within the budget, holding u.mu only to make
// room and to record the result: the rows are compiled (when the analysis
// did not keep them) and written to the kernel without it. The binary was
// marked loading (binary.loading) by the caller; loadTable clears the mark,
// loaded or not.
func (u *Unwinder) loadTable(l tableLoad) error {
	b, path := l.b, l.b.path
	defer func() {
		u.mu.Lock()
		u.binMu.Lock()
		close(b.loading)
		b.loading = nil
		u.binMu.Unlock()
		u.mu.Unlock()
	}()
	rows := l.rows
	if rows == nil {
		ut, err := l.t.UnwindTable()
		if err != nil {
			u.mu.Lock()
			u.buildErrs++
			u.mu.Unlock()
			return fmt.Errorf("unwind table of %s: %w", path, err)
		}
		rows = ut.Rows
	}
	// need is reserved in u.bytes while the table is written: Attaches
	// loading at once stay within the budget together.
	need := uint64(len(rows) * unwindtable.RowBytes)
	u.mu.Lock()
	for u.bytes+need > u.maxBytes && u.evictOneLocked() {
	}
	if u.bytes+need > u.maxBytes {
		u.overBudg++
		used := u.bytes
		u.mu.Unlock()
		return fmt.Errorf("unwind table of %s (%d KiB) does not fit in the budget (%d of %d KiB used by live processes); it unwinds with frame pointers",
			path, need>>10, used>>10, u.maxBytes>>10)
	}
	u.bytes += need
	u.mu.Unlock()

	if u.testHookWork != nil {
		u.testHookWork("load")
	}
	lt, err := u.kernel.LoadUnwindTable(rows)

	u.mu.Lock()
	defer u.mu.Unlock()
	u.bytes -= need
	if err != nil {
		return fmt.Errorf("unwind table of %s: %w", path, err)
	}
	b.table = lt
	b.inKernel.Store(true)
	u.bytes += lt.Bytes
	u.tables++
	for _, id := range b.ids {
		u.setExeUnwindLocked(b, id)
	}
	if b.users == 0 {
		u.pushUnusedLocked(b)
	}
	return nil
}

// ofContent returns the binary of another file of t's build, now also
// m's file's when it keeps frame pointers (binaryLocked records the others,
// whose exec-time entries need mu).
func (u *Unwinder) ofContent(m *symbolize.Mapping, t *symbolize.SymbolTable, now time.Time) (*binary, bool) {
	key := t.ContentKey()
	if key == "" || m.ID == (fileid.ID{}) {
		return nil, false
	}
	u.binMu.Lock()
	defer u.binMu.Unlock()
	b, ok := u.byContent[key]
	if !ok {
		return nil, false
	}
	b.seen = now
	if !b.needs {
		u.binaries[m.ID] = b
	}
	return b, true
}

// NeedsWork reports whether attaching p would analyse a binary not seen yet
// or load a table into the kernel: one-time work the caller may defer.
func (u *Unwinder) NeedsWork(p *symbolize.Process) bool {
	u.binMu.Lock()
	defer u.binMu.Unlock()
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if !unwindable(m) {
			continue
		}
		b, known := u.binaries[m.ID]
		if !known || (b.needs && !b.loaded()) {
			return true
		}
	}
	return false
}

// unwindable: file-backed code (and the vdso); anonymous memory (JIT code)
// is walked with frame pointers.
func unwindable(m *symbolize.Mapping) bool {
	return m.Path == "[vdso]" || (m.Path != "" && m.Path[0] == '/')
}

// Detach forgets a process that exited or exec'd; its tables stay loaded
// (another process may map the same files soon) until the budget needs the
// room or KeepUnused passes (Expire). The kernel's entry goes only if it
// still holds what Attach wrote: the kernel drops it at exit and exec
// itself, and at exec puts the new image's table there, which the old
// image's Detach must not take away.
func (u *Unwinder) Detach(pid int) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	old, ok := u.procs[uint32(pid)]
	if !ok {
		return nil
	}
	delete(u.procs, uint32(pid))
	u.releaseLocked(old.users)
	return u.kernel.DeleteProcessUnwindIfSet(uint32(pid), old.ms)
}

// ExecTable reports whether a process that execs the file id gets its
// table at exec: the binary was analysed, needs a table and has it loaded.
func (u *Unwinder) ExecTable(id fileid.ID) bool {
	u.binMu.Lock()
	defer u.binMu.Unlock()
	b, ok := u.binaries[id]
	return ok && b.needs && b.loaded() && id.Inode != 0
}

// Stats reports the current state.
func (u *Unwinder) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.binMu.Lock()
	binaries := len(u.binaries)
	u.binMu.Unlock()
	return Stats{
		Processes: len(u.procs), Tables: u.tables, TableBytes: u.bytes,
		Binaries: binaries, OverBudget: u.overBudg, BuildErrors: u.buildErrs, Evicted: u.evicted, Expired: u.expired,
	}
}

// Expire unloads the tables no live process has used since KeepUnused
// before now, and forgets the binaries no process has been attached with
// since then and whose tables are not loaded: on a node that builds new
// binaries all day (a CI runner) the verdicts would otherwise pile up, one
// per file ever sampled. A binary forgotten is analysed again at its next
// process, from the disk cache when there is one. Call it once an interval.
func (u *Unwinder) Expire(now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	// The list is in the order tables lost their last user, so the
	// expired ones are at its front.
	for e := u.lru.Front(); e != nil && now.Sub(e.Value.(*binary).unused) >= KeepUnused; e = u.lru.Front() {
		u.unloadLocked(e.Value.(*binary))
		u.expired++
	}
	u.binMu.Lock()
	defer u.binMu.Unlock()
	for id, b := range u.binaries {
		if b.users == 0 && !b.loaded() && now.Sub(b.seen) >= KeepUnused {
			delete(u.binaries, id)
			if u.byContent[b.contentKey] == b {
				delete(u.byContent, b.contentKey)
			}
		}
	}
}

// analysis is what the .eh_frame of a binary says (analyse).
type analysis struct {
	needs    bool              // built without frame pointers
	rows     []unwindtable.Row // its table, when needs
	buildErr bool              // the table could not be compiled: frame pointers only
}

// analyse decides whether m's binary keeps frame pointers, compiling its
// table when it does not; the disk cache answers for binaries seen before a
// restart. Concurrent calls for one binary share one analysis. It runs
// without u.mu.
func (u *Unwinder) analyse(m *symbolize.Mapping, t *symbolize.SymbolTable) *analysis {
	v, _, _ := u.analysing.Do(m.ID.String(), func() (any, error) {
		if u.testHookWork != nil {
			u.testHookWork("analyse")
		}
		if c, ok := u.disk.GetUnwind(m.ID); ok {
			return &analysis{needs: !c.HasFramePointers, rows: c.Rows}, nil
		}
		ut, err := t.UnwindTable()
		if err != nil {
			if errors.Is(err, unwindtable.ErrNoUnwindInfo) {
				// Nothing to unwind with (Go code): frame pointers it is.
				u.disk.PutUnwind(m.ID, binarycache.Unwind{HasFramePointers: true})
				return &analysis{}, nil
			}
			u.log.Debug("no unwind table; frame pointers only", zap.String("binary", m.Path), zap.Error(err))
			return &analysis{buildErr: true}, nil
		}
		if ut.HasFramePointers() {
			u.disk.PutUnwind(m.ID, binarycache.Unwind{HasFramePointers: true})
			return &analysis{}, nil
		}
		u.disk.PutUnwind(m.ID, binarycache.Unwind{Rows: ut.Rows})
		return &analysis{needs: true, rows: ut.Rows}, nil
	})
	return v.(*analysis)
}

// binaryLocked returns the binary of a mapping, recording v (its analysis)
// on first sight; v is nil only for a binary that was known, loaded and
// so in need of a table when Attach looked it up.
func (u *Unwinder) binaryLocked(m *symbolize.Mapping, t *symbolize.SymbolTable, v *analysis) *binary {
	u.binMu.Lock()
	defer u.binMu.Unlock()
	if b, ok := u.binaries[m.ID]; ok {
		return b
	}
	if key := t.ContentKey(); key != "" && m.ID != (fileid.ID{}) {
		if b, ok := u.byContent[key]; ok {
			u.binaries[m.ID] = b
			b.ids = append(b.ids, m.ID)
			if b.loaded() {
				u.setExeUnwindLocked(b, m.ID)
			}
			return b
		}
	}
	if v == nil {
		// Expire forgot it since: its rows are compiled again (loadTable).
		v = &analysis{needs: true}
	}
	b := &binary{path: m.Path, contentKey: t.ContentKey(), ids: []fileid.ID{m.ID}, text: fileText(t), needs: v.needs, seen: time.Now()}
	if b.needs {
		b.pending = v.rows
	}
	if v.buildErr {
		u.buildErrs++
	}
	u.binaries[m.ID] = b
	if b.contentKey != "" && m.ID != (fileid.ID{}) {
		u.byContent[b.contentKey] = b
	}
	return b
}

// fileText is where t's code lies in its file.
func fileText(t *symbolize.SymbolTable) sampler.FileText {
	off, ok := t.TextOffset()
	return sampler.FileText{Vaddr: t.TextVaddr(), Offset: off, OffsetKnown: ok}
}

// setExeUnwindLocked gives b's loaded table to the processes that exec its
// file id from now on.
func (u *Unwinder) setExeUnwindLocked(b *binary, id fileid.ID) {
	if id.Inode == 0 {
		return
	}
	if err := u.kernel.SetExeUnwind(id, b.text, b.table); err != nil {
		u.log.Debug("exec-time unwind table", zap.String("binary", b.path), zap.Error(err))
	}
}

// pushUnusedLocked puts b, which has just lost its last user (or has just
// been loaded), at the back of the list of unused tables.
func (u *Unwinder) pushUnusedLocked(b *binary) {
	b.unused = time.Now()
	b.lruElem = u.lru.PushBack(b)
}

func (u *Unwinder) useLocked(b *binary) {
	if b.users == 0 && b.lruElem != nil {
		u.lru.Remove(b.lruElem)
		b.lruElem = nil
	}
	b.users++
}

func (u *Unwinder) releaseLocked(bs []*binary) {
	for _, b := range bs {
		b.users--
		if b.users == 0 && b.loaded() {
			u.pushUnusedLocked(b)
		}
	}
}

// evictOneLocked unloads the least recently used unused table.
func (u *Unwinder) evictOneLocked() bool {
	e := u.lru.Front()
	if e == nil {
		return false
	}
	u.unloadLocked(e.Value.(*binary))
	u.evicted++
	return true
}

// unloadLocked takes b's unused table out of the kernel: the table itself
// and the entry that gives it to a process at exec.
func (u *Unwinder) unloadLocked(b *binary) {
	u.lru.Remove(b.lruElem)
	b.lruElem = nil
	for _, id := range b.ids {
		if id.Inode == 0 {
			continue
		}
		if err := u.kernel.DeleteExeUnwind(id); err != nil {
			u.log.Warn("unload exec-time unwind table", zap.String("binary", b.path), zap.Error(err))
		}
	}
	if err := u.kernel.DeleteUnwindTable(b.table.ID); err != nil {
		u.log.Warn("unload unwind table", zap.String("binary", b.path), zap.Error(err))
	}
	u.bytes -= b.table.Bytes
	u.tables--
	b.table = sampler.UnwindTable{}
	b.inKernel.Store(false)
}
