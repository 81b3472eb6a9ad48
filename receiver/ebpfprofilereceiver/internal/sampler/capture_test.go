//go:build linux && privileged

package sampler

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A capture samples only its target, at its own rate, while continuous
// sampling goes on at its rate: the two sets of counts match their
// frequencies against the same CPU time.
func TestCaptureTargetsOneProcessAtItsOwnRate(t *testing.T) {
	const hz, captureHz = 19, 499
	s := openSampler(t, Config{FrequencyHz: hz, Interval: 5 * time.Second})
	drain(t, s)
	// The burners outlast the capture, whose window starts only once its
	// programs load: the target's CPU time in the window is read as it
	// opens and closes.
	target := startBurner(t, time.Minute, 1)
	other := startBurner(t, time.Minute, 1)
	var windowCPU [2]time.Duration
	captureWindow = func(open bool) {
		cpu := threadCPU(t, target.Process.Pid)
		if open {
			windowCPU[0] = cpu
		} else {
			windowCPU[1] = cpu
		}
	}
	b, err := s.Capture(context.Background(), []uint32{uint32(target.Process.Pid)}, captureHz, 1200*time.Millisecond)
	captureWindow = nil
	if err != nil {
		t.Fatal(err)
	}
	cpuTarget := stopBurner(t, target)
	stopBurner(t, other)
	continuous := drain(t, s)

	if n := pidCount(b, other.Process.Pid); n != 0 {
		t.Errorf("capture recorded %d samples of a process it did not target", n)
	}
	for _, smp := range b.Samples {
		if smp.PID != uint32(target.Process.Pid) {
			t.Fatalf("capture recorded pid %d", smp.PID)
		}
	}
	expectSamples(t, "capture", pidCount(b, target.Process.Pid), captureHz, windowCPU[1]-windowCPU[0])
	if withStack := b.Stats.Samples - b.Stats.UserStackMissing; withStack*10 < b.Stats.Samples*9 {
		t.Errorf("capture stacks: %+v", b.Stats)
	}
	// Continuous sampling kept its rate for the same process.
	expectSamples(t, "continuous", pidCount(continuous, target.Process.Pid), hz, cpuTarget)

	// Limits and exclusivity.
	if _, err := s.Capture(context.Background(), []uint32{1}, MaxCaptureFrequencyHz+1, time.Second); err == nil {
		t.Error("capture above the frequency cap was accepted")
	}
	if _, err := s.Capture(context.Background(), []uint32{1}, 99, MaxCaptureDuration+time.Second); err == nil {
		t.Error("capture above the duration cap was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		for {
			// Busy only while the wait below probes the lock.
			if _, err := s.Capture(ctx, []uint32{1}, 99, time.Minute); !errors.Is(err, ErrCaptureBusy) {
				done <- err
				return
			}
		}
	}()
	// Wait until the first capture holds the lock (a probe that gets it
	// gives it back at once).
	for deadline := time.Now().Add(30 * time.Second); s.capture.TryLock(); time.Sleep(5 * time.Millisecond) {
		s.capture.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("the first capture did not start in 30 s")
		}
	}
	if _, err := s.Capture(context.Background(), []uint32{1}, 99, time.Second); !errors.Is(err, ErrCaptureBusy) {
		t.Errorf("second concurrent capture: %v, want ErrCaptureBusy", err)
	}
	cancel() // a cancelled capture ends at once and returns what it has
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("cancelled capture: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancelled capture did not return")
	}
}
