package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
)

// symbolizeResult is per-interval symbolization time, measured the way the
// receiver spends it: each interval, its distinct stacks through one
// long-lived Symbolizer (warm caches after the first interval).
type symbolizeResult struct {
	Binaries       []string  `json:"binaries"`
	Intervals      int       `json:"intervals"`
	StacksPerIv    int       `json:"stacks_per_interval"`
	Depth          int       `json:"depth"`
	ColdMillis     float64   `json:"cold_first_interval_ms"`
	Millis         []float64 `json:"millis"` // warm intervals
	ResolvedFrames float64   `json:"resolved_frame_share"`
	Command        string    `json:"command"`
}

func symbolizeCmd(args []string) error {
	fs := flag.NewFlagSet("symbolize", flag.ExitOnError)
	out := fs.String("out", "symbolize.json", "result file")
	burn := fs.String("burn", "bin/hotpath-burn", "a Go workload binary to symbolize")
	collector := fs.String("collector", "bin/otelcol-hotpath", "a large Go+C++ binary to symbolize (the collector itself)")
	intervals := fs.Int("intervals", 200, "intervals to time")
	stacks := fs.Int("stacks", 300, "distinct stacks per interval (RFD 072: 100-200 per service)")
	depth := fs.Int("depth", 15, "frames per stack")
	_ = fs.Parse(args)
	if *intervals < 10 || *stacks < 1 || *depth < 1 {
		return fmt.Errorf("-intervals must be at least 10, -stacks and -depth positive")
	}
	// Two real processes: the workload (small Go binary) and the collector
	// (90 MB Go binary with DuckDB's C++, libstdc++ and libc), started
	// idle: their mappings are what the symbolizer reads.
	var procs []*exec.Cmd
	defer func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	// A minimal pipeline keeps the collector running without privileges or
	// fixed ports.
	idle := `yaml:{receivers: {otlp: {protocols: {grpc: {endpoint: "127.0.0.1:0"}}}}, exporters: {debug: {}}, service: {telemetry: {metrics: {level: none}}, pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}}`
	for _, c := range []*exec.Cmd{exec.Command(*burn, "-duration", "10m", "-threads", "1"), exec.Command(*collector, "--config", idle)} {
		if err := c.Start(); err != nil {
			return fmt.Errorf("start %s: %w", c.Path, err)
		}
		procs = append(procs, c)
	}
	s := symbolize.New(symbolize.Options{})
	var snaps []*symbolize.Process
	defer func() {
		for _, p := range snaps {
			p.Close()
		}
	}()
	for _, c := range procs {
		p, err := waitSnapshot(s, c.Process.Pid, filepath.Base(c.Path))
		if err != nil {
			return err
		}
		snaps = append(snaps, p)
	}
	res := symbolizeResult{Intervals: *intervals, StacksPerIv: *stacks, Depth: *depth,
		Command: fmt.Sprintf("hotpath-bench symbolize -intervals %d -stacks %d -depth %d", *intervals, *stacks, *depth)}
	for _, p := range snaps {
		res.Binaries = append(res.Binaries, p.ExePath)
	}
	rng := rand.New(rand.NewPCG(19, 15))
	frames := make([]symbolize.Frame, 0, 64)
	var resolved, total int
	for i := 0; i <= *intervals; i++ {
		// Fresh random return addresses every interval: a worst case for
		// any per-address cache (real stacks repeat far more).
		batch := make([][]uint64, *stacks)
		owner := make([]*symbolize.Process, *stacks)
		for j := range batch {
			p := snaps[j%len(snaps)]
			owner[j] = p
			batch[j] = randomStack(rng, p, *depth)
		}
		t0 := time.Now()
		for j, st := range batch {
			frames = s.User(owner[j], st, frames[:0])
			if i == *intervals {
				for _, f := range frames {
					total++
					if f.Function != "" {
						resolved++
					}
				}
			}
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if i == 0 {
			res.ColdMillis = ms
		} else {
			res.Millis = append(res.Millis, ms)
		}
	}
	if total > 0 {
		res.ResolvedFrames = float64(resolved) / float64(total)
	}
	sorted := slices.Sorted(slices.Values(res.Millis))
	logf("symbolize: %d intervals of %d stacks: cold %.1f ms, p50 %.2f ms, max %.2f ms", *intervals, *stacks, res.ColdMillis, sorted[len(sorted)/2], sorted[len(sorted)-1])
	return writeJSON(*out, res)
}

// waitSnapshot snapshots pid once it runs exe and has mapped it (a few
// tries: exec and the dynamic loader take a moment).
func waitSnapshot(s *symbolize.Symbolizer, pid int, exe string) (*symbolize.Process, error) {
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		p, err := s.Snapshot(pid)
		if err != nil {
			last = err
			continue
		}
		if fileMappings(p) >= 1 && filepath.Base(p.ExePath) == exe {
			return p, nil
		}
		p.Close()
		last = fmt.Errorf("pid %d has not exec'd its binary yet", pid)
	}
	return nil, fmt.Errorf("snapshot pid %d: %w", pid, last)
}

func fileMappings(p *symbolize.Process) int {
	n := 0
	for _, m := range p.Mappings {
		if strings.HasPrefix(m.Path, "/") {
			n++
		}
	}
	return n
}

// randomStack draws depth addresses inside p's file-backed executable
// mappings, as the benchmark in internal/symbolize does.
func randomStack(rng *rand.Rand, p *symbolize.Process, depth int) []uint64 {
	var text []symbolize.Mapping
	for _, m := range p.Mappings {
		if strings.HasPrefix(m.Path, "/") && m.Limit > m.Start {
			text = append(text, m)
		}
	}
	st := make([]uint64, depth)
	for j := range st {
		m := text[rng.IntN(len(text))]
		st[j] = m.Start + rng.Uint64N(m.Limit-m.Start)
	}
	return st
}
