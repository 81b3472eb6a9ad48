// Package symbolize turns sampled instruction addresses into function, file
// and line: user-space addresses through a snapshot of the process's
// mappings and a per-binary SymbolTable (ELF .symtab/.dynsym with C++ and
// Rust demangling, Go pclntab with inlined calls, DWARF lines and inlined
// calls for native code when present, the vdso), kernel addresses through
// /proc/kallsyms. Tables are cached per file identity, so a redeployed
// binary gets a fresh table and an unchanged one is read once, and shared by the files of one build (SymbolTable.ContentKey),
// so one image's binaries in every container on a node are read once.
package symbolize

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"
	"weak"

	"golang.org/x/sync/singleflight"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/cputime"
	"github.com/hotpath-dev/hotpath/internal/fileid"
)

// Frame is one symbolized stack frame.
type Frame struct {
	Address  uint64 // as sampled
	Function string // "" when unresolved
	File     string
	Line     int
	Mapping  int    // index into Process.Mappings; -1 when in no mapping (and for kernel frames)
	Module   string // kernel frames: "" for vmlinux, else the module ("nf_tables", "bpf")
	IsGo     bool   // symbolized from a Go pclntab (profile.frame.type go rather than native)
	// Inline marks a function the compiler inlined into the next frame: the
	// frames of one address come innermost first, all but the last with
	// Inline set, all with the same Address (in pprof terms, one Location
	// with several Lines).
	Inline bool
}

// DefaultKeepUnused is how long a binary's table stays cached with no new
// process asking for it. The receiver's unwinder keeps a binary's kernel
// unwind table for as long after its last process (unwinder.KeepUnused):
// both come back together for the binary's next process.
const DefaultKeepUnused = 2 * time.Minute

// Options configures a Symbolizer. Zero values pick the defaults.
type Options struct {
	// ProcRoot is where procfs is mounted (default "/proc"); also the source
	// of kallsyms (ProcRoot/kallsyms).
	ProcRoot string
	// MaxTables bounds how many per-binary tables the cache keeps (default 256).
	MaxTables int
	// MaxTableBytes bounds the cache's heap bytes (default 16 MiB). Tables
	// still referenced by live Process snapshots stay alive beyond the bound
	// until those snapshots are dropped.
	MaxTableBytes int
	// KeepUnused is how long a table stays cached after a process last
	// asked for it (default DefaultKeepUnused; see Expire).
	KeepUnused time.Duration
	// Now is the clock (default time.Now); tests set it.
	Now func() time.Time
	// OnTableLoad, when set, is told the CPU time each table read from its
	// file took (on the calling thread), so the caller can account for this
	// one-time work. It must not call back into the Symbolizer.
	OnTableLoad func(cpu time.Duration)
	// DebugFiles, when set, supplies stripped binaries' debug files that
	// DebugDir does not have (the receiver's debuginfod client). A
	// snapshot asks it for the files its binaries need, so they are
	// fetched while the process runs, before its first stacks are
	// symbolized.
	DebugFiles DebugFiles
}

// Symbolizer resolves stacks. It is safe for concurrent use.
type Symbolizer struct {
	procRoot   string
	keepUnused time.Duration
	now        func() time.Time
	onLoad     func(time.Duration)
	debugFiles DebugFiles

	mu    sync.Mutex
	cache *tableCache
	// layouts are the tables read for the unwinder while their binary's
	// debug file is on its way (tableFor's layoutOnly), by file identity:
	// read once however many processes of the binary start meanwhile.
	layouts map[fileid.ID]weak.Pointer[SymbolTable]
	// known is the files snapshots saw, by identity without size, for
	// SnapshotKnown.
	known    map[fileid.ID]knownFile
	memo     symbolMemo
	loading  singleflight.Group // tables being read, by file identity
	loads    uint64
	deferred uint64
	loadTime time.Duration

	vdsoOnce sync.Once
	vdso     *SymbolTable
	vdsoSize uint64

	kmu       sync.Mutex
	kernel    *Kallsyms
	kernelSet bool
}

// New returns a Symbolizer with empty caches.
func New(opts Options) *Symbolizer {
	if opts.ProcRoot == "" {
		opts.ProcRoot = "/proc"
	}
	if opts.MaxTables <= 0 {
		opts.MaxTables = 256
	}
	if opts.MaxTableBytes <= 0 {
		opts.MaxTableBytes = 16 << 20
	}
	if opts.KeepUnused <= 0 {
		opts.KeepUnused = DefaultKeepUnused
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Symbolizer{
		procRoot:   opts.ProcRoot,
		keepUnused: opts.KeepUnused,
		now:        opts.Now,
		onLoad:     opts.OnTableLoad,
		debugFiles: opts.DebugFiles,
		cache:      newTableCache(opts.MaxTables, opts.MaxTableBytes),
		layouts:    map[fileid.ID]weak.Pointer[SymbolTable]{},
		known:      map[fileid.ID]knownFile{},
	}
}

// Snapshot records process pid's executable mappings and opens their files,
// so its stacks can be symbolized even after it exits. The error says so
// plainly when the process no longer exists. Close the Process when done.
func (s *Symbolizer) Snapshot(pid int) (*Process, error) {
	return s.SnapshotMaps(pid, nil)
}

// SnapshotMaps is Snapshot with the process's maps already read (procmaps.Read),
// for a caller that looks at more of them than the executable mappings.
func (s *Symbolizer) SnapshotMaps(pid int, maps []byte) (*Process, error) {
	p, err := snapshotProcess(s.procRoot, pid, maps, s.cached)
	if err != nil {
		return nil, err
	}
	if s.debugFiles != nil {
		// Ask for the debug files of binaries not read yet now, while
		// the process runs (p is not shared yet: no lock).
		for _, pf := range p.files {
			if build := s.debugBuild(pf); build != "" {
				s.debugFiles.DebugFile(build)
			}
		}
	}
	// Attach tables already cached: their files need not stay open.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, pf := range p.files {
		if e, ok := s.cache.get(pf.id, s.now()); ok {
			pf.table, pf.err, pf.loaded = e.table, e.err, true
			if pf.f != nil {
				pf.f.Close()
				pf.f = nil
			}
		}
		// A table evicted between the stat and here leaves pf without a
		// file: its frames stay addresses until the process is read again.
	}
	s.rememberFilesLocked(p)
	return p, nil
}

// debugBuild is the build whose debug file pf's table wants from
// DebugFiles ("" when there are none to ask, or it needs none), checked
// once per file of a process. The caller holds p.mu or owns p alone.
func (s *Symbolizer) debugBuild(pf *procFile) string {
	if s.debugFiles == nil {
		return ""
	}
	if !pf.debugChecked && pf.f != nil {
		pf.debugChecked = true
		pf.debugBuild = wantsDebugFile(pf.f)
	}
	return pf.debugBuild
}

// cached reports whether the table of the file with identity id is cached:
// a snapshot then need not open that file.
func (s *Symbolizer) cached(id fileid.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.cache.peek(id, s.now())
	return ok
}

// User appends the frames of a user stack (leaf first) to out: one per
// address, plus one per function inlined there (Go, or native code with
// DWARF; see Frame.Inline).
// Frame 0 is the sampled PC; deeper frames are return addresses, which point
// just after the call, so they are looked up at address-1 (and reported as
// sampled). Addresses that do not resolve are kept with their mapping,
// never dropped; one inside a function the file's unwind entries know is
// reported at that function's start (see unnamedFunction).
func (s *Symbolizer) User(p *Process, stack []uint64, out []Frame) []Frame {
	for i, addr := range stack {
		pc := addr
		if i > 0 && pc > 0 {
			pc--
		}
		f := Frame{Address: addr, Mapping: p.find(pc)}
		var syms []Symbol
		if f.Mapping >= 0 {
			m := &p.Mappings[f.Mapping]
			if t := s.table(p, m); t != nil {
				if va, ok := t.FileAddr(pc - m.Start + m.Offset); ok {
					if syms = s.lookup(t, va); len(syms) == 0 {
						f.Address = s.unnamedFunction(p, m, t, va, addr)
					}
				}
			}
		}
		if len(syms) == 0 {
			out = append(out, f)
			continue
		}
		for j, sym := range syms {
			f.Function, f.File, f.Line, f.IsGo = sym.Function, sym.File, sym.Line, sym.IsGo
			f.Inline = j < len(syms)-1
			out = append(out, f)
		}
	}
	return out
}

// lookup is t.LookupInline(va), remembered (see symbolMemo). The result is
// shared: callers copy the symbols out and do not modify it.
func (s *Symbolizer) lookup(t *SymbolTable, va uint64) []Symbol {
	if syms, ok := s.memo.get(t.serial, va); ok {
		return syms
	}
	var buf [4]Symbol
	return s.memo.put(t.serial, va, t.LookupInline(va, buf[:0]))
}

// unnamedFunction is the address a frame no symbol names is reported at:
// the start of the function that holds it (at ELF address va of t, m's
// file), where the file's unwind entries tell, else addr as sampled. All the
// samples of one unnamed function then share one frame, as a named
// function's do, instead of one frame per call site and instruction. The
// static functions of a stripped distribution binary are such functions:
// PostgreSQL's 756 distinct unnamed frames in ten minutes of pgbench were
// 228 functions.
func (s *Symbolizer) unnamedFunction(p *Process, m *Mapping, t *SymbolTable, va, addr uint64) uint64 {
	indexed := t.ehBytes.Load() != 0
	start, ok := t.FunctionStart(va)
	s.indexBuilt(p, m, t, indexed)
	if !ok {
		return addr
	}
	off, ok := t.FileOffset(start)
	if !ok || off < m.Offset || off-m.Offset >= m.Limit-m.Start {
		return addr // the function begins outside this mapping
	}
	return m.Start + off - m.Offset
}

// indexBuilt accounts in the cache for m's table when the query just made
// built its .eh_frame index (indexed: it was built before the query), whose
// heap counts in the table's Size.
func (s *Symbolizer) indexBuilt(p *Process, m *Mapping, t *SymbolTable, indexed bool) {
	if indexed || t.ehBytes.Load() == 0 || m.file < 0 {
		return
	}
	s.mu.Lock()
	s.cache.resized(t)
	s.mu.Unlock()
}

// table returns the SymbolTable for m's file, loading it on first use.
func (s *Symbolizer) table(p *Process, m *Mapping) *SymbolTable {
	return s.tableFor(p, m, false)
}

// tableFor is table; layoutOnly is for a caller that needs the binary's
// layout and .eh_frame now, not its names (the unwinder attaching a
// process): while the file's debug file is on its way it gets a table read
// without it, which no cache keeps (the named one is read once the file
// is here), instead of nil. Nor is its load deferred (Process.DeferLoads):
// an attach is one-time work its caller decided to do now, and a binary
// whose table it does not get is left out of the process's tables until
// the process is read again (its stacks cut at the binary's frames).
func (s *Symbolizer) tableFor(p *Process, m *Mapping, layoutOnly bool) *SymbolTable {
	if m.Path == "[vdso]" {
		s.vdsoOnce.Do(func() { s.vdso, s.vdsoSize, _ = loadVDSO(s.procRoot) })
		if s.vdso != nil && m.Limit-m.Start == s.vdsoSize {
			return s.vdso
		}
		return nil
	}
	if m.file < 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	pf := p.files[m.file]
	if pf.loaded {
		return pf.table
	}
	s.mu.Lock()
	e, ok := s.cache.get(pf.id, s.now())
	if !ok {
		if pf.f == nil {
			s.mu.Unlock()
			return nil // closed before it was ever needed
		}
		if p.DeferLoads.Load() && !layoutOnly {
			// Over the agent's budget for per-binary work: the frame keeps
			// its address and mapping (and so its build ID); the file stays
			// open for a later interval. Counted once per process and file.
			if !pf.deferred {
				pf.deferred = true
				s.deferred++
			}
			s.mu.Unlock()
			return nil
		}
	}
	s.mu.Unlock()
	if !ok {
		fetched := ""
		if build := s.debugBuild(pf); build != "" {
			var wait bool
			if fetched, wait = s.debugFiles.DebugFile(build); wait {
				// Its debug file is on its way: read the table once it
				// is here, not now and again then. The file stays open.
				if !layoutOnly {
					return nil
				}
				return s.layoutTable(pf, m.Path, p.PID)
			}
		}
		e = s.load(pf, m.Path, p.PID, fetched)
		s.mu.Lock()
		delete(s.layouts, pf.id)
		s.mu.Unlock()
	}
	pf.table, pf.err, pf.loaded = e.table, e.err, true
	if pf.f != nil {
		pf.f.Close()
		pf.f = nil
	}
	return pf.table
}

// layoutTable is the table of pf's file read without its debug file, for
// the unwinder while that file is on its way; kept by no cache, so
// symbolization never names frames from it.
func (s *Symbolizer) layoutTable(pf *procFile, path string, pid int) *SymbolTable {
	v, _, _ := s.loading.Do("layout "+pf.id.String(), func() (any, error) {
		s.mu.Lock()
		t := s.layouts[pf.id].Value()
		s.mu.Unlock()
		if t != nil {
			return t, nil
		}
		t, _ = s.read(pf, path, pid, "", "")
		if t != nil {
			s.mu.Lock()
			s.layouts[pf.id] = weak.Make(t)
			s.mu.Unlock()
		}
		return t, nil
	})
	return v.(*SymbolTable)
}

// load reads the table of pf's file, once however many processes ask for
// it at the same time, and caches it. A table already in memory for the
// same build, read from a file of another identity, is shared instead (see
// buildid.FileKey). s.mu is not held while the file is read: a large binary's
// table takes hundreds of milliseconds on a busy node, and Snapshot (a new
// process read before it can exit) must not wait for it.
func (s *Symbolizer) load(pf *procFile, path string, pid int, fetched string) *cacheEntry {
	v, _, _ := s.loading.Do(pf.id.String(), func() (any, error) {
		s.mu.Lock()
		if e, ok := s.cache.peek(pf.id, s.now()); ok {
			// Loaded by a call that ended after this one's cache miss.
			s.mu.Unlock()
			return e, nil
		}
		s.mu.Unlock()
		var res readResult
		if key := buildid.FileKey(pf.f); key == "" {
			t, err := s.read(pf, path, pid, "", fetched)
			res = readResult{t: t, err: err, readFor: pf.id}
		} else {
			// Files of one build are read once however many identities
			// they come under at the same time.
			r, _, _ := s.loading.Do("build "+key, func() (any, error) {
				s.mu.Lock()
				t := s.cache.ofContent(key)
				s.mu.Unlock()
				if t != nil {
					return readResult{t: t}, nil
				}
				t, err := s.read(pf, path, pid, key, fetched)
				return readResult{t: t, err: err, readFor: pf.id}, nil
			})
			res = r.(readResult)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if res.t != nil && res.readFor != pf.id {
			s.cache.shared++ // found in memory, or read for another file
		}
		return s.cache.add(pf.id, res.t, res.err, s.now()), nil
	})
	return v.(*cacheEntry)
}

type readResult struct {
	t       *SymbolTable
	err     error
	readFor fileid.ID // the file whose read it is; zero when found in memory
}

// read reads the table of pf's file and counts the load; key is its build
// (buildid.FileKey), which the table keeps to be found by; fetched is its
// debug file from DebugFiles ("" when none).
func (s *Symbolizer) read(pf *procFile, path string, pid int, key, fetched string) (*SymbolTable, error) {
	var t *SymbolTable
	var err error
	cpu := cputime.Measure(func() { t, err = newSymbolTable(pf.f, fetched) })
	if err != nil {
		err = fmt.Errorf("symbol table of %s (pid %d): %w", path, pid, err)
	} else {
		t.contentKey = key
	}
	if s.onLoad != nil {
		s.onLoad(cpu)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	s.loadTime += cpu
	if t != nil {
		s.cache.remember(t)
	}
	return t, err
}

// TableErr returns why the table of mapping i could not be loaded, or nil
// (also nil while it has not been needed yet).
func (p *Process) TableErr(i int) error {
	if i < 0 || i >= len(p.Mappings) || p.Mappings[i].file < 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.files[p.Mappings[i].file].err
}

// Kernel appends the frames of a kernel stack (leaf first) to out, with the
// same return-address rule as User. Kallsyms is loaded on first use; call
// RefreshKernel to load it eagerly, see its error, or pick up new modules.
func (s *Symbolizer) Kernel(stack []uint64, out []Frame) []Frame {
	s.kmu.Lock()
	if !s.kernelSet {
		cpu := cputime.Measure(func() { s.loadKernelLocked() })
		if s.onLoad != nil {
			s.onLoad(cpu)
		}
	}
	k := s.kernel
	s.kmu.Unlock()
	for i, addr := range stack {
		pc := addr
		if i > 0 && pc > 0 {
			pc--
		}
		f := Frame{Address: addr, Mapping: -1}
		if k != nil {
			if name, mod, ok := k.Lookup(pc); ok {
				f.Function, f.Module = name, mod
			}
		}
		out = append(out, f)
	}
	return out
}

// RefreshKernel (re)reads kallsyms, e.g. after modules or BPF programs were
// loaded. On error the previous table, if any, stays in use.
func (s *Symbolizer) RefreshKernel() error {
	s.kmu.Lock()
	defer s.kmu.Unlock()
	return s.loadKernelLocked()
}

func (s *Symbolizer) loadKernelLocked() error {
	k, err := LoadKallsyms(filepath.Join(s.procRoot, "kallsyms"))
	s.kernelSet = true
	if err == nil {
		s.kernel = k
	}
	return err
}

// Stats describes the table cache.
type Stats struct {
	Tables    int // cached tables (including failed loads), each counted once however many files share it
	HeapBytes int // heap bytes of cached tables
	// Held and HeldBytes are the tables that left the cache (Expire, or
	// its bounds) and that live processes still hold: in memory, but not
	// counted in Tables and HeapBytes. Counted by the last Expire.
	Held, HeldBytes int
	// Revived counts tables a process asked for after they left the
	// cache, found alive instead of loaded again.
	Revived uint64
	// Shared counts files given the table of another file of the same
	// build (SymbolTable.ContentKey) instead of a load: the same binary
	// under each container's overlay mount, or a copy of it.
	Shared       uint64
	Hits, Misses uint64
	KernelBytes  int // heap bytes of the kallsyms table, 0 when not loaded
	// MemoBytes is the heap of what the addresses looked up lately
	// resolved to (see symbolMemo), about; it stays within a bound of
	// its own, outside the cache's MaxTableBytes.
	MemoBytes int
	// Loads counts tables read from their files, LoadTime the CPU time
	// spent reading them; Deferred counts files (per process) whose table
	// was not read because their process asked to defer loads
	// (Process.DeferLoads).
	Loads, Deferred uint64
	LoadTime        time.Duration
}

// Trim releases the file pages of every table in memory from the
// process's memory (see SymbolTable.Trim). Call it after each interval's
// symbolization.
func (s *Symbolizer) Trim() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.each((*SymbolTable).Trim)
}

// Expire drops the cached tables no process has asked for in the last
// Options.KeepUnused; those that live processes hold stay in memory with
// them and are found again by the next process of the same file. Call it
// after each interval's symbolization.
func (s *Symbolizer) Expire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.expire(s.now().Add(-s.keepUnused))
	for id, wp := range s.layouts {
		if wp.Value() == nil {
			delete(s.layouts, id)
		}
	}
}

// Stats returns cache figures, for the agent's own telemetry.
func (s *Symbolizer) Stats() Stats {
	s.mu.Lock()
	st := Stats{Tables: s.cache.tables(), Shared: s.cache.shared, HeapBytes: s.cache.bytes, Held: s.cache.heldTables, HeldBytes: s.cache.heldBytes, MemoBytes: s.memo.size(),
		Revived: s.cache.revived, Hits: s.cache.hits, Misses: s.cache.misses, Loads: s.loads, Deferred: s.deferred, LoadTime: s.loadTime}
	s.mu.Unlock()
	s.kmu.Lock()
	if s.kernel != nil {
		st.KernelBytes = s.kernel.Size()
	}
	s.kmu.Unlock()
	return st
}

// MappingTable returns the symbol table of mapping i of p, loading it on
// first use; nil when the mapping has no readable file.
func (s *Symbolizer) MappingTable(p *Process, i int) *SymbolTable {
	if i < 0 || i >= len(p.Mappings) {
		return nil
	}
	return s.tableFor(p, &p.Mappings[i], true)
}
