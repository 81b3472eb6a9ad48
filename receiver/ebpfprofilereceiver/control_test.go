//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
)

// On-demand capture through the control endpoint: one process at 499 Hz
// while continuous sampling stays at its rate; the result has the workload's
// known profile.
func TestControlCapture(t *testing.T) {
	cBin := testworkload.BuildC(t)
	cfg := testConfig()
	cfg.FrequencyHz = 19
	cfg.Control.HTTP.NetAddr.Endpoint = testport.Addr(t)
	r, _ := startReceiver(t, cfg)
	defer r.Shutdown(context.Background())
	client := controlapi.Client{Endpoint: cfg.Control.HTTP.NetAddr.Endpoint}
	ctx := context.Background()

	st, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Enabled || st.FrequencyHz != 19 || st.ConfiguredHz != 19 {
		t.Errorf("status = %+v", st)
	}

	w := testworkload.Start(t, cBin, "2", "OTEL_SERVICE_NAME=capture-me")
	res, err := client.Capture(ctx, controlapi.CaptureRequest{PID: w.Process.Pid, Duration: "1500ms", FrequencyHz: 499})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Wait()
	if len(res.Targets) != 1 || res.Targets[0].PID != w.Process.Pid || res.Targets[0].Service != "capture-me" {
		t.Errorf("targets = %+v", res.Targets)
	}
	var tally testworkload.Tally
	for _, l := range res.Folded {
		tally.Add(l.Stack, l.Count)
	}
	// The capture covered 1.5 s of the workload's 2 s: expect at least 40 %
	// of 499 Hz × that share of the CPU time it got.
	want := 0.4 * testworkload.ExpectedSamples(w, 499) * 1.5 / 2
	if err := tally.CheckShares("hot_a", "hot_b", "dispatch", int64(want), 0.8); err != nil {
		t.Error(err)
	}

	// Unknown targets are refused, naming what exists.
	_, err = client.Capture(ctx, controlapi.CaptureRequest{Service: "no-such-service", Duration: "1s", FrequencyHz: 99})
	if err == nil || !strings.Contains(err.Error(), "no running process of service") || !strings.Contains(err.Error(), "services the agent knows") {
		t.Errorf("unknown service: %v", err)
	}
	for _, bad := range []controlapi.CaptureRequest{
		{PID: w.Process.Pid, Duration: "301s", FrequencyHz: 99},
		{PID: w.Process.Pid, Duration: "1s", FrequencyHz: 1001},
		{PID: 1 << 30, Duration: "1s", FrequencyHz: 99},
	} {
		if _, err := client.Capture(ctx, bad); err == nil {
			t.Errorf("capture %+v accepted", bad)
		}
	}
}

// The runtime kill switch detaches sampling at once (no samples while off)
// and turns it back on.
func TestControlKillSwitch(t *testing.T) {
	cBin := testworkload.BuildC(t)
	cfg := testConfig()
	cfg.Control.HTTP.NetAddr.Endpoint = testport.Addr(t)
	r, sink := startReceiver(t, cfg)
	defer r.Shutdown(context.Background())
	client := controlapi.Client{Endpoint: cfg.Control.HTTP.NetAddr.Endpoint}
	ctx := context.Background()

	st, err := client.SetSampling(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Enabled || st.FrequencyHz != 0 {
		t.Fatalf("after turning off: %+v", st)
	}
	off := testworkload.Start(t, cBin, "1")
	_ = off.Wait()
	if st, err = client.SetSampling(ctx, true); err != nil || !st.Enabled {
		t.Fatalf("turning on: %+v, %v", st, err)
	}
	on := testworkload.Start(t, cBin, "1")
	_ = on.Wait()
	waitExitSeen(t, r, on.Process.Pid)
	if err := r.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testworkload.TallyProcess(sink.AllProfiles(), off.Process.Pid).Total; n != 0 {
		t.Errorf("%d samples of a process that ran while sampling was off", n)
	}
	if n := testworkload.TallyProcess(sink.AllProfiles(), on.Process.Pid).Total; n == 0 {
		t.Error("no samples after sampling was turned back on")
	}
}

// enabled: false loads nothing; the control endpoint can turn sampling on.
func TestDisabledByConfig(t *testing.T) {
	cfg := testConfig()
	cfg.Enabled = false
	cfg.Control.HTTP.NetAddr.Endpoint = testport.Addr(t)
	r, _ := startReceiver(t, cfg)
	defer r.Shutdown(context.Background())
	client := controlapi.Client{Endpoint: cfg.Control.HTTP.NetAddr.Endpoint}
	st, err := client.Status(context.Background())
	if err != nil || st.Enabled {
		t.Fatalf("status of a disabled receiver: %+v, %v", st, err)
	}
	if st, err = client.SetSampling(context.Background(), true); err != nil || !st.Enabled || st.FrequencyHz != cfg.FrequencyHz {
		t.Fatalf("turning on: %+v, %v", st, err)
	}
}

// With a budget no agent can meet, the guard lowers the rate interval after
// interval, and says so in the status.
func TestOverheadGuardLowersFrequency(t *testing.T) {
	cfg := testConfig()
	cfg.FrequencyHz = 64
	cfg.MaxCPUPercent = 0.000001
	cfg.Control.HTTP.NetAddr.Endpoint = testport.Addr(t)
	r, _ := startReceiver(t, cfg)
	defer r.Shutdown(context.Background())
	client := controlapi.Client{Endpoint: cfg.Control.HTTP.NetAddr.Endpoint}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := client.Status(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.FrequencyHz > 0 && st.FrequencyHz <= 16 {
			if st.CPUPercent <= cfg.MaxCPUPercent {
				t.Errorf("guard lowered the rate but reports %.6f %% CPU", st.CPUPercent)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("frequency still %d Hz after 20 s over budget", st.FrequencyHz)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
