package ebpfprofilereceiver

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf/btf"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
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
	events   chan procChange
	// tracked, when set, names the pids the receiver follows through the
	// kernel's events; the periodic rescan leaves them out.
	tracked func(pid int) bool
}

// procChange is a process event, or (files != nil) the files a process read
// by the receiver maps.
type procChange struct {
	ev    sampler.ProcEvent
	files []tracectx.File
}

// openTraceContext returns nil when disabled or when the maps cannot be set
// up; the latter is logged and sampling goes on without trace IDs.
// kernelTypes is the kernel's BTF, shared with the sampler's load.
func openTraceContext(cfg TraceContextConfig, log *zap.Logger, kernelTypes *btf.Cache) *traceContext {
	if !cfg.Enabled {
		return nil
	}
	maps, err := tracectx.OpenMaps(cfg.BPFFS)
	if err != nil {
		log.Warn("trace context is off: samples will carry no trace IDs", zap.Error(err))
		return nil
	}
	probes, err := tracectx.NewProbes(maps, kernelTypes)
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
		events:   make(chan procChange, 1024),
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
	t.send(procChange{ev: ev})
}

// processRead passes on the files of a process the receiver has just read,
// so markers are looked up per binary without reading its mappings again.
func (t *traceContext) processRead(pid int, snap *symbolize.Process) {
	if t == nil {
		return
	}
	files := make([]tracectx.File, 0, 8)
	for i := range snap.Mappings {
		m := &snap.Mappings[i]
		if m.Deleted || m.ID == (fileid.ID{}) || !strings.HasPrefix(m.Path, "/") {
			continue // anonymous, unreadable, or replaced on disk: nothing to attach to
		}
		if len(files) > 0 && files[len(files)-1].ID == m.ID {
			continue // the next segment of the same file
		}
		files = append(files, tracectx.File{Path: filepath.Join("/proc", strconv.Itoa(pid), "root", m.Path), ID: m.ID})
	}
	t.send(procChange{ev: sampler.ProcEvent{Kind: sampler.EventSeen, PID: uint32(pid)}, files: files})
}

func (t *traceContext) send(c procChange) {
	if t == nil {
		return
	}
	select {
	case t.events <- c:
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
		case c := <-t.events:
			ev := c.ev
			var err error
			switch {
			case c.files != nil:
				err = t.probes.ObserveFiles(int(ev.PID), c.files)
			case ev.Kind == sampler.EventExec, ev.Kind == sampler.EventExit:
				// The image is gone: its binaries lose this process; the
				// new image is observed when the receiver reads it.
				err = t.probes.Exit(int(ev.PID))
			}
			if err != nil {
				t.log.Debug("trace context markers", zap.Uint32("pid", ev.PID), zap.Error(err))
			}
		}
	}
}

func (t *traceContext) rescan() {
	if err := t.probes.Rescan(t.tracked); err != nil {
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
