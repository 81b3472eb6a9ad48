//go:build linux && privileged

package sampler

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// newTraceMaps creates unpinned maps with the layout of the shared ones.
func newTraceMaps(t testing.TB) *TraceMaps {
	t.Helper()
	spec, err := loadCpuProfile()
	if err != nil {
		t.Fatal(err)
	}
	var maps [2]*ebpf.Map
	for i, name := range []string{cpuProfileMapTracesCtxV1, cpuProfileMapGoTraces} {
		ms := spec.Maps[name].Copy()
		ms.Pinning = ebpf.PinNone
		if maps[i], err = ebpf.NewMap(ms); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		t.Cleanup(func() { maps[i].Close() })
	}
	return &TraceMaps{Threads: maps[0], Goroutines: maps[1]}
}

type traceValue struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// A thread with an entry in the thread map is sampled with that trace; the
// other thread of the same process is not.
func TestTraceContextTagsThreadSamples(t *testing.T) {
	const hz = 199
	tm := newTraceMaps(t)
	s := openSampler(t, Config{FrequencyHz: hz, Interval: 5 * time.Second, TraceContext: tm})
	drain(t, s)

	cmd := startBurner(t, 1500*time.Millisecond, 2)
	pid := uint64(cmd.Process.Pid)
	want := traceValue{TraceID: [16]byte{0xab, 15: 0xcd}, SpanID: [8]byte{0xef}}
	// The main thread (tid == pid) gets a context; the second thread not.
	if err := tm.Threads.Put(pid<<32|pid, want); err != nil {
		t.Fatal(err)
	}
	waitBurner(t, cmd)
	b := drain(t, s)

	var tagged, mainThread, other, otherTagged uint64
	for _, smp := range b.Samples {
		if uint64(smp.PID) != pid {
			continue
		}
		isTagged := smp.TraceID == want.TraceID && smp.SpanID == want.SpanID
		if uint64(smp.TID) == pid {
			mainThread += smp.Count
			if isTagged {
				tagged += smp.Count
			}
		} else {
			other += smp.Count
			if smp.TraceID != [16]byte{} {
				otherTagged += smp.Count
			}
		}
	}
	// The burner runs 1.5 s of wall time; on a loaded machine each thread
	// may get far less CPU, so the counts asked for are modest.
	if mainThread < 10 || tagged < mainThread*9/10 {
		t.Errorf("main thread: %d of %d samples tagged", tagged, mainThread)
	}
	if other < 10 || otherTagged != 0 {
		t.Errorf("second thread: %d of %d samples tagged, want none", otherTagged, other)
	}
	if b.Stats.Traced < tagged {
		t.Errorf("Stats.Traced = %d, fewer than the %d tagged samples", b.Stats.Traced, tagged)
	}
	// The exit hook dropped the thread's entry.
	var left traceValue
	if err := tm.Threads.Lookup(pid<<32|pid, &left); err == nil {
		t.Error("entry of the exited thread is still in the map")
	}
}

func TestTraceContextNeedsBothMaps(t *testing.T) {
	tm := newTraceMaps(t)
	if _, err := Open(Config{TraceContext: &TraceMaps{Threads: tm.Threads}}); err == nil {
		t.Fatal("Open with only the thread map: no error")
	}
}

// BenchmarkSampleProgram measures what the trace lookup adds to the BPF
// program's run time per sample (kernel BPF stats). Two samplers run side by
// side on the same CPUs at 2999 Hz, one without the lookup and one with it,
// so both see the same stacks and the same machine load; a 1-thread burner
// provides the samples, its thread map entry absent (miss) or present (hit).
// Reports bpf-ns/sample of each and their difference; ns/op is the 200 ms
// window and means nothing.
func BenchmarkSampleProgram(b *testing.B) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enable BPF run-time stats: %v", err)
	}
	defer stats.Close()
	for _, mode := range []string{"miss", "hit"} {
		b.Run(mode, func(b *testing.B) {
			tm := newTraceMaps(b)
			off := openSampler(b, Config{FrequencyHz: 2999, Interval: time.Second})
			on := openSampler(b, Config{FrequencyHz: 2999, Interval: time.Second, TraceContext: tm})
			cmd := startBurner(b, 10*time.Minute, 1) // killed by cleanup
			if mode == "hit" {
				pid := uint64(cmd.Process.Pid)
				if err := tm.Threads.Put(pid<<32|pid, traceValue{TraceID: [16]byte{1}}); err != nil {
					b.Fatal(err)
				}
			}
			time.Sleep(50 * time.Millisecond)
			rt, runs := sideBySide(b, off, on, nil)
			perOff, perOn := perSample(rt[0], runs[0]), perSample(rt[1], runs[1])
			b.ReportMetric(perOff, "off-bpf-ns/sample")
			b.ReportMetric(perOn, "on-bpf-ns/sample")
			b.ReportMetric(perOn-perOff, "lookup-ns/sample")
		})
	}
}

// sideBySide runs b's loop over 200 ms windows of two samplers sampling
// the same machine, draining both after each window (seen, when set, gets
// on's batches), and returns each program's total run time and runs.
func sideBySide(b *testing.B, off, on *Sampler, seen func(Batch)) (rt [2]time.Duration, runs [2]uint64) {
	for b.Loop() {
		var rt0 [2]time.Duration
		var n0 [2]uint64
		for i, s := range []*Sampler{off, on} {
			rt0[i], n0[i] = progStats(b, s)
		}
		time.Sleep(200 * time.Millisecond)
		for i, s := range []*Sampler{off, on} {
			r, n := progStats(b, s)
			rt[i] += r - rt0[i]
			runs[i] += n - n0[i]
			batch := drain(b, s)
			if s == on && seen != nil {
				seen(batch)
			}
		}
	}
	if runs[0] == 0 || runs[1] == 0 {
		b.Fatal("a sampling program never ran")
	}
	return rt, runs
}

// perSample is a program's mean run time per sample in ns.
func perSample(rt time.Duration, runs uint64) float64 {
	return float64(rt.Nanoseconds()) / float64(runs)
}

func progStats(b *testing.B, s *Sampler) (time.Duration, uint64) {
	st, err := s.objs.CpuSample.Stats()
	if err != nil {
		b.Fatalf("read program stats: %v", err)
	}
	return st.Runtime, st.RunCount
}
