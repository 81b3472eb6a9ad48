package ebpfprofilereceiver

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/tracectx"
)

// traceContext wires trace-driven profiling into the receiver: it opens the
// trace context maps for the sampler and keeps the SDK marker uprobes
// attached as processes come and go. A nil *traceContext is "disabled" and
// every method is a no-op, so the receiver calls them unconditionally.
type traceContext struct {
	log      *zap.Logger
	interval time.Duration
	maps     *tracectx.Maps
	probes   *tracectx.Probes
	events   chan sampler.ProcEvent
}

// openTraceContext returns nil when disabled or when the maps cannot be set
// up; the latter is logged and sampling goes on without trace IDs.
func openTraceContext(cfg TraceContextConfig, log *zap.Logger) *traceContext {
	if !cfg.Enabled {
		return nil
	}
	maps, err := tracectx.OpenMaps(cfg.BPFFS)
	if err != nil {
		log.Warn("trace context is off: samples will carry no trace IDs", zap.Error(err))
		return nil
	}
	probes, err := tracectx.NewProbes(maps)
	if err != nil {
		maps.Close()
		log.Warn("trace context is off: samples will carry no trace IDs", zap.Error(err))
		return nil
	}
	log.Info("trace context on", zap.String("map", maps.PinPath), zap.Bool("created", maps.Created))
	return &traceContext{
		log:      log,
		interval: cfg.RescanInterval,
		maps:     maps,
		probes:   probes,
		events:   make(chan sampler.ProcEvent, 1024),
	}
}

// samplerMaps is what the sampler reads at sample time (nil: no lookup).
func (t *traceContext) samplerMaps() *sampler.TraceMaps {
	if t == nil {
		return nil
	}
	return &sampler.TraceMaps{Threads: t.maps.Threads, Goroutines: t.maps.Goroutines}
}

// event passes a lifecycle event on without blocking the caller: reading a
// process's binaries can take milliseconds. When the queue is full the event
// is dropped; the next rescan catches up.
func (t *traceContext) event(ev sampler.ProcEvent) {
	if t == nil {
		return
	}
	select {
	case t.events <- ev:
	default:
	}
}

// run attaches to every process now, then follows events and rescans
// every interval until ctx ends.
func (t *traceContext) run(ctx context.Context) {
	if t == nil {
		return
	}
	t.rescan()
	tick := time.NewTicker(t.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.rescan()
		case ev := <-t.events:
			var err error
			switch ev.Kind {
			case sampler.EventSeen, sampler.EventExec:
				err = t.probes.Observe(int(ev.PID))
			case sampler.EventExit:
				err = t.probes.Exit(int(ev.PID))
			}
			if err != nil {
				t.log.Debug("trace context markers", zap.Uint32("pid", ev.PID), zap.Error(err))
			}
		}
	}
}

func (t *traceContext) rescan() {
	if err := t.probes.Rescan(); err != nil {
		t.log.Debug("trace context rescan", zap.Error(err))
	}
}

// close detaches the uprobes; the pinned map stays for other tools.
func (t *traceContext) close() error {
	if t == nil {
		return nil
	}
	return errors.Join(t.probes.Close(), t.maps.Close())
}
