package ebpfprofilereceiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// controlServer serves the control endpoint (controlapi), by default on
// loopback.
type controlServer struct {
	*localendpoint.Server
}

func startControlServer(ctx context.Context, r *profileReceiver, host component.Host) (*controlServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+controlapi.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, r.status())
	})
	mux.HandleFunc("GET "+controlapi.PathTargets, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, r.procs.targets())
	})
	mux.HandleFunc("POST "+controlapi.PathSampling, func(w http.ResponseWriter, req *http.Request) {
		var in controlapi.SamplingRequest
		if !readJSON(w, req, &in) {
			return
		}
		if err := r.setSampling(req.Context(), in.Enabled); err != nil {
			localendpoint.WriteError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, r.status())
	})
	mux.HandleFunc("POST "+controlapi.PathCapture, func(w http.ResponseWriter, req *http.Request) {
		var in controlapi.CaptureRequest
		if !readJSON(w, req, &in) {
			return
		}
		res, err := r.capture(req.Context(), in)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, sampler.ErrCaptureBusy) {
				status = http.StatusConflict
			}
			localendpoint.WriteError(w, status, err)
			return
		}
		writeJSON(w, res)
	})
	srv, err := r.cfg.Control.Serve(ctx, host, r.set.TelemetrySettings, mux)
	if err != nil {
		return nil, err
	}
	r.set.Logger.Info("control endpoint listening", zap.String("endpoint", srv.Addr()))
	return &controlServer{srv}, nil
}

// shutdown stops the endpoint; running captures end with their request
// context.
func (c *controlServer) shutdown(ctx context.Context) error {
	return c.Shutdown(ctx)
}

func readJSON(w http.ResponseWriter, req *http.Request, v any) bool {
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(v); err != nil {
		localendpoint.WriteError(w, http.StatusBadRequest, fmt.Errorf("decode request: %w", err))
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (r *profileReceiver) status() controlapi.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := controlapi.Status{
		Enabled:       r.sampler != nil,
		ConfiguredHz:  r.cfg.FrequencyHz,
		MaxCPUPercent: r.cfg.MaxCPUPercent,
		CPUPercent:    r.lastCPUPercent,
		Processes:     r.procs.len(),
		Capturing:     r.capturing,
	}
	if st.Enabled {
		st.FrequencyHz = r.hz
	}
	return st
}

// capture samples the requested processes at a high rate for a while, next
// to continuous sampling (whose rate and data are unaffected), and returns
// their folded stacks.
func (r *profileReceiver) capture(ctx context.Context, req controlapi.CaptureRequest) (controlapi.CaptureResult, error) {
	var res controlapi.CaptureResult
	d, err := time.ParseDuration(req.Duration)
	if err != nil {
		return res, fmt.Errorf("duration %q: %w", req.Duration, err)
	}
	if d <= 0 || d > sampler.MaxCaptureDuration {
		return res, fmt.Errorf("duration must be between 0 and %s (got %s)", sampler.MaxCaptureDuration, d)
	}
	if req.FrequencyHz < 1 || req.FrequencyHz > sampler.MaxCaptureFrequencyHz {
		return res, fmt.Errorf("frequency_hz must be between 1 and %d (got %d)", sampler.MaxCaptureFrequencyHz, req.FrequencyHz)
	}
	targets, err := r.procs.resolveTargets(req.PID, req.Service)
	if err != nil {
		return res, err
	}
	pids := make([]uint32, len(targets))
	for i, t := range targets {
		pids[i] = uint32(t.PID)
	}
	// A capture is asked for by name: its processes get their symbols and
	// tables whatever the one-time work budget says, before sampling starts.
	for _, pid := range pids {
		if e := r.procs.lookup(int(pid)); e.snapshot != nil {
			e.snapshot.DeferLoads.Store(false)
			if r.procs.isUnwindDeferred(e) {
				r.procs.attachUnwind(e, true)
			}
		}
	}

	r.mu.Lock()
	s := r.sampler
	r.capturing = s != nil
	r.mu.Unlock()
	if s == nil {
		return res, errors.New("sampling is off on this agent; turn it on first (POST /v1/sampling)")
	}
	defer func() { r.mu.Lock(); r.capturing = false; r.mu.Unlock() }()
	r.set.Logger.Info("capture started", zap.Int("frequency_hz", req.FrequencyHz), zap.Duration("duration", d), zap.Any("pids", pids))
	started := time.Now()
	batch, err := s.Capture(ctx, pids, req.FrequencyHz, d)
	if err != nil {
		return res, err
	}

	r.mu.Lock()
	// Again here: a drain during the capture may have deferred their loads.
	for _, pid := range pids {
		if e := r.procs.lookup(int(pid)); e.snapshot != nil {
			e.snapshot.DeferLoads.Store(false)
		}
	}
	b := profilebuilder.New(started, time.Since(started), time.Second/time.Duration(req.FrequencyHz))
	r.addSamplesLocked(b, batch.Samples, time.Now(), false)
	r.symbolizer.Trim()
	r.mu.Unlock()

	res = controlapi.CaptureResult{
		Targets:     targets,
		FrequencyHz: req.FrequencyHz,
		Duration:    time.Since(started).Round(time.Millisecond).String(),
		Lost:        batch.Stats.LostMapFull + batch.Stats.UserStackLost + batch.Stats.KernelStackLost,
		Folded:      foldedLines(b.Profiles()),
	}
	for _, l := range res.Folded {
		res.Samples += l.Count
	}
	r.set.Logger.Info("capture done", zap.Int64("samples", res.Samples), zap.Uint64("lost", res.Lost))
	return res, nil
}

// foldedLines sums a profile's samples by folded stack, heaviest first.
func foldedLines(pd pprofile.Profiles) []controlapi.FoldedLine {
	counts := map[string]int64{}
	dict := pd.Dictionary()
	profileschema.ForEachSample(pd, func(_ pcommon.Resource, _ pprofile.Profile, s pprofile.Sample) {
		counts[profileschema.FoldedStack(dict, s)] += profileschema.SampleCount(s)
	})
	lines := make([]controlapi.FoldedLine, 0, len(counts))
	for stack, n := range counts {
		lines = append(lines, controlapi.FoldedLine{Stack: stack, Count: n})
	}
	sort.Slice(lines, func(i, j int) bool {
		if lines[i].Count != lines[j].Count {
			return lines[i].Count > lines[j].Count
		}
		return lines[i].Stack < lines[j].Stack
	})
	return lines
}

// unknownTargetError names the targets that do exist.
func unknownTargetError(what string, known []controlapi.Target) error {
	services := map[string]bool{}
	for _, t := range known {
		services[t.Service] = true
	}
	names := make([]string, 0, len(services))
	for s := range services {
		names = append(names, s)
	}
	sort.Strings(names)
	if len(names) == 0 {
		return fmt.Errorf("%s: the agent has seen no process yet", what)
	}
	return fmt.Errorf("%s; services the agent knows: %s (hotpath capture --list shows pids)", what, strings.Join(names, ", "))
}
