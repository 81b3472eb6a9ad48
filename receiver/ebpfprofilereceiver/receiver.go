package ebpfprofilereceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/btf"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/binarycache"
	"github.com/hotpath-dev/hotpath/internal/cputime"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

type profileReceiver struct {
	cfg  *Config
	set  receiver.Settings
	next xconsumer.Profiles
	host *profilebuilder.Host // shared by every process's resource

	symbolizer  *symbolize.Symbolizer
	binaryCache *binarycache.Cache // nil: off, or its directory unusable
	// withoutMap: the program files noteWithoutMap told of (withoutMapCount
	// of them).
	withoutMap      sync.Map
	withoutMapCount atomic.Int64
	procs           *processTable
	metrics         *selfMetrics
	traceCtx        *traceContext // nil: trace context off
	guard           *overheadGuard
	work            *binaryWork
	control         *controlServer

	// hotSpotUnread: the libjvm.so files whose code cache could not be
	// read (reportHotSpotCode told of them).
	hotSpotUnread sync.Map
	// hotSpotScopes bounds what all JVMs' code caches keep of their
	// compiled methods' scopes.
	hotSpotScopes *hotspot.ScopeBudget
	// hotSpotCodeOff: JVMs' code caches are not read (tests of the perf
	// map request, which stands in when a code cache cannot be read).
	hotSpotCodeOff bool
	// hotSpotUnwindOff: the kernel is not given JVMs' code heaps nor their
	// interpreter's range, so compiled and interpreted frames are walked by
	// frame pointer (tests of what the kernel's HotSpot steps add).
	hotSpotUnwindOff bool
	// v8Layouts: the V8 layout (*nodev8.Layout) or the error of each
	// Node.js binary read, by device and inode; v8Unread: the binaries
	// whose layout could not be used, logged once each.
	v8Layouts, v8Unread sync.Map
	// v8Off: Node.js processes' functions are not named from their memory
	// (tests of the perf map's path).
	v8Off bool

	// mu guards the sampler and everything that symbolizes (the frame
	// buffers below are shared).
	mu      sync.Mutex
	sampler *sampler.Sampler // nil while sampling is off (kill switch)
	// samplerNow is sampler, for the perf map's looks (openV8Early), which
	// compare with it without waiting for r.mu (a drain holds it for its
	// whole symbolization).
	samplerNow atomic.Pointer[sampler.Sampler]
	unwind     *unwinder.Unwinder // unwind tables (unwinding: auto); nil with the sampler
	hz         int                // current rate: the overhead guard may lower it
	// For the control endpoint's status.
	lastCPUPercent float64
	capturing      bool
	frames         []profilebuilder.Frame
	symbuf         []symbolize.Frame
	stackbuf       []uint64 // a user stack with its leaf's caller recovered
	lastLeaf       symbolize.LeafResult
	// leaf counts samples by leaf-caller recovery outcome, since Start
	// (unwinding: auto only).
	leaf leafStats
	// endedEarly counts samples whose user stack ended early, by reason,
	// since Start.
	endedEarly endedEarlyStats
	// waitingForTables: processes with few samples in the last drain whose
	// unwind tables were deferred, handed to the unwind worker when the
	// next budget interval begins (recordWorkLocked).
	waitingForTables []*processEntry

	ctx    context.Context // lives from Start to Shutdown
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newReceiver(set receiver.Settings, cfg *Config, next xconsumer.Profiles) (*profileReceiver, error) {
	host := cfg.HostName
	if host == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("host_name is not set and the host name cannot be read: %w", err)
		}
		host = h
	}
	m, err := newSelfMetrics(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	return &profileReceiver{
		cfg:     cfg,
		set:     set,
		next:    next,
		host:    describeHost(host, set.Logger),
		hz:      cfg.FrequencyHz,
		metrics: m,
		guard:   newOverheadGuard(cfg.MaxCPUPercent, cfg.FrequencyHz),
		work:    newBinaryWork(cfg.MaxCPUPercent, cfg.Interval),

		hotSpotScopes: hotspot.NewScopeBudget(hotSpotScopeBytes),
	}, nil
}

// Start refuses to start, with one sentence saying what to do, when this
// process cannot load BPF programs or open perf events. With enabled: false
// it loads nothing and waits for the control endpoint to turn sampling on.
//
// A refusal is also reported as a permanent error through componentstatus,
// so health checks name this receiver (and why) as the cause.
func (r *profileReceiver) Start(ctx context.Context, host component.Host) error {
	err := r.start(ctx, host)
	if err != nil {
		componentstatus.ReportStatus(host, componentstatus.NewPermanentErrorEvent(err))
	}
	return err
}

func (r *profileReceiver) start(ctx context.Context, host component.Host) error {
	opts := symbolize.Options{
		OnTableLoad: func(cpu time.Duration) { r.work.charge(workSymbolTable, 1, cpu) },
	}
	var fetcher *debugFetcher
	if d := r.cfg.Debuginfod; len(d.URLs) > 0 {
		var err error
		if fetcher, err = newDebugFetcher(d, r.set.Logger, r.metrics.tb.ReceiverEbpfprofileDebuginfodFiles); err != nil {
			return fmt.Errorf("debuginfod: %w", err)
		}
		opts.DebugFiles = fetcher
	}
	r.symbolizer = symbolize.New(opts)
	r.procs = newProcessTable(r.cfg, r.host, r.set.Logger, r.symbolizer, r.work)
	r.procs.openHotSpot = r.openHotSpotEarly
	r.procs.openV8 = r.openV8Early
	if bc := r.cfg.BinaryCache; bc.Directory != "" {
		c, err := binarycache.Open(bc.Directory, int64(bc.MaxMiB)<<20, r.set.Logger)
		if err != nil {
			// The cache saves work at restart; without it the agent
			// computes everything again, which is no reason not to run.
			r.set.Logger.Warn("binary cache off", zap.Error(err))
		} else {
			r.binaryCache = c
		}
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if fetcher != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); fetcher.run(r.ctx) }()
	}
	if r.cfg.Enabled {
		if err := sampler.CheckPrivileges(); err != nil {
			return fmt.Errorf("ebpfprofile receiver cannot sample: %w", err)
		}
		r.warnMissingCapabilities()
		// Both loads below need the kernel's BTF: decoded once, here, for
		// both (about 30 ms of CPU each on a 2-vCPU VM), and let go once
		// they are loaded (the decoded types hold 3.6 MB of heap on
		// Linux 6.18).
		kernelTypes := btf.NewCache()
		r.traceCtx = openTraceContext(r.cfg.TraceContext, r.set.Logger, kernelTypes)
		if r.traceCtx != nil {
			r.procs.onRead = r.traceCtx.processRead
			r.traceCtx.tracked = r.procs.tracked
		}
		r.mu.Lock()
		err := r.startSamplingLocked(kernelTypes)
		r.mu.Unlock()
		if err != nil {
			_ = r.traceCtx.close()
			return fmt.Errorf("ebpfprofile receiver cannot sample: %w", err)
		}
		r.loadKallsyms()
	} else {
		r.set.Logger.Warn("sampling is off (enabled: false): no BPF program is loaded")
	}
	if r.cfg.Control.Endpoint() != "" {
		c, err := startControlServer(ctx, r, host)
		if err != nil {
			r.stopAll()
			return fmt.Errorf("ebpfprofile receiver control endpoint: %w", err)
		}
		r.control = c
	}
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.traceCtx.run(r.ctx) }()
	go func() { defer r.wg.Done(); r.emitEveryInterval(r.ctx) }()
	return nil
}

// warnMissingCapabilities names, once at start, each capability whose lack
// makes the agent report less than it samples (docs/security.md), so that a
// deployment missing one is told which, rather than finding unnamed frames.
func (r *profileReceiver) warnMissingCapabilities() {
	missing, err := sampler.MissingReadCapabilities()
	if err != nil {
		r.set.Logger.Warn("cannot check the agent's capabilities", zap.Error(err))
	}
	for _, m := range missing {
		r.set.Logger.Warn("missing "+m.Name+": "+m.Loses+"; grant it (see docs/security.md)", zap.String("capability", m.Name))
	}
}

// loadKallsyms reads kallsyms beside the start rather than at the first
// kernel frame, so that hidden addresses (no CAP_SYSLOG) are reported at
// start; but not before sampling starts: a scan of /proc/kallsyms takes
// ~100 ms, and the first drain waits for it anyway (the symbolizer's lock).
func (r *profileReceiver) loadKallsyms() {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.symbolizer.RefreshKernel(); err != nil {
			r.set.Logger.Warn("kernel frames will not be symbolized: "+err.Error(), zap.Error(err))
		}
	}()
}

// openSampler is sampler.Open; tests replace it to see how the receiver
// copes with a kernel that refuses part of the program.
var openSampler = sampler.Open

// startSamplingLocked loads and attaches the sampler at the current rate and
// follows its process events. kernelTypes, when not nil, is the kernel's
// BTF as an earlier load decoded it. r.mu must be held.
func (r *profileReceiver) startSamplingLocked(kernelTypes *btf.Cache) error {
	started := time.Now()
	scfg := sampler.Config{
		FrequencyHz:     r.hz,
		MaxUniqueStacks: r.cfg.MaxUniqueStacks,
		Interval:        r.cfg.Interval,
		TraceContext:    r.traceCtx.samplerMaps(),
		DWARFUnwind:     r.cfg.Unwinding == UnwindingAuto,
		KernelTypes:     kernelTypes,
	}
	s, err := openSampler(scfg)
	if err != nil && scfg.DWARFUnwind {
		// The DWARF unwinder needs more of the kernel (bpf_loop: Linux
		// 5.17) than frame pointers do: sample without it rather than not
		// at all.
		scfg.DWARFUnwind = false
		var fpErr error
		if s, fpErr = openSampler(scfg); fpErr == nil {
			r.set.Logger.Warn("unwinding: auto could not load its DWARF unwinder; binaries without frame pointers are unwound with frame pointers only (set unwinding: frame_pointer to silence this)", zap.Error(err))
			err = nil
		}
	}
	if err != nil {
		return err
	}
	r.sampler = s
	r.samplerNow.Store(s)
	forget := func(pid int) error { return s.ForgetProcess(uint32(pid)) }
	r.procs.forget.Store(&forget)
	if scfg.DWARFUnwind {
		r.unwind = unwinder.New(s, r.symbolizer, uint64(r.cfg.MaxUnwindTableMiB)<<20, r.binaryCache, r.set.Logger)
		r.procs.setExecClock(s.LastExec, func(pid int, err error) {
			r.set.Logger.Debug("exec time", zap.Int("pid", pid), zap.Error(err))
		})
		r.procs.setMappedFiles(s.TakeMappedFiles, func(pid int, err error) {
			r.set.Logger.Debug("files mapped by an exited process", zap.Int("pid", pid), zap.Error(err))
		})
		r.procs.setUnwinder(r.unwind)
		if r.cfg.PythonFrames {
			r.procs.setPython(newPythonFrames(s, r.symbolizer, r.set.Logger, r.metrics.tb.ReceiverEbpfprofilePythonProcesses))
		}
	}
	if err := s.LifecycleErr(); err != nil {
		r.set.Logger.Warn("process exec/exit events are off; short-lived processes may lose their symbols", zap.Error(err))
	}
	r.set.Logger.Info("sampling every CPU",
		zap.Int("frequency_hz", r.hz),
		zap.Duration("interval", r.cfg.Interval),
		zap.Duration("attach", time.Since(started)),
		zap.Uint64("bpf_map_bytes", s.MapMemoryBytes()))
	r.wg.Add(1)
	go func() { defer r.wg.Done(); r.watchProcesses(s.Events()) }()
	return nil
}

// setSampling is the runtime kill switch: off emits what was sampled so far
// and detaches every BPF program at once; on loads them again.
func (r *profileReceiver) setSampling(ctx context.Context, on bool) error {
	r.mu.Lock()
	switch {
	case on && r.sampler == nil:
		defer r.mu.Unlock()
		if err := sampler.CheckPrivileges(); err != nil {
			return err
		}
		return r.startSamplingLocked(nil)
	case !on && r.sampler != nil:
		pd, err := r.drainLocked(ctx, alignedStart(time.Now(), r.cfg.Interval))
		r.procs.setUnwinder(nil)
		r.procs.setPython(nil)
		r.procs.forget.Store(nil)
		r.procs.lastExec.Store(nil)
		err = errors.Join(err, r.sampler.Close())
		r.sampler, r.unwind = nil, nil
		r.samplerNow.Store(nil)
		r.metrics.recordFrequency(ctx, 0)
		r.mu.Unlock()
		r.set.Logger.Warn("sampling turned off at runtime: all BPF programs detached")
		return errors.Join(err, r.consume(ctx, pd))
	}
	r.mu.Unlock()
	return nil
}

// Shutdown emits what was sampled since the last interval, so a restart loses
// nothing, then detaches every BPF program.
func (r *profileReceiver) Shutdown(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	var err error
	if r.control != nil {
		err = r.control.shutdown(ctx)
	}
	r.cancel()
	r.mu.Lock()
	var pd pprofile.Profiles
	if r.sampler != nil {
		var derr error
		pd, derr = r.drainLocked(ctx, alignedStart(time.Now(), r.cfg.Interval))
		err = errors.Join(err, derr)
	}
	r.mu.Unlock()
	return errors.Join(err, r.consume(ctx, pd), r.stopAll())
}

// stopAll closes the sampler (its event watcher then ends) and waits for
// every goroutine.
func (r *profileReceiver) stopAll() error {
	r.cancel()
	r.mu.Lock()
	var err error
	if r.sampler != nil {
		r.procs.setUnwinder(nil)
		r.procs.setPython(nil)
		r.procs.forget.Store(nil)
		r.procs.lastExec.Store(nil)
		err = r.sampler.Close()
		r.sampler, r.unwind = nil, nil
		r.samplerNow.Store(nil)
	}
	r.mu.Unlock()
	r.wg.Wait()
	r.procs.closeAll()
	return errors.Join(err, r.traceCtx.close())
}

// processReaders is how many goroutines act on the kernel's process events.
// A read can wait on the kernel (a process in the middle of an exec or a
// large mmap holds the lock its /proc files need) or for the CPU on a busy
// node, for a hundred milliseconds and more; with one reader every new
// process waited behind it, and a short-lived one could exit unread,
// losing its names, build ID and service.
const processReaders = 4

// watchProcesses follows the kernel's process events. The kernel reports
// only processes it has sampled: the first sample (read the process now, so
// one that exits before the interval ends keeps its frames), an exec (the old
// image is gone), a sample that found its executable memory changed (read
// its mappings again) and the exit. Events go to processReaders goroutines
// by pid, so each process's events are handled in order.
// It ends when the sampler closes its events.
func (r *profileReceiver) watchProcesses(events <-chan sampler.ProcEvent) {
	var readers sync.WaitGroup
	queues := make([]chan sampler.ProcEvent, processReaders)
	for i := range queues {
		queues[i] = make(chan sampler.ProcEvent, 256)
		readers.Add(1)
		go func() { defer readers.Done(); r.handleProcessEvents(queues[i]) }()
	}
	for ev := range events {
		r.procs.eventQueued(ev)
		queues[ev.PID%processReaders] <- ev
	}
	for _, q := range queues {
		close(q)
	}
	readers.Wait()
}

// handleProcessEvents acts on the events of the pids one reader serves.
// It does not hold its OS thread between events (each read's CPU time is
// measured on a locked thread for the read alone): a goroutine that waits
// while it holds one makes the scheduler hand the thread a processor for
// every event, two thread wake-ups and context switches each, which on a
// node where processes start all the time were a large part of the agent's
// own CPU.
func (r *profileReceiver) handleProcessEvents(events <-chan sampler.ProcEvent) {
	for ev := range events {
		pid := int(ev.PID)
		switch ev.Kind {
		case sampler.EventSeen:
			r.procs.seen(pid, ev.StartTime, viewOf(ev))
			r.procs.holdPerfMap(pid, false, 0)
			r.procs.lookForPerfMapLater(pid)
		case sampler.EventExec:
			// A process read after its exec keeps what was read, trace
			// context markers included.
			if r.procs.execed(pid, viewOf(ev)) {
				r.traceCtx.event(ev)
			}
		case sampler.EventMapsChanged:
			r.procs.mapsChanged(pid)
		case sampler.EventExit:
			if unread, named := r.procs.exited(pid, time.Now(), viewOf(ev)); unread {
				r.metrics.recordGoneBeforeRead(named)
			}
			r.traceCtx.event(ev)
		case sampler.EventPythonCode:
			if py := r.procs.python.Load(); py != nil {
				py.readCode(pid, ev.Code)
			}
		case sampler.EventJavaFrame:
			r.nameJavaFrameNow(pid, ev.StartTime, ev.Code)
		case sampler.EventV8Function:
			r.nameV8FunctionNow(pid, ev.StartTime, ev.Code)
		}
		r.procs.eventHandled(ev)
	}
}

func (r *profileReceiver) emitEveryInterval(ctx context.Context) {
	cpuAt, wallAt := processCPU(), time.Now()
	for {
		next := alignedStart(time.Now(), r.cfg.Interval).Add(r.cfg.Interval)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		r.mu.Lock()
		var pd pprofile.Profiles
		var err error
		var perSample time.Duration
		if r.sampler != nil {
			pd, perSample, err = r.drainMeasuredLocked(ctx, next.Add(-r.cfg.Interval))
		}
		cpu, wall := processCPU(), time.Now()
		r.adjustFrequencyLocked(ctx, perSample, cpu-cpuAt, wall.Sub(wallAt))
		r.mu.Unlock()
		// Hand over outside the lock: a slow exporter must not hold up
		// the control endpoint (kill switch, status) or a capture.
		if err = errors.Join(err, r.consume(ctx, pd)); err != nil {
			r.set.Logger.Error("emit profiles", zap.Error(err))
		}
		cpuAt, wallAt = cpu, wall
	}
}

// drainMeasuredLocked is drainLocked on one OS thread, returning also the CPU
// time the interval's samples cost: draining, symbolizing and building, less
// the one-time work done on the way (processes read, symbol and unwind tables
// loaded), which the overhead guard does not answer with a lower rate.
func (r *profileReceiver) drainMeasuredLocked(ctx context.Context, start time.Time) (pprofile.Profiles, time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, work0 := cputime.Thread(), r.work.chargedOnThread()
	pd, err := r.drainLocked(ctx, start)
	perSample := cputime.Thread() - cpu0 - (r.work.chargedOnThread() - work0)
	return pd, max(perSample, 0), err
}

// adjustFrequencyLocked applies the overhead guard's verdict on the last
// interval: the per-sample cost decides the rate; the whole process's CPU
// use is reported beside it. r.mu must be held.
func (r *profileReceiver) adjustFrequencyLocked(ctx context.Context, perSample, processCPU, wall time.Duration) {
	r.lastCPUPercent = machinePercent(processCPU, wall)
	r.metrics.recordOverhead(ctx, r.lastCPUPercent)
	smoothed, hz := r.guard.next(r.hz, perSample, wall)
	r.metrics.recordSampleCost(ctx, smoothed)
	r.recordWorkLocked(ctx)
	if r.sampler == nil {
		return
	}
	r.metrics.recordFrequency(ctx, r.hz)
	if hz == r.hz {
		return
	}
	if err := r.sampler.SetFrequency(hz); err != nil {
		r.set.Logger.Error("overhead guard: change sampling frequency", zap.Int("to_hz", hz), zap.Error(err))
		return
	}
	level := r.set.Logger.Info
	if hz < r.hz {
		level = r.set.Logger.Warn
	}
	level("overhead guard: sampling frequency changed: the per-sample cost (draining, symbolizing, building profiles) is what the rate answers for",
		zap.Int("from_hz", r.hz), zap.Int("to_hz", hz),
		zap.Float64("per_sample_cpu_percent_of_machine", smoothed),
		zap.Float64("agent_cpu_percent_of_machine", r.lastCPUPercent),
		zap.Float64("max_cpu_percent", r.cfg.MaxCPUPercent))
	r.hz = hz
	r.metrics.recordFrequency(ctx, hz)
}

// recordWorkLocked reports the interval's one-time work and starts the next
// budget interval; deferrals are logged, so a user sees why some frames stay
// addresses.
func (r *profileReceiver) recordWorkLocked(ctx context.Context) {
	counts, cpu := r.work.endInterval()
	r.metrics.recordWork(ctx, counts, cpu)
	var deferred uint64
	for k, n := range counts {
		if k.outcome == workDeferred {
			deferred += n
		}
	}
	if deferred > 0 {
		r.set.Logger.Info("one-time work deferred: the budget for reading new binaries was spent; small processes keep raw addresses (with build IDs) until it frees up",
			zap.Uint64("deferred", deferred), zap.Duration("work_cpu", cpu), zap.Duration("budget", r.work.budget))
	}
	// A stack walked without the tables a binary needs is cut short for
	// good (symbols, unlike unwinding, can be resolved later): a process
	// read while the budget was spent (at the agent's start, in a burst of
	// new processes) and sampled since gets the new interval's budget
	// first, before the processes that start during it, rather than only
	// once it has many samples. A process with few samples is most
	// services on a node.
	r.procs.retryDeferred(r.waitingForTables)
	clear(r.waitingForTables)
	r.waitingForTables = r.waitingForTables[:0]
}

// processCPU is the CPU time this process (the whole collector) has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// alignedStart is the start of the wall-clock-aligned interval holding t.
func alignedStart(t time.Time, interval time.Duration) time.Time {
	return t.Truncate(interval)
}

// consume hands an interval's profiles to the next consumer; an empty
// interval (zero or no resources) is not sent.
func (r *profileReceiver) consume(ctx context.Context, pd pprofile.Profiles) error {
	if pd == (pprofile.Profiles{}) || pd.ResourceProfiles().Len() == 0 {
		return nil
	}
	return r.next.ConsumeProfiles(ctx, pd)
}

// drainLocked drains the kernel's counts for the interval that began at
// start and symbolizes them; the caller hands the result to consume once it
// has released r.mu. r.mu must be held and the sampler open.
func (r *profileReceiver) drainLocked(ctx context.Context, start time.Time) (pprofile.Profiles, error) {
	drainedAt := time.Now()
	batch, err := r.sampler.Drain()
	if err != nil {
		return pprofile.Profiles{}, fmt.Errorf("drain sampler: %w", err)
	}
	symStart := time.Now()
	b := profilebuilder.New(start, r.cfg.Interval, time.Second/time.Duration(r.hz))
	leafBefore, endedBefore := r.leaf, r.endedEarly
	symBefore := r.symbolizer.Stats()
	r.planOneTimeWorkLocked(batch.Samples, drainedAt)
	kept, filtered := r.addSamplesLocked(b, batch.Samples, drainedAt, true)
	symDur := time.Since(symStart)
	if symAfter := r.symbolizer.Stats(); symAfter.Deferred > symBefore.Deferred {
		r.work.deferred(workSymbolTable, symAfter.Deferred-symBefore.Deferred)
	}
	r.symbolizer.Trim()   // file pages back to the page cache until the next interval
	r.symbolizer.Expire() // tables of binaries no process started lately
	if r.unwind != nil {
		r.unwind.Expire(drainedAt) // kernel tables of binaries no live process uses
	}
	r.procs.forgetExitedBefore(drainedAt, r.cfg.Interval)
	r.metrics.record(ctx, batch.Stats, kept, filtered, symDur, r.procs.len(), r.sampler.MapMemoryBytes())
	r.metrics.recordLeaf(ctx, r.leaf.sub(leafBefore))
	r.metrics.recordUnwind(ctx, batch.Stats, r.endedEarly.sub(endedBefore), r.unwind)
	r.metrics.recordSymbolizer(ctx, r.symbolizer.Stats())
	if lost := batch.Stats.LostMapFull; lost > 0 {
		r.set.Logger.Warn("samples lost: the in-kernel stack map was full; raise max_unique_stacks",
			zap.Uint64("lost", lost), zap.Int("max_unique_stacks", r.cfg.MaxUniqueStacks))
	}
	if lost := batch.Stats.LostEvents; lost > 0 {
		r.set.Logger.Warn("process events lost: the receiver fell behind reading them; processes are read when a drain meets them",
			zap.Uint64("lost", lost))
	}
	r.set.Logger.Debug("interval drained",
		zap.Time("start", start),
		zap.Int("unique_stacks", len(batch.Samples)),
		zap.Uint64("samples", kept),
		zap.Duration("symbolize", symDur))
	if b.Len() == 0 {
		return pprofile.Profiles{}, nil
	}
	return b.Profiles(), nil
}

// planOneTimeWorkLocked decides, before symbolizing an interval, which
// processes may have one-time work done for them: all of them while the
// budget lasts; once it is spent, only heavy ones (at least heavySamples
// samples, or a hundredth of the interval's), whose deferred unwind tables
// are attached now. The others' frames in binaries not read yet keep their
// addresses, and those still waiting for their unwind tables are noted for
// the next budget interval (recordWorkLocked). r.mu must be held.
func (r *profileReceiver) planOneTimeWorkLocked(samples []sampler.Sample, drainedAt time.Time) {
	perPID := map[uint32]uint64{}
	var total uint64
	for i := range samples {
		perPID[samples[i].PID] += samples[i].Count
		total += samples[i].Count
	}
	heavy := max(heavySamples, total/100)
	over := r.work.overBudget()
	for pid, n := range perPID {
		e := r.procs.lookup(int(pid))
		r.procs.markSampled(e, drainedAt)
		e, reread := r.procs.checkContext(e, drainedAt)
		if reread {
			// Its SDK published a service the filters keep: read it now,
			// so that this interval's samples are symbolized.
			if e = r.procs.refresh(int(pid), drainedAt); e == nil {
				continue
			}
		}
		if e.snapshot == nil {
			continue
		}
		e.snapshot.DeferLoads.Store(over && n < heavy)
		if !r.procs.isUnwindDeferred(e) {
			continue
		}
		if n >= heavy {
			r.procs.attachUnwind(e, true)
		} else {
			r.waitingForTables = append(r.waitingForTables, e)
		}
	}
}

// addSamplesLocked symbolizes samples into b, dropping processes the
// include/exclude filters reject when filter is set. It returns the sample
// counts kept and filtered out. r.mu must be held.
func (r *profileReceiver) addSamplesLocked(b *profilebuilder.Builder, samples []sampler.Sample, readBefore time.Time, filter bool) (kept, filtered uint64) {
	for i := range samples {
		s := &samples[i]
		proc := r.procs.lookup(int(s.PID))
		lefts, nLeft := r.procs.leftImagesOf(int(s.PID))
		if filter && !proc.keep && nLeft == 0 {
			filtered += s.Count
			continue
		}
		py := takePythonFrames(s)
		frames := r.symbolizeSample(proc, s)
		resource, fromLeft := proc.resource, false
		if nLeft > 0 && len(s.UserStack) > 0 && hasUnmappedUserFrame(frames) {
			// Taken before the process exec'd, if its user frames lie in
			// the image it left: the new image's are elsewhere (its own
			// layout) or not mapped yet.
			for _, l := range lefts[:nLeft] {
				if lf := r.symbolizeSample(l.entry, s); !hasUnmappedUserFrame(lf) {
					proc, frames, resource, fromLeft = l.entry, lf, l.resource, true
					break
				}
			}
			if !fromLeft {
				frames = r.symbolizeSample(proc, s)
			}
		}
		if filter && !proc.keep {
			filtered += s.Count
			continue
		}
		kept += s.Count
		if proc.snapshot != nil && !fromLeft && hasUnmappedUserFrame(frames) {
			// nil: the entry went meanwhile (exec, exit) and no new read
			// could replace it; keep symbolizing with what we have.
			if fresh := r.procs.refresh(int(s.PID), readBefore); fresh != nil && fresh != proc {
				proc, resource = fresh, fresh.resource
				frames = r.symbolizeSample(proc, s)
			}
		}
		frames = r.nameJITFrames(proc, frames, readBefore)
		frames = r.addPythonFrames(proc, frames, py, readBefore)
		if proc.snapshot != nil && len(s.UserStack) > 0 && r.cfg.Unwinding == UnwindingAuto {
			if s.UserUnwind.LeafFromTable {
				r.leaf.Table += s.Count
			} else {
				r.leaf.add(r.lastLeaf, s.Count)
			}
		}
		if end := s.UserUnwind.End; end != sampler.StackComplete && len(s.UserStack) > 0 {
			r.endedEarly.add(end, s.Count)
			r.procs.countEndedEarly(proc, end, s.Count)
		}
		b.Add(resource, frames, s.TraceID, s.SpanID, s.Count)
	}
	return kept, filtered
}

// symbolizeSample returns the sample's frames, leaf first: kernel frames (the
// CPU was in the kernel on behalf of the process) above the user frames.
func (r *profileReceiver) symbolizeSample(proc *processEntry, s *sampler.Sample) []profilebuilder.Frame {
	r.frames = r.frames[:0]
	if len(s.KernelStack) > 0 {
		r.symbuf = r.symbolizer.Kernel(s.KernelStack, r.symbuf[:0])
		for _, f := range r.symbuf {
			r.frames = append(r.frames, profilebuilder.Frame{
				Address: f.Address, Function: f.Function, File: f.File, Line: int64(f.Line),
				Kind: profilebuilder.Kernel, Mapping: kernelMapping,
			})
		}
	}
	if len(s.UserStack) > 0 {
		if proc.snapshot == nil {
			for _, addr := range s.UserStack {
				r.frames = append(r.frames, profilebuilder.Frame{Address: addr})
			}
		} else {
			stack := s.UserStack
			// A leaf unwound with its table row already has its caller.
			if r.cfg.Unwinding == UnwindingAuto && !s.UserUnwind.LeafFromTable {
				stack, r.lastLeaf = r.symbolizer.RecoverLeafCaller(proc.snapshot, stack, s.UserLeafRet, r.stackbuf)
				if r.lastLeaf == symbolize.LeafRecovered {
					r.stackbuf = stack[:0]
				}
			}
			r.symbuf = r.symbolizer.User(proc.snapshot, stack, r.symbuf[:0])
			for _, f := range r.symbuf {
				fr := profilebuilder.Frame{Address: f.Address, Function: f.Function, File: f.File, Line: int64(f.Line)}
				if f.IsGo {
					fr.Kind = profilebuilder.Go
				}
				if f.Mapping >= 0 && f.Mapping < len(proc.mappings) {
					fr.Mapping = &proc.mappings[f.Mapping]
				}
				r.frames = append(r.frames, fr)
			}
		}
	}
	return r.frames
}

var kernelMapping = &profilebuilder.Mapping{File: profileschema.KernelMappingFile}

const (
	// heavySamples: a process with this many samples in an interval (one
	// CPU-second at 19 Hz) always gets its binaries read.
	heavySamples = 19
	// mapsSettleDelay is how long after a process's executable memory
	// changed it is read again: the dynamic loader maps several libraries in
	// a row, and one read serves the burst.
	mapsSettleDelay = 20 * time.Millisecond
	// mapsRereadEvery bounds how often a process whose code keeps changing
	// (a JIT) is read again.
	mapsRereadEvery = time.Second
	// idleIntervals drains (and intervals) without samples make a
	// process's entry go; the kernel announces it again when it next runs.
	idleIntervals = 4
)

// hasUnmappedUserFrame says whether a user frame lies in no mapping the
// process's snapshot knows, so that the maps are read again. An interpreted
// Java frame (bit 63 set) and a JavaScript function (bit 62) are in no
// mapping by design: they ask no re-read.
func hasUnmappedUserFrame(frames []profilebuilder.Frame) bool {
	for i := range frames {
		if frames[i].Kind != profilebuilder.Kernel && frames[i].Mapping == nil {
			_, _, java := sampler.JavaInterpreted(frames[i].Address)
			if _, js := sampler.V8Function(frames[i].Address); !java && !js {
				return true
			}
		}
	}
	return false
}
