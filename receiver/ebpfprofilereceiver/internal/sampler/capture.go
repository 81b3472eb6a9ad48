//go:build linux

package sampler

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/internal/cpulist"
)

// Limits of an on-demand capture (RFD 070/072): high rates are for short,
// targeted bursts only.
const (
	MaxCaptureFrequencyHz = 1000
	MaxCaptureDuration    = 300 * time.Second
	maxCaptureKeys        = 32768
	maxCaptureStacks      = 8192
)

// ErrCaptureBusy is returned while another capture runs.
var ErrCaptureBusy = errors.New("another capture is running; one at a time")

// captureObjects are loaded for one capture, sized for it, and closed after:
// an agent that never captures pays nothing for them.
type captureObjects struct {
	CaptureSample *ebpf.Program `ebpf:"capture_sample"`
	CapturePids   *ebpf.Map     `ebpf:"capture_pids"`
	CaptureCounts *ebpf.Map     `ebpf:"capture_counts"`
	CaptureStacks *ebpf.Map     `ebpf:"capture_stacks"`
	CaptureStats  *ebpf.Map     `ebpf:"capture_stats"`
}

func (o *captureObjects) close() {
	for _, c := range []interface{ Close() error }{o.CaptureSample, o.CapturePids, o.CaptureCounts, o.CaptureStacks, o.CaptureStats} {
		if c != nil {
			_ = c.Close()
		}
	}
}

// captureWindow, set by a test, is called as a capture's perf events start
// sampling (true) and once no sample can come any more (false). A capture's
// window starts after its programs load, which on a loaded machine may take
// a good part of its duration, so only the window tells how much of a
// target's CPU time it saw.
var captureWindow func(open bool)

// Capture samples the processes pids at hz for d (or until ctx ends) with
// perf events of its own, next to continuous sampling, which keeps its rate.
// It returns what it saw of those processes; Stats count only them.
func (s *Sampler) Capture(ctx context.Context, pids []uint32, hz int, d time.Duration) (Batch, error) {
	switch {
	case len(pids) == 0:
		return Batch{}, errors.New("capture: no process to capture")
	case hz < 1 || hz > MaxCaptureFrequencyHz:
		return Batch{}, fmt.Errorf("capture: frequency must be between 1 and %d Hz (got %d)", MaxCaptureFrequencyHz, hz)
	case d <= 0 || d > MaxCaptureDuration:
		return Batch{}, fmt.Errorf("capture: duration must be between 0 and %s (got %s)", MaxCaptureDuration, d)
	}
	if err := checkFrequency(hz); err != nil {
		return Batch{}, fmt.Errorf("capture: %w", err)
	}
	if !s.capture.TryLock() {
		return Batch{}, ErrCaptureBusy
	}
	defer s.capture.Unlock()

	co, err := s.loadCapture(len(pids), hz, d)
	if err != nil {
		return Batch{}, err
	}
	defer co.close()
	for _, pid := range pids {
		if err := co.CapturePids.Put(pid, uint8(1)); err != nil {
			return Batch{}, fmt.Errorf("capture: target pid %d: %w", pid, err)
		}
	}
	evs, err := attachPerfEvents(co.CaptureSample, hz)
	if err != nil {
		return Batch{}, fmt.Errorf("capture: %w", err)
	}
	if captureWindow != nil {
		captureWindow(true)
	}
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	closeErr := evs.close()
	waitForRunningPrograms()
	if captureWindow != nil {
		captureWindow(false)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	st, err := s.readStats(co.CaptureStats, 0)
	if err != nil {
		return Batch{}, fmt.Errorf("capture: %w", err)
	}
	b, err := s.readMaps(st, co.CaptureCounts, co.CaptureStacks)
	if err != nil {
		return Batch{}, fmt.Errorf("capture: %w", err)
	}
	return b, closeErr
}

// loadCapture loads the capture program with maps sized for the expected
// samples: every online CPU at hz for d, capped.
func (s *Sampler) loadCapture(targets, hz int, d time.Duration) (*captureObjects, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errors.New("capture: sampler is closed")
	}
	cpus, err := cpulist.Online()
	if err != nil {
		return nil, err
	}
	samples := float64(len(cpus)) * float64(hz) * d.Seconds() * 1.25
	keys := uint32(math.Min(samples+keySlack, maxCaptureKeys))
	spec := s.spec.Copy()
	spec.Maps[cpuProfileMapCapturePids].MaxEntries = uint32(targets)
	spec.Maps[cpuProfileMapCaptureCounts].MaxEntries = keys
	spec.Maps[cpuProfileMapCaptureStacks].MaxEntries = min(2*keys, maxCaptureStacks)
	var co captureObjects
	if err := spec.LoadAndAssign(&co, &ebpf.CollectionOptions{MapReplacements: s.shared}); err != nil {
		return nil, fmt.Errorf("capture: load BPF capture program: %w", explainLoadError(err))
	}
	return &co, nil
}
