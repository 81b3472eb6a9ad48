package ebpfprofilereceiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

type profileReceiver struct {
	cfg      *Config
	set      receiver.Settings
	next     xconsumer.Profiles
	hostName string
	period   time.Duration

	sampler    *sampler.Sampler
	symbolizer *symbolize.Symbolizer
	procs      *processTable
	metrics    *selfMetrics
	traceCtx   *traceContext // nil: trace context off

	cancel context.CancelFunc
	wg     sync.WaitGroup
	frames []profilebuilder.Frame
	symbuf []symbolize.Frame
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
	m, err := newSelfMetrics(set.TelemetrySettings.MeterProvider)
	if err != nil {
		return nil, err
	}
	return &profileReceiver{
		cfg:      cfg,
		set:      set,
		next:     next,
		hostName: host,
		period:   time.Second / time.Duration(cfg.FrequencyHz),
		metrics:  m,
	}, nil
}

// Start refuses to start, with one sentence saying what to do, when this
// process cannot load BPF programs or open perf events.
func (r *profileReceiver) Start(_ context.Context, _ component.Host) error {
	if err := sampler.CheckPrivileges(); err != nil {
		return fmt.Errorf("ebpfprofile receiver cannot sample: %w", err)
	}
	r.traceCtx = openTraceContext(r.cfg.TraceContext, r.set.Logger)
	s, err := sampler.Open(sampler.Config{
		FrequencyHz:     r.cfg.FrequencyHz,
		MaxUniqueStacks: r.cfg.MaxUniqueStacks,
		Interval:        r.cfg.Interval,
		TraceContext:    r.traceCtx.samplerMaps(),
	})
	if err != nil {
		_ = r.traceCtx.close()
		return fmt.Errorf("ebpfprofile receiver cannot sample: %w", err)
	}
	r.sampler = s
	r.symbolizer = symbolize.New(symbolize.Options{})
	r.procs = newProcessTable(r.cfg, r.hostName, r.set.Logger, r.symbolizer)
	if err := s.LifecycleErr(); err != nil {
		r.set.Logger.Warn("process exec/exit events are off; short-lived processes may lose their symbols", zap.Error(err))
	}
	r.set.Logger.Info("sampling every CPU",
		zap.Int("frequency_hz", r.cfg.FrequencyHz),
		zap.Duration("interval", r.cfg.Interval),
		zap.Uint64("bpf_map_bytes", s.MapMemoryBytes()))

	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(3)
	go func() { defer r.wg.Done(); r.watchProcesses(ctx) }()
	go func() { defer r.wg.Done(); r.traceCtx.run(ctx) }()
	go func() { defer r.wg.Done(); r.emitEveryInterval(ctx) }()
	return nil
}

// Shutdown emits what was sampled since the last interval, so a restart loses
// nothing, then detaches every BPF program.
func (r *profileReceiver) Shutdown(ctx context.Context) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.wg.Wait()
	start := alignedStart(time.Now(), r.cfg.Interval)
	err := r.emit(ctx, start)
	err = errors.Join(err, r.sampler.Close(), r.traceCtx.close())
	r.procs.closeAll()
	return err
}

// watchProcesses snapshots a process's mappings as soon as the kernel reports
// it sampled or exec'd, so a process that exits before the interval ends keeps
// its frames.
func (r *profileReceiver) watchProcesses(ctx context.Context) {
	events := r.sampler.Events()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			r.traceCtx.event(ev)
			switch ev.Kind {
			case sampler.EventSeen:
				r.procs.observe(int(ev.PID), false)
			case sampler.EventExec:
				// Read the new program at once (it may exit soon), and again
				// once the dynamic loader has mapped its libraries.
				pid := int(ev.PID)
				r.procs.observe(pid, true)
				time.AfterFunc(execSettleDelay, func() { r.procs.refresh(pid, time.Now()) })
			case sampler.EventExit:
				r.procs.exited(int(ev.PID), time.Now())
			}
		}
	}
}

func (r *profileReceiver) emitEveryInterval(ctx context.Context) {
	for {
		next := alignedStart(time.Now(), r.cfg.Interval).Add(r.cfg.Interval)
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if err := r.emit(ctx, next.Add(-r.cfg.Interval)); err != nil {
			r.set.Logger.Error("emit profiles", zap.Error(err))
		}
	}
}

// alignedStart is the start of the wall-clock-aligned interval holding t.
func alignedStart(t time.Time, interval time.Duration) time.Time {
	return t.Truncate(interval)
}

// emit drains the kernel's counts for the interval that began at start,
// symbolizes them and hands them to the next consumer.
func (r *profileReceiver) emit(ctx context.Context, start time.Time) error {
	drainedAt := time.Now()
	batch, err := r.sampler.Drain()
	if err != nil {
		return fmt.Errorf("drain sampler: %w", err)
	}
	symStart := time.Now()
	b := profilebuilder.New(start, r.cfg.Interval, r.period)
	var kept, filtered uint64
	for i := range batch.Samples {
		s := &batch.Samples[i]
		proc := r.procs.lookup(int(s.PID))
		if !proc.keep {
			filtered += s.Count
			continue
		}
		kept += s.Count
		frames := r.symbolizeSample(proc, s)
		if proc.snapshot != nil && hasUnmappedUserFrame(frames) {
			if fresh := r.procs.refresh(int(s.PID), drainedAt); fresh != proc {
				proc = fresh
				frames = r.symbolizeSample(proc, s)
			}
		}
		b.Add(proc.resource, frames, s.TraceID, s.SpanID, s.Count)
	}
	symDur := time.Since(symStart)
	r.symbolizer.Trim() // file pages back to the page cache until the next interval
	r.procs.forgetExitedBefore(drainedAt)
	r.metrics.record(ctx, batch.Stats, kept, filtered, symDur, r.procs.len(), r.sampler.MapMemoryBytes())
	if lost := batch.Stats.LostMapFull; lost > 0 {
		r.set.Logger.Warn("samples lost: the in-kernel stack map was full; raise max_unique_stacks",
			zap.Uint64("lost", lost), zap.Int("max_unique_stacks", r.cfg.MaxUniqueStacks))
	}
	r.set.Logger.Debug("interval drained",
		zap.Time("start", start),
		zap.Int("unique_stacks", len(batch.Samples)),
		zap.Uint64("samples", kept),
		zap.Duration("symbolize", symDur))
	if b.Len() == 0 {
		return nil
	}
	return r.next.ConsumeProfiles(ctx, b.Profiles())
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
			r.symbuf = r.symbolizer.User(proc.snapshot, s.UserStack, r.symbuf[:0])
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

var kernelMapping = &profilebuilder.Mapping{File: "[kernel.kallsyms]"}

// execSettleDelay is how long after exec a process is read again: by then the
// dynamic loader has mapped its shared libraries.
const execSettleDelay = 50 * time.Millisecond

func hasUnmappedUserFrame(frames []profilebuilder.Frame) bool {
	for i := range frames {
		if frames[i].Kind != profilebuilder.Kernel && frames[i].Mapping == nil {
			return true
		}
	}
	return false
}
