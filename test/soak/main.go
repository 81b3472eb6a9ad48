// Command soak runs the real agent (bin/otelcol-hotpath) for a long time under
// process churn and reports whether its footprint stays flat:
//
//   - hundreds of short-lived processes a minute, each with its own
//     service.name, half of them killed with SIGKILL mid-run;
//   - the workload binary replaced on disk (rename over the old path) every
//     few seconds, alternating two builds with different build IDs;
//   - one process that creates and destroys OS threads all the time.
//
// It samples the agent's RSS, threads, open fds, BPF map occupancy (maps the
// agent holds, entries counted with bpftool) and the collector's own heap
// metric at start (after warm-up) and end, and checks that no sample of one
// process was attributed to another (process.pid → service.name as started).
// scripts/soak.sh builds and runs it; `make soak` is the target. It exits 1
// when a check fails.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/selfmetrics"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "thread-churn" {
		threadChurn()
		return
	}
	collector := flag.String("collector", "bin/otelcol-hotpath", "collector binary")
	workloadSrc := flag.String("workload", "internal/testworkload/src/spin.c", "C source of the short-lived workload")
	duration := flag.Duration("duration", 10*time.Minute, "how long to churn")
	rate := flag.Int("rate", 6, "short-lived processes started per second")
	warmup := flag.Duration("warmup", 30*time.Second, "churn before the start measurement")
	minimal := flag.Bool("minimal", false, "receiver → OTLP sink only (no processors, no DuckDB): to tell a receiver leak from a pipeline one")
	noDuckDB := flag.Bool("no-duckdb", false, "the full pipeline without the DuckDB exporter")
	flag.Parse()
	if err := run(*collector, *workloadSrc, *duration, *warmup, *rate, *minimal, *noDuckDB); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// threadChurn is the thread-churning child: goroutines locked to an OS
// thread that exit while locked, which makes the Go runtime end the thread.
func threadChurn() {
	fmt.Println("ready")
	var sink atomic.Uint64
	for {
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
				end := time.Now().Add(time.Duration(10+rand.IntN(90)) * time.Millisecond)
				x := uint64(1)
				for time.Now().Before(end) {
					for j := 0; j < 10000; j++ {
						x = x*6364136223846793005 + uint64(j)
					}
				}
				sink.Add(x)
			}()
		}
		wg.Wait()
	}
}

// attribution remembers which service each pid was started as and counts
// samples whose resource says otherwise.
type attribution struct {
	mu       sync.Mutex
	started  map[int64]map[string]bool // pid → services started under it (pids may be reused)
	samples  int64                     // soak-* samples received
	wrong    int64                     // samples whose pid was never started as their service
	firstBad string
	procs    map[int64]bool // pids seen in profiles
}

func (a *attribution) start(pid int, service string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started[int64(pid)] == nil {
		a.started[int64(pid)] = map[string]bool{}
	}
	a.started[int64(pid)][service] = true
}

func (a *attribution) handler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := pprofileotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	pd := req.Profiles()
	dict := pd.Dictionary()
	a.mu.Lock()
	for i := 0; i < pd.ResourceProfiles().Len(); i++ {
		rp := pd.ResourceProfiles().At(i)
		service := profileschema.ServiceName(rp.Resource())
		if !strings.HasPrefix(service, "soak-") {
			continue
		}
		pidv, _ := rp.Resource().Attributes().Get(profileschema.AttrProcessPID)
		pid := pidv.Int()
		var n int64
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			ps := rp.ScopeProfiles().At(j).Profiles()
			for k := 0; k < ps.Len(); k++ {
				p := ps.At(k)
				if !profileschema.IsSampleCount(dict, p) {
					continue
				}
				for s := 0; s < p.Samples().Len(); s++ {
					n += profileschema.SampleCount(p.Samples().At(s))
				}
			}
		}
		a.samples += n
		a.procs[pid] = true
		if !a.started[pid][service] {
			a.wrong += n
			if a.firstBad == "" {
				a.firstBad = fmt.Sprintf("pid %d reported as %s", pid, service)
			}
		}
	}
	a.mu.Unlock()
	resp, _ := pprofileotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// footprint is one measurement of the agent process.
type footprint struct {
	RSSKiB     int64
	Threads    int64
	FDs        int
	MapEntries map[string]int // "name(id)" → entries
	LRUMax     map[string]int // LRU maps among them → max_entries
	MaxEntries map[string]int // every counted map → max_entries
	HeapBytes  float64        // otelcol_process_runtime_heap_alloc_bytes
}

func (f footprint) totalEntries() int {
	n := 0
	for _, v := range f.MapEntries {
		n += v
	}
	return n
}

func measure(pid int, metricsURL string) (footprint, error) {
	f := footprint{MapEntries: map[string]int{}, LRUMax: map[string]int{}, MaxEntries: map[string]int{}}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return f, fmt.Errorf("read agent status: %w", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			f.RSSKiB, _ = strconv.ParseInt(fields[1], 10, 64)
		case "Threads:":
			f.Threads, _ = strconv.ParseInt(fields[1], 10, 64)
		}
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return f, fmt.Errorf("list agent fds: %w", err)
	}
	f.FDs = len(fds)
	// BPF maps the agent holds: fdinfo of a map fd names its map_id.
	seen := map[string]bool{}
	for _, fd := range fds {
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
		if err != nil {
			continue
		}
		var id, typ string
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "map_id:"); ok {
				id = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "map_type:"); ok {
				typ = strings.TrimSpace(v)
			}
		}
		if id == "" || seen[id] {
			continue
		}
		seen[id] = true
		// Ring buffers and perf event arrays have no entries to count.
		if typ == "27" || typ == "4" {
			continue
		}
		name, lruMax, maxEntries, n, err := mapEntries(id)
		if err != nil {
			return f, err
		}
		key := fmt.Sprintf("%s(%s)", name, id)
		f.MapEntries[key] = n
		f.MaxEntries[key] = maxEntries
		if lruMax > 0 {
			f.LRUMax[key] = lruMax
		}
	}
	if metricsURL != "" {
		if m, err := selfmetrics.Scrape(metricsURL); err == nil {
			if v, ok := m.Sum("otelcol_process_runtime_heap_alloc_bytes"); ok {
				f.HeapBytes = v
			}
		}
	}
	return f, nil
}

// mapEntries counts a map's entries with bpftool (array maps count every
// slot whose value is not all zero); lruMax is max_entries of an LRU map.
func mapEntries(id string) (name string, lruMax, maxEntries, n int, err error) {
	show, err := exec.Command("bpftool", "-j", "map", "show", "id", id).Output()
	if err != nil {
		return "", 0, 0, 0, fmt.Errorf("bpftool map show id %s: %w", id, err)
	}
	var m struct {
		Name       string `json:"name"`
		Type       string `json:"type"`
		MaxEntries int    `json:"max_entries"`
	}
	if err := json.Unmarshal(show, &m); err != nil {
		return "", 0, 0, 0, fmt.Errorf("bpftool map show id %s: %w", id, err)
	}
	if strings.Contains(m.Type, "lru") {
		lruMax = m.MaxEntries
	}
	dump, err := exec.Command("bpftool", "-j", "map", "dump", "id", id).Output()
	if err != nil {
		return m.Name, lruMax, m.MaxEntries, 0, fmt.Errorf("bpftool map dump id %s (%s): %w", id, m.Name, err)
	}
	var entries []json.RawMessage
	if err := json.Unmarshal(dump, &entries); err != nil {
		return m.Name, lruMax, m.MaxEntries, 0, fmt.Errorf("bpftool map dump id %s (%s): %w", id, m.Name, err)
	}
	if !strings.Contains(m.Type, "array") {
		return m.Name, lruMax, m.MaxEntries, len(entries), nil
	}
	for _, e := range entries {
		if !allZeroValue(e) {
			n++
		}
	}
	return m.Name, lruMax, m.MaxEntries, n, nil
}

func allZeroValue(e json.RawMessage) bool {
	var v struct {
		Value  []string `json:"value"`
		Values []struct {
			Value []string `json:"value"`
		} `json:"values"`
	}
	if json.Unmarshal(e, &v) != nil {
		return false
	}
	vals := v.Value
	for _, pc := range v.Values {
		vals = append(vals, pc.Value...)
	}
	for _, b := range vals {
		if b != "0x00" {
			return false
		}
	}
	return true
}

func buildWorkload(src, dir string) ([2]string, error) {
	var out [2]string
	for i, opt := range []string{"-O0", "-O1"} {
		out[i] = filepath.Join(dir, fmt.Sprintf("spin%s", opt))
		if b, err := exec.Command("gcc", opt, "-g", "-fno-omit-frame-pointer", "-o", out[i], src).CombinedOutput(); err != nil {
			return out, fmt.Errorf("gcc %s: %v\n%s", opt, err, b)
		}
	}
	return out, nil
}

// replaceBinary renames a fresh copy of src over dst, as a package manager
// redeploys.
func replaceBinary(src, dst string) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	staged := dst + ".new"
	if err := os.WriteFile(staged, data, 0o755); err != nil {
		return err
	}
	return os.Rename(staged, dst)
}

func run(collector, workloadSrc string, duration, warmup time.Duration, rate int, minimal, noDuckDB bool) error {
	dir, err := os.MkdirTemp("", "hotpath-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	builds, err := buildWorkload(workloadSrc, dir)
	if err != nil {
		return err
	}
	workload := filepath.Join(dir, "app")
	if err := replaceBinary(builds[0], workload); err != nil {
		return err
	}

	attr := &attribution{started: map[int64]map[string]bool{}, procs: map[int64]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1development/profiles", attr.handler)
	sinkL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(sinkL, mux) }()

	metricsPort, err := testport.Pick()
	if err != nil {
		return err
	}
	queryPort, err := testport.Pick()
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`
receivers:
  ebpfprofile:
    frequency_hz: 99
    interval: 5s
    control:
      endpoint: ""   # the default port may be taken by another agent here
    # The overhead guard would lower the rate under churn: the soak is
    # about state kept per process and per binary, so sample everything.
    max_cpu_percent: 0
processors:
  buildid:
  stackaggregator:
    window: 5s
    max_delay: 2s
exporters:
  duckdbprofile/local:
    tier: local
    path: %s/agent.duckdb
    query:
      endpoint: 127.0.0.1:%d
  otlphttp/sink:
    endpoint: http://%s
    compression: none
service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
    profiles:
      receivers: [ebpfprofile]
      processors: [buildid, stackaggregator]
      exporters: [duckdbprofile/local, otlphttp/sink]
`, dir, queryPort, sinkL.Addr(), metricsPort)
	switch {
	case minimal:
		config = strings.Replace(config, "      processors: [buildid, stackaggregator]\n      exporters: [duckdbprofile/local, otlphttp/sink]", "      exporters: [otlphttp/sink]", 1)
	case noDuckDB:
		config = strings.Replace(config, "      exporters: [duckdbprofile/local, otlphttp/sink]", "      exporters: [otlphttp/sink]", 1)
	}
	cfgPath := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "agent.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	agent := exec.Command(collector, "--config", cfgPath)
	agent.Stdout, agent.Stderr = logFile, logFile
	if err := agent.Start(); err != nil {
		return fmt.Errorf("start agent: %w", err)
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- agent.Wait() }()
	defer func() {
		_ = agent.Process.Kill()
		if b, err := os.ReadFile(logPath); err == nil && len(b) > 0 {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 15 {
				lines = lines[len(lines)-15:]
			}
			fmt.Printf("\nagent log (last lines):\n%s\n", strings.Join(lines, "\n"))
		}
	}()
	if err := waitForLog(logPath, "sampling every CPU", 60*time.Second, agentDone); err != nil {
		return err
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort)

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	var started, killed atomic.Int64
	var wg sync.WaitGroup

	// Thread churn.
	tc := exec.Command("/proc/self/exe", "thread-churn")
	tc.Env = append(os.Environ(), "OTEL_SERVICE_NAME=soak-threads")
	if err := tc.Start(); err != nil {
		return fmt.Errorf("start thread churn: %w", err)
	}
	attr.start(tc.Process.Pid, "soak-threads")
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-churnCtx.Done()
		_ = tc.Process.Kill()
		_ = tc.Wait()
	}()

	// Binary replacement.
	var replacements atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Second)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-churnCtx.Done():
				return
			case <-t.C:
				if err := replaceBinary(builds[i%2], workload); err != nil {
					fmt.Fprintln(os.Stderr, "replace binary:", err)
					continue
				}
				replacements.Add(1)
			}
		}
	}()

	// Short-lived processes: rate a second, each living 20 to 400 ms; half
	// are killed with SIGKILL, the others exit on their own.
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Second / time.Duration(rate))
		defer t.Stop()
		var n int64
		for {
			select {
			case <-churnCtx.Done():
				return
			case <-t.C:
			}
			n++
			service := fmt.Sprintf("soak-%d", n%500)
			life := time.Duration(20+rand.IntN(380)) * time.Millisecond
			kill := rand.IntN(2) == 0
			arg := fmt.Sprintf("%.3f", life.Seconds())
			if kill {
				arg = "60"
			}
			var cmd *exec.Cmd
			var err error
			for try := 0; try < 5; try++ {
				cmd = exec.Command(workload, arg)
				cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME="+service)
				// ETXTBSY: a child forked while the next build was being
				// written still held its write descriptor (Go's fork/exec
				// race); the exec succeeds a moment later.
				if err = cmd.Start(); !errors.Is(err, syscall.ETXTBSY) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "start workload:", err)
				continue
			}
			attr.start(cmd.Process.Pid, service)
			started.Add(1)
			go func() {
				if kill {
					time.Sleep(life)
					_ = cmd.Process.Kill()
					killed.Add(1)
				}
				_ = cmd.Wait()
			}()
		}
	}()

	fmt.Printf("soak: agent pid %d, %d processes/s, binary replaced every 5s, thread churn pid %d; warm-up %s, run %s\n",
		agent.Process.Pid, rate, tc.Process.Pid, warmup, duration)
	if !sleep(ctx, warmup, agentDone) {
		return errors.New("interrupted or agent exited during warm-up")
	}
	first, err := measure(agent.Process.Pid, metricsURL)
	if err != nil {
		return err
	}
	printFootprint("start", first)
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		step := min(time.Minute, time.Until(end))
		if !sleep(ctx, step, agentDone) {
			stopChurn()
			return errors.New("interrupted, or the agent exited")
		}
		f, err := measure(agent.Process.Pid, metricsURL)
		if err != nil {
			return err
		}
		printFootprint(fmt.Sprintf("t+%s", time.Until(end).Round(time.Second)), f)
	}
	last, err := measure(agent.Process.Pid, metricsURL)
	if err != nil {
		return err
	}
	stopChurn()
	wg.Wait()
	// Let the agent see every exit and flush its last windows.
	if !sleep(ctx, 20*time.Second, agentDone) {
		return errors.New("interrupted, or the agent exited")
	}
	idle, err := measure(agent.Process.Pid, metricsURL)
	if err != nil {
		return err
	}
	_ = agent.Process.Signal(syscall.SIGTERM)
	select {
	case <-agentDone:
	case <-time.After(30 * time.Second):
		return errors.New("agent did not stop within 30 s of SIGTERM")
	}

	attr.mu.Lock()
	defer attr.mu.Unlock()
	fmt.Printf("\n== soak summary (%s of churn after %s warm-up) ==\n", duration, warmup)
	fmt.Printf("processes started %d (killed %d), binary replacements %d, profiled pids %d\n",
		started.Load(), killed.Load(), replacements.Load(), len(attr.procs))
	fmt.Printf("%-22s %12s %12s %12s\n", "", "start", "end", "idle after")
	fmt.Printf("%-22s %12d %12d %12d\n", "agent RSS (MiB)", first.RSSKiB/1024, last.RSSKiB/1024, idle.RSSKiB/1024)
	fmt.Printf("%-22s %12.1f %12.1f %12.1f\n", "Go heap (MiB)", first.HeapBytes/(1<<20), last.HeapBytes/(1<<20), idle.HeapBytes/(1<<20))
	fmt.Printf("%-22s %12d %12d %12d\n", "threads", first.Threads, last.Threads, idle.Threads)
	fmt.Printf("%-22s %12d %12d %12d\n", "open fds", first.FDs, last.FDs, idle.FDs)
	fmt.Printf("%-22s %12d %12d %12d\n", "BPF map entries", first.totalEntries(), last.totalEntries(), idle.totalEntries())
	for name := range last.MapEntries {
		lru := fmt.Sprintf("  (max %d)", last.MaxEntries[name])
		if max, ok := last.LRUMax[name]; ok {
			lru = fmt.Sprintf("  (LRU, max %d)", max)
		}
		fmt.Printf("  %-20s %12d %12d %12d%s\n", name, first.MapEntries[name], last.MapEntries[name], idle.MapEntries[name], lru)
	}
	fmt.Printf("soak samples received %d, misattributed %d\n", attr.samples, attr.wrong)

	var fails []string
	// Flat: allow warm caches to settle, not unbounded growth.
	if last.RSSKiB > first.RSSKiB*3/2+64*1024 {
		fails = append(fails, fmt.Sprintf("RSS grew from %d to %d MiB", first.RSSKiB/1024, last.RSSKiB/1024))
	}
	if idle.FDs > first.FDs+16 {
		fails = append(fails, fmt.Sprintf("open fds grew from %d to %d", first.FDs, idle.FDs))
	}
	if idle.Threads > first.Threads+8 {
		fails = append(fails, fmt.Sprintf("threads grew from %d to %d", first.Threads, idle.Threads))
	}
	// Per-interval maps (counts/stacks, double-buffered) are cleared every
	// interval: their occupancy is how busy the whole machine was in the
	// last interval, not state the agent keeps, so on a shared machine
	// start and end cannot be compared; a leak shows as a map filling up.
	// LRU maps (pids already announced) are bounded by design; stale
	// entries are reported, and fail once they fill a quarter of the map.
	for name, n := range idle.MapEntries {
		max := idle.MaxEntries[name]
		if _, lru := idle.LRUMax[name]; lru {
			if n > max/4 {
				fails = append(fails, fmt.Sprintf("LRU map %s holds %d of %d entries after the churn stopped", name, n, max))
			}
			continue
		}
		if max > 1 && n > max/2 {
			fails = append(fails, fmt.Sprintf("BPF map %s holds %d of %d entries after the churn stopped", name, n, max))
		}
	}
	if attr.wrong > 0 {
		fails = append(fails, fmt.Sprintf("%d samples attributed to the wrong process (first: %s)", attr.wrong, attr.firstBad))
	}
	if attr.samples == 0 {
		fails = append(fails, "no samples of the churned processes arrived")
	}
	if len(fails) > 0 {
		return fmt.Errorf("FAIL: %s", strings.Join(fails, "; "))
	}
	fmt.Println("PASS")
	return nil
}

func printFootprint(label string, f footprint) {
	fmt.Printf("%-10s rss %6d MiB  heap %7.1f MiB  threads %3d  fds %4d  bpf entries %6d\n",
		label, f.RSSKiB/1024, f.HeapBytes/(1<<20), f.Threads, f.FDs, f.totalEntries())
}

// sleep waits d; false when interrupted or the agent exited.
func sleep(ctx context.Context, d time.Duration, agentDone <-chan error) bool {
	select {
	case <-ctx.Done():
		return false
	case err := <-agentDone:
		fmt.Fprintln(os.Stderr, "agent exited:", err)
		return false
	case <-time.After(d):
		return true
	}
}

func waitForLog(path, needle string, timeout time.Duration, agentDone <-chan error) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), needle) {
			return nil
		}
		select {
		case err := <-agentDone:
			return fmt.Errorf("agent exited before sampling: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("agent did not log %q within %s", needle, timeout)
}
