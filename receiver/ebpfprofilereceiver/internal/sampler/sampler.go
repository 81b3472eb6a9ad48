//go:build linux

// Package sampler runs hotpath's eBPF CPU sampler: a perf_event program on
// every online CPU counts (pid, tid, user stack, kernel stack, trace context)
// samples in the kernel, and Drain hands the counts of the last interval to
// user space. The trace context comes from maps the caller provides
// (Config.TraceContext; see the tracectx package).
// It also reports process lifecycle events (first seen, exec, exit) so the
// caller can read /proc/PID/maps while a process is still alive.
package sampler

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type sample_key -type sample_stats -type stack_trace -type lifecycle_event -type unwind_row -type unwind_mapping -type proc_unwind -type found_mapping -type exe_key -type exe_unwind -type jvm_unwind -type v8_proc -type py_proc cpuProfile ../../../../bpf/cpu_profile.bpf.c -- -I../../../../bpf

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/hotpath-dev/hotpath/internal/cpulist"
)

// maxStackDepth matches MAX_STACK_DEPTH in cpu_profile.bpf.c.
const maxStackDepth = 127

// Sampler owns the loaded BPF objects, the per-CPU perf events and the
// lifecycle event reader. Its methods are safe for concurrent use.
type Sampler struct {
	log   *slog.Logger
	sizes mapSizes

	mu     sync.Mutex // guards everything below except events
	objs   coreObjects
	perf   perfEvents
	hz     int
	active uint32 // the map set BPF writes to
	sets   [2]mapSet
	drain  drainScratch
	closed bool

	lifecycle    []link.Link
	lifecycleErr error
	mappingsErr  error // why mapped_files is not kept (attachMappings)

	// What a capture needs to load its own program and maps.
	spec    *ebpf.CollectionSpec
	shared  map[string]*ebpf.Map
	capture sync.Mutex // one capture at a time

	rb     *ringbuf.Reader
	rbWait *os.File // rb's map in the network poller; nil: rb waits itself
	events chan ProcEvent
	done   chan struct{}
	wg     sync.WaitGroup

	mapBytes uint64

	dwarf bool // DWARF unwinding loaded (Config.DWARFUnwind)
	// maxUnwindProcesses: how many processes may have tables
	// (Config.MaxUnwindProcesses; the map holds found_only_slots entries
	// per CPU more).
	maxUnwindProcesses int
	nextTable          uint32 // last unwind table id handed out
	// testHookRows, when set (tests), is called as LoadUnwindTable begins
	// writing a table's rows.
	testHookRows func()
}

// coreObjects is what sampling needs; the lifecycle programs are loaded
// separately so a kernel without tp_btf support still samples.
type coreObjects struct {
	cpuProfileMaps
	CpuSample *ebpf.Program  `ebpf:"cpu_sample"`
	ActiveSet *ebpf.Variable `ebpf:"active_set"`
	Bss       *ebpf.Map      `ebpf:".bss"`
}

type lifecycleObjects struct {
	ProcExec *ebpf.Program `ebpf:"proc_exec"`
	ProcExit *ebpf.Program `ebpf:"proc_exit"`
}

type mappingObjects struct {
	ProcVmaStore *ebpf.Program `ebpf:"proc_vma_store"`
}

// maxMappedFilesProcesses bounds mapped_files (about 1 KB a process, kept
// from the first executable mapping to the exit, least recently used
// first out). The walks that need it are of processes in their first 15 s;
// a node starting 10 a second has 150 of those.
const maxMappedFilesProcesses = 512

// mapSet is one of the two counts+stacks pairs; stats index = set number.
type mapSet struct {
	counts *ebpf.Map
	stacks *ebpf.Map
}

// eventQueueLen is how many lifecycle events wait in Events() for the
// receiver before the kernel's ring buffer (128 KiB, 1,820 events) fills
// behind them; a test shrinks it to fill the ring.
var eventQueueLen = 4096

// Open loads the BPF programs and starts sampling on every online CPU.
func Open(cfg Config) (*Sampler, error) {
	return open(cfg, nil)
}

// open lets tests alter the spec before loading (e.g. break a program).
func open(cfg Config, editSpec func(*ebpf.CollectionSpec)) (*Sampler, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sampler config: %w", err)
	}
	cfg = cfg.withDefaults()
	if err := checkFrequency(cfg.FrequencyHz); err != nil {
		return nil, err
	}
	if err := checkCapabilities(); err != nil {
		return nil, err
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return nil, err
	}

	s := &Sampler{
		log:    cfg.Logger,
		sizes:  sizeMaps(cfg, len(cpus)),
		hz:     cfg.FrequencyHz,
		events: make(chan ProcEvent, eventQueueLen),
		done:   make(chan struct{}),
	}
	spec, err := loadCpuProfile()
	if err != nil {
		return nil, fmt.Errorf("load BPF spec: %w", err)
	}
	for _, name := range []string{cpuProfileMapCounts0, cpuProfileMapCounts1} {
		spec.Maps[name].MaxEntries = s.sizes.keys
	}
	for _, name := range []string{cpuProfileMapStacks0, cpuProfileMapStacks1} {
		spec.Maps[name].MaxEntries = s.sizes.stacks
	}
	traceMaps, err := s.configureTraceContext(spec, cfg.TraceContext)
	if err != nil {
		return nil, err
	}
	if cfg.DWARFUnwind {
		if err := spec.Variables[cpuProfileVarDwarfUnwind].Set(uint32(1)); err != nil {
			return nil, fmt.Errorf("enable DWARF unwinding: %w", err)
		}
		// found_only_slots more entries per CPU: the kernel walks a
		// process without tables of its own with one of its CPU's
		// (FOUND_ONLY_KEY).
		ncpu, err := ebpf.PossibleCPU()
		if err != nil {
			return nil, fmt.Errorf("enable DWARF unwinding: %w", err)
		}
		var slots uint32
		if err := spec.Variables[cpuProfileVarFoundOnlySlots].Get(&slots); err != nil {
			return nil, fmt.Errorf("enable DWARF unwinding: %w", err)
		}
		spec.Maps[cpuProfileMapProcUnwinds].MaxEntries = uint32(cfg.MaxUnwindProcesses + ncpu*int(slots))
		s.maxUnwindProcesses = cfg.MaxUnwindProcesses
		spec.Maps[cpuProfileMapUnwindTables].MaxEntries = uint32(cfg.MaxUnwindTables)
		spec.Maps[cpuProfileMapExeUnwinds].MaxEntries = uint32(cfg.MaxUnwindTables)
		spec.Maps[cpuProfileMapExecTimes].MaxEntries = uint32(cfg.MaxUnwindProcesses)
		spec.Maps[cpuProfileMapMappedFiles].MaxEntries = uint32(min(cfg.MaxUnwindProcesses, maxMappedFilesProcesses))
		s.dwarf = true
		if err := enablePythonWalk(spec); err != nil {
			return nil, err
		}
	}
	if editSpec != nil {
		editSpec(spec)
	}

	cache := cfg.KernelTypes
	if cache == nil {
		cache = btf.NewCache()
	}
	if err := spec.LoadAndAssign(&s.objs, &ebpf.CollectionOptions{Cache: cache, MapReplacements: traceMaps}); err != nil {
		return nil, fmt.Errorf("load BPF sampling program: %w", explainLoadError(err))
	}
	s.spec = spec
	// A capture loads its own program: it shares the trace context and
	// unwind maps.
	s.shared = map[string]*ebpf.Map{
		cpuProfileMapProcUnwinds:  s.objs.ProcUnwinds,
		cpuProfileMapUnwindTables: s.objs.UnwindTables,
		cpuProfileMapPyProcs:      s.objs.PyProcs,
		cpuProfileMapMappedFiles:  s.objs.MappedFiles,
		cpuProfileMapJvmUnwinds:   s.objs.JvmUnwinds,
		cpuProfileMapV8Procs:      s.objs.V8Procs,
	}
	maps.Copy(s.shared, traceMaps)
	s.sets = [2]mapSet{
		{counts: s.objs.Counts0, stacks: s.objs.Stacks0},
		{counts: s.objs.Counts1, stacks: s.objs.Stacks1},
	}
	if err := s.objs.ActiveSet.Set(s.active); err != nil {
		s.closeObjects()
		return nil, fmt.Errorf("set active map set: %w", err)
	}
	s.mapBytes, err = mapMemory(s.objs.Counts0, s.objs.Counts1, s.objs.Stacks0, s.objs.Stacks1,
		s.objs.Stats, s.objs.SeenPids, s.objs.Events, s.objs.Bss, s.objs.UnwindTables, s.objs.ProcUnwinds, s.objs.ExecTimes, s.objs.PyProcs, s.objs.MappedFiles, s.objs.JvmUnwinds, s.objs.V8Procs)
	if err != nil {
		s.closeObjects()
		return nil, err
	}

	s.rb, err = ringbuf.NewReader(s.objs.Events)
	if err != nil {
		s.closeObjects()
		return nil, fmt.Errorf("open lifecycle ring buffer: %w", err)
	}
	s.rbWait = newEventWaiter(s.objs.Events)
	s.wg.Add(1)
	go s.readEvents()

	// Lifecycle tracing is best effort: without it, short-lived processes
	// may lose frames, but sampling itself is unaffected.
	if err := s.attachLifecycle(spec, cache); err != nil {
		s.lifecycleErr = err
		s.log.Warn("process exec/exit events unavailable; short-lived processes may lose symbols", "reason", err)
	}
	if s.dwarf {
		if err := s.attachMappings(spec, cache); err != nil {
			s.mappingsErr = err
			s.log.Warn("mappings are not recorded as processes make them; a short-lived process's stacks may stop at its second library", "reason", err)
		}
	}

	s.perf, err = attachPerfEvents(s.objs.CpuSample, s.hz)
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// configureTraceContext turns the per-sample trace lookup on and returns the
// map replacements when maps are given; otherwise the lookup is compiled out
// (a constant) and the placeholder maps are created tiny and unpinned.
func (s *Sampler) configureTraceContext(spec *ebpf.CollectionSpec, tm *TraceMaps) (map[string]*ebpf.Map, error) {
	if tm == nil {
		for _, name := range []string{cpuProfileMapTracesCtxV1, cpuProfileMapGoTraces} {
			spec.Maps[name].Pinning = ebpf.PinNone
			spec.Maps[name].MaxEntries = 1
		}
		return nil, nil
	}
	if tm.Threads == nil || tm.Goroutines == nil {
		return nil, errors.New("sampler config: trace context needs both the thread and the goroutine map")
	}
	if err := spec.Variables[cpuProfileVarTraceLookup].Set(uint32(1)); err != nil {
		return nil, fmt.Errorf("enable trace context lookup: %w", err)
	}
	return map[string]*ebpf.Map{
		cpuProfileMapTracesCtxV1: tm.Threads,
		cpuProfileMapGoTraces:    tm.Goroutines,
	}, nil
}

func (s *Sampler) attachLifecycle(spec *ebpf.CollectionSpec, cache *btf.Cache) error {
	var lc lifecycleObjects
	repl := map[string]*ebpf.Map{
		cpuProfileMapEvents:   s.objs.Events,
		cpuProfileMapSeenPids: s.objs.SeenPids,
		cpuProfileMapStats:    s.objs.Stats,
		cpuProfileMapInExec:   s.objs.InExec, // the exec program's flag, read by cpu_sample
		".bss":                s.objs.Bss,
		// The exec program gives known binaries their tables.
		cpuProfileMapProcUnwinds:       s.objs.ProcUnwinds,
		cpuProfileMapExeUnwinds:        s.objs.ExeUnwinds,
		cpuProfileMapExecTimes:         s.objs.ExecTimes,
		cpuProfileMapProcUnwindScratch: s.objs.ProcUnwindScratch,
		cpuProfileMapUnwindTables:      s.objs.UnwindTables,
		cpuProfileMapMappedFiles:       s.objs.MappedFiles, // dropped at exit
		cpuProfileMapJvmUnwinds:        s.objs.JvmUnwinds,  // dropped at exec and exit
		cpuProfileMapV8Procs:           s.objs.V8Procs,     // dropped at exec and exit
	}
	// The exit program drops an exiting thread's trace context, so it must
	// see the same maps as the sampler (or the sampler's placeholders).
	repl[cpuProfileMapTracesCtxV1] = s.objs.TracesCtxV1
	repl[cpuProfileMapGoTraces] = s.objs.GoTraces
	err := spec.LoadAndAssign(&lc, &ebpf.CollectionOptions{
		Cache:           cache,
		MapReplacements: repl,
	})
	if err != nil {
		return fmt.Errorf("load tp_btf programs (needs kernel BTF at %s): %w", btfPath, err)
	}
	// The links keep the programs alive; the program fds are not needed.
	defer lc.ProcExec.Close()
	defer lc.ProcExit.Close()
	for _, p := range []struct {
		name string
		prog *ebpf.Program
	}{{"tp_btf/sched_process_exec", lc.ProcExec}, {"tp_btf/sched_process_exit", lc.ProcExit}} {
		l, err := link.AttachTracing(link.TracingOptions{Program: p.prog})
		if err != nil {
			for _, l := range s.lifecycle {
				l.Close()
			}
			s.lifecycle = nil
			return fmt.Errorf("attach %s: %w", p.name, err)
		}
		s.lifecycle = append(s.lifecycle, l)
	}
	return nil
}

// attachMappings attaches proc_vma_store, which keeps the executable file
// mappings processes make (mapped_files) for the walks that have no
// mappings from user space. Best effort: without it those walks look one
// mapping up per sample in the process's memory map.
func (s *Sampler) attachMappings(spec *ebpf.CollectionSpec, cache *btf.Cache) error {
	var mo mappingObjects
	err := spec.LoadAndAssign(&mo, &ebpf.CollectionOptions{
		Cache: cache,
		MapReplacements: map[string]*ebpf.Map{
			cpuProfileMapMappedFiles: s.objs.MappedFiles,
			".bss":                   s.objs.Bss,
		},
	})
	if err != nil {
		return fmt.Errorf("load tp_btf/ma_write: %w", err)
	}
	defer mo.ProcVmaStore.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: mo.ProcVmaStore})
	if err != nil {
		return fmt.Errorf("attach tp_btf/ma_write: %w", err)
	}
	s.lifecycle = append(s.lifecycle, l)
	return nil
}

// MappingsErr says why the kernel does not keep the executable mappings
// processes make (DWARF unwinding only), or nil when it does.
func (s *Sampler) MappingsErr() error { return s.mappingsErr }

// LifecycleErr says why exec/exit events are unavailable, or nil when they
// are delivered. EventSeen works either way.
func (s *Sampler) LifecycleErr() error { return s.lifecycleErr }

// SetFrequency changes the sampling rate on every online CPU. The maps are
// kept (sized at Open): a much higher rate may fill them, which shows up as
// Stats.LostMapFull.
func (s *Sampler) SetFrequency(hz int) error {
	if err := checkFrequency(hz); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("set frequency: sampler is closed")
	}
	// Open the new events before closing the old ones so no CPU goes
	// unsampled; on failure the old rate stays in force. The short overlap
	// can add a sample per CPU, which is counted like any other.
	evs, err := attachPerfEvents(s.objs.CpuSample, hz)
	if err != nil {
		return fmt.Errorf("set frequency %d Hz: %w", hz, err)
	}
	old := s.perf
	s.perf, s.hz = evs, hz
	if err := old.close(); err != nil {
		return fmt.Errorf("set frequency %d Hz: close old events: %w", hz, err)
	}
	return nil
}

// FrequencyHz is the current sampling rate.
func (s *Sampler) FrequencyHz() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hz
}

// MaxUniqueKeys is the effective capacity of each counts map: the most
// distinct sample keys one Drain can return.
func (s *Sampler) MaxUniqueKeys() int { return int(s.sizes.keys) }

// MapMemoryBytes is the kernel memory charged for the sampler's BPF maps
// (both map sets, stats, seen pids, ring buffer), as the kernel reports it.
func (s *Sampler) MapMemoryBytes() uint64 { return s.mapBytes }

// ForgetProcess makes the kernel announce pid again (EventSeen) at its next
// sample, and stops its exec, exit and maps-changed events until then: user space
// dropped what it knew of an idle process.
func (s *Sampler) ForgetProcess(pid uint32) error {
	if err := s.objs.SeenPids.Delete(&pid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forget process %d: %w", pid, err)
	}
	return nil
}

// Events delivers process lifecycle events. It is buffered; when the reader
// falls behind the BPF ring buffer fills and BPF counts the drops in
// Stats.LostEvents (BPF never waits). A process whose announcement was
// dropped is not remembered: its next sample announces it. Closed by Close.
func (s *Sampler) Events() <-chan ProcEvent { return s.events }

// Close detaches all programs and frees the maps. Events() is closed.
func (s *Sampler) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if err := s.perf.close(); err != nil {
		errs = append(errs, err)
	}
	s.perf = nil
	for _, l := range s.lifecycle {
		if err := l.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach lifecycle program: %w", err))
		}
	}
	s.lifecycle = nil
	close(s.done)
	if s.rbWait != nil {
		// Ends readEvents' wait in the poller. The ring is closed after
		// the reader has gone: it reads the ring's positions
		// (AvailableBytes) without the ring reader's lock, which Close
		// would race with.
		if err := s.rbWait.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ring buffer waiter: %w", err))
		}
		s.wg.Wait()
	}
	if s.rb != nil {
		if err := s.rb.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close ring buffer: %w", err))
		}
	}
	s.wg.Wait()
	if err := s.closeObjects(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Sampler) closeObjects() error {
	var errs []error
	if err := s.objs.cpuProfileMaps.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close maps: %w", err))
	}
	for _, c := range []interface{ Close() error }{s.objs.CpuSample, s.objs.Bss} {
		if err := c.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close BPF object: %w", err))
		}
	}
	return errors.Join(errs...)
}

func checkFrequency(hz int) error {
	if hz <= 0 {
		return fmt.Errorf("frequency %d Hz: must be positive", hz)
	}
	if limit, err := maxSampleRate(); err == nil && hz > limit {
		return fmt.Errorf("frequency %d Hz: above kernel.perf_event_max_sample_rate (%d)", hz, limit)
	}
	return nil
}

// mapMemory sums the "memlock" the kernel reports for each map in
// /proc/self/fdinfo: the real, preallocated size, not an estimate.
func mapMemory(maps ...*ebpf.Map) (uint64, error) {
	var total uint64
	for _, m := range maps {
		b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(m.FD()))
		if err != nil {
			return 0, fmt.Errorf("read map memory: %w", err)
		}
		found := false
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "memlock:"); ok {
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("parse memlock of map %s: %w", m, err)
				}
				total += n
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("read map memory: no memlock in fdinfo of map %s", m)
		}
	}
	return total, nil
}
