package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotpath-dev/hotpath/bench/internal/benchfmt"
	"github.com/hotpath-dev/hotpath/bench/internal/collectorproc"
	"github.com/hotpath-dev/hotpath/bench/internal/procstat"
	"github.com/hotpath-dev/hotpath/internal/selfmetrics"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// churnResult is the agent on a node that keeps starting processes and
// building new binaries (a CI runner), with the overhead guard on (the
// shipped config as is) and off; or, in the container phase, that
// workload in a container with the guard on.
type churnResult struct {
	// Phase is "churn" or "container" ("" in results written before the
	// container phase: churn).
	Phase         string      `json:"phase,omitempty"`
	CPUs          int         `json:"cpus"`
	AgentConfig   string      `json:"agent_config"`
	GatewayConfig string      `json:"gateway_config"`
	ConfiguredHz  float64     `json:"configured_hz"` // frequency_hz of the agent config
	WindowSeconds float64     `json:"window_seconds_requested"`
	WarmupSeconds float64     `json:"warmup_seconds"`
	AfterSeconds  float64     `json:"after_seconds"` // the churn stopped, the steady workloads on
	AlignSeconds  float64     `json:"align_seconds"` // the agent's interval: windows start on its boundaries
	GoEvery       float64     `json:"go_build_every_seconds"`
	GoCache       string      `json:"go_cache"`
	BinaryCache   string      `json:"binary_cache"`
	Steady        []string    `json:"steady_workload"` // the commands, as started
	Churn         []string    `json:"churn_workload"`
	Runs          []churnRun  `json:"runs"`
	LoadAvg       [][]float64 `json:"loadavg"` // 1/5/15 min at start and end
}

// churnRun is one agent run under the churn.
type churnRun struct {
	Label       string    `json:"label"` // "guard on" (shipped config) or "guard off"
	AgentArgs   []string  `json:"agent_args"`
	LoadAvg     []float64 `json:"loadavg_at_start"`
	TTFSMillis  float64   `json:"ttfs_ms"`
	WindowStart time.Time `json:"window_start"` // on an interval boundary
	WindowEnd   time.Time `json:"window_end"`
	// The agent over the window: CPU from /proc/PID/stat, memory once a
	// second from /proc/PID/status, VmHWM (start-up included) at the end.
	Seconds    float64   `json:"seconds"`
	CPUSeconds float64   `json:"cpu_seconds"`
	WarmupCPU  float64   `json:"warmup_cpu_seconds"`
	RSS        []float64 `json:"rss_mb"`
	Anon       []float64 `json:"rss_anon_mb"`
	PeakRSSMB  float64   `json:"peak_rss_mb"`
	// Timeline from the agent's start to the window's end, once a second.
	Timeline []churnPoint `json:"timeline"`
	// Overhead guard log lines, seconds after the agent's start.
	GuardLines []string `json:"guard_lines"`
	// Samples of each steady workload in the window, from the agent's
	// local DuckDB, against the configured rate × its CPU time.
	Steady []steadyFigure `json:"steady"`
	Leaves []leafShare    `json:"c_leaf_shares"`
	// Stacks of the churn's short-lived tools (gcc's cc1, as and ld,
	// python3 -c) in the window, by service: how many reach the
	// program's entry.
	ToolStacks []toolStacks `json:"tool_stacks"`
	// The container phase: the id of the workload's container, and by
	// service the workload's samples in the window with that container id
	// and without it.
	ContainerID string                      `json:"container_id,omitempty"`
	Containers  map[string]containerSamples `json:"container_samples,omitempty"`
	// Process starts in the window (the churn's own children, by kind) and
	// processes created on the whole machine (/proc/stat "processes").
	Starts       map[string]int `json:"starts"`
	MachineForks float64        `json:"machine_forks"`
	// The CPU time of the churn's own starts in the window (with the
	// children each waited for; those finished when counted), by kind,
	// and how many finished: the work the agent profiles, and a measure
	// of the machine's speed at the time (the same builds cost more CPU
	// on a slower or busier host).
	ChurnCPU      map[string]float64 `json:"churn_cpu_seconds,omitempty"`
	ChurnFinished map[string]int     `json:"churn_finished,omitempty"`
	LoadProblems  []string           `json:"load_problems,omitempty"`
	// Receiver self-metrics: per-binary work by outcome and kind (nil:
	// not reported by this build), samples kept, gauges at the end.
	BinaryWork     map[string]map[string]float64 `json:"binary_work"`
	BinaryWorkName string                        `json:"binary_work_metric"`
	BinaryWorkCPU  float64                       `json:"binary_work_cpu_seconds"` // -1: not reported
	SamplesKept    float64                       `json:"samples_kept"`
	SymbolTables   float64                       `json:"symbol_tables"`
	Processes      float64                       `json:"processes_tracked"`
	UnwindTables   float64                       `json:"unwind_tables"`
	MetricNames    []string                      `json:"metric_names_used"`
	// After the window the churn stops and the steady workloads go on:
	// the agent's memory once a second for AfterSeconds (a CI job over),
	// and its symbol and unwind tables at the end (unwind tables are kernel
	// memory, charged to the agent's memory cgroup, not in its RSS).
	AfterRSS               []float64 `json:"after_rss_mb,omitempty"`
	AfterAnon              []float64 `json:"after_rss_anon_mb,omitempty"`
	AfterSymbolTables      float64   `json:"after_symbol_tables"`
	AfterSymbolTableBytes  float64   `json:"after_symbol_table_bytes"`
	WindowSymbolTableBytes float64   `json:"symbol_table_bytes"`
	AfterUnwindTables      float64   `json:"after_unwind_tables"`
	AfterUnwindTableBytes  float64   `json:"after_unwind_table_bytes"`
	WindowUnwindTableBytes float64   `json:"unwind_table_bytes"`
}

// churnPoint is one second of the timeline. Hz is -1 while the receiver
// has not reported its frequency yet.
type churnPoint struct {
	T      float64 `json:"t"` // seconds since the agent's exec
	Hz     float64 `json:"hz"`
	RSSMB  float64 `json:"rss_mb"`
	AnonMB float64 `json:"anon_mb"`
	Forks  uint64  `json:"forks"` // /proc/stat processes, machine-wide
}

// steadyFigure is one steady workload's samples against its CPU time.
type steadyFigure struct {
	Name       string  `json:"name"`
	Service    string  `json:"service"`
	CPUSeconds float64 `json:"cpu_seconds"` // /proc/PID/stat over the window
	Expected   float64 `json:"expected"`    // configured Hz × CPU seconds
	Samples    float64 `json:"samples"`     // stored in the window's intervals
	NoBuildID  float64 `json:"samples_without_build_id"`
	Intervals  int     `json:"intervals"` // distinct interval timestamps holding them
}

// toolStacks are the samples of one of the churn's tools in the window.
// Unread: taken in processes the agent never read (no build ID, frames as
// raw addresses; whether they reach the entry is not known). Of the others
// (with a user frame), Whole reach the program's entry: the root is
// _start, glibc's __libc_start_main or __libc_start_call_main, the
// loader's _dl_start_user, or an unnamed function that calls
// __libc_start_main (a stripped _start). A stack cut short by a walk that
// lost its way has some other root.
type toolStacks struct {
	Service string  `json:"service"`
	Unread  float64 `json:"unread"`
	User    float64 `json:"with_user_frames"`
	Whole   float64 `json:"reaching_entry"`
	// All is every sample of the tool, and Unknown those with a frame in
	// no file the agent knew of ([unknown]: the process was gone before
	// it was read, and nothing else named it).
	All     float64 `json:"samples"`
	Unknown float64 `json:"with_unknown_frame"`
}

// containerSamples are one service's samples in the window by whether
// they carry the workload's container id.
type containerSamples struct {
	With    float64 `json:"with_container_id"`
	Without float64 `json:"without"`
}

// churnLoadServices matches the services of every program the churn's
// workload starts: the steady programs (churn-steady-…), the new C and Go
// binaries (churn-N, churn-go-N), gcc and what it runs, go build and what
// it runs, python3 and /bin/true, and the group's sleeping leader.
const churnLoadServices = `^(churn-.+|([a-z0-9_]+-)*gcc(-[0-9]+)?|cc1|collect2|([a-z0-9_]+-)*as|([a-z0-9_]+-)*ld(\.bfd)?|go|compile|link|python3(\.[0-9]+)?|true|sleep)$`

// countContainerSamples asks the agent's SQL endpoint for the workload's
// samples in the window, by service, with the container's id and without:
// from stack_samples_local, the local tier's rows with their series'
// columns (trace-tagged samples included), which samples_in() reads too.
func countContainerSamples(run *churnRun, client sqlquery.Client, ts func(time.Time) string) error {
	stmt := fmt.Sprintf(`SELECT service_id, (sum(sample_count) FILTER (WHERE container_id = '%[1]s'))::BIGINT,
       (sum(sample_count) FILTER (WHERE container_id <> '%[1]s'))::BIGINT
FROM stack_samples_local
WHERE timestamp >= %[2]s AND timestamp < %[3]s AND regexp_matches(service_id, '%[4]s')
GROUP BY service_id ORDER BY service_id`, run.ContainerID, ts(run.WindowStart), ts(run.WindowEnd), churnLoadServices)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := client.Query(ctx, stmt)
	if err != nil {
		return fmt.Errorf("query the container's samples: %w", err)
	}
	run.Containers = map[string]containerSamples{}
	for _, row := range rows.Rows {
		run.Containers[fmt.Sprint(row[0])] = containerSamples{With: number(row[1]), Without: number(row[2])}
	}
	return nil
}

// churnToolServices matches the services of the churn's tools: gcc's cc1,
// as and ld (Debian's x86_64-linux-gnu-as and -ld.bfd) and python3. They
// are built without frame pointers and exit within a second, often before
// the agent reads them.
const churnToolServices = `^(cc1|([a-z0-9_]+-)*as|([a-z0-9_]+-)*ld(\.bfd)?|python3(\.[0-9]+)?)$`

// countToolStacks asks the agent's SQL endpoint how many of the churn's
// tools' stacks in the window reach their program's entry, and how many
// have a frame in no file the agent knew of.
func countToolStacks(run *churnRun, client sqlquery.Client, ts func(time.Time) string) error {
	user := `NOT stack_frames[1] LIKE '%\_[k]' ESCAPE '\'`
	stmt := fmt.Sprintf(`SELECT service_id, (sum(sample_count) FILTER (WHERE build_id = ''))::BIGINT,
       (sum(sample_count) FILTER (WHERE build_id <> '' AND %[1]s))::BIGINT,
       (sum(sample_count) FILTER (WHERE build_id <> '' AND %[1]s AND (stack_frames[1] IN ('_start', '__libc_start_main', '__libc_start_call_main', '_dl_start_user') OR stack_frames[2] = '__libc_start_main')))::BIGINT,
       sum(sample_count)::BIGINT,
       (sum(sample_count) FILTER (WHERE list_contains(stack_frames, '[unknown]')))::BIGINT
FROM cpu_profile_samples_local_decoded
WHERE timestamp >= %[2]s AND timestamp < %[3]s AND regexp_matches(service_id, '%[4]s')
GROUP BY service_id ORDER BY service_id`, user, ts(run.WindowStart), ts(run.WindowEnd), churnToolServices)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := client.Query(ctx, stmt)
	if err != nil {
		return fmt.Errorf("query the churn's tools' stacks: %w", err)
	}
	for _, row := range rows.Rows {
		run.ToolStacks = append(run.ToolStacks, toolStacks{Service: fmt.Sprint(row[0]), Unread: number(row[1]), User: number(row[2]), Whole: number(row[3]),
			All: number(row[4]), Unknown: number(row[5])})
	}
	return nil
}

// leafShare is a function's share of a workload's samples as the leaf.
type leafShare struct {
	Function string  `json:"function"`
	Want     float64 `json:"want_percent"`
	Got      float64 `json:"got_percent"`
	Samples  float64 `json:"of_samples"` // the workload's samples the share is of
}

var frequencyRe = regexp.MustCompile(`(?m)^\s*frequency_hz:\s*(\d+)`)

func churnCmd(args []string) error {
	fs := flag.NewFlagSet("churn", flag.ExitOnError)
	out := fs.String("out", "churn.json", "result file")
	af := addAgentFlags(fs)
	window := fs.Duration("window", 120*time.Second, "measured window per run (rounded up to whole intervals)")
	// 60 s, not the 20 s of the other phases: with the guard on, the agent
	// defers the tables of the binaries it meets in its first seconds (the
	// C library, the compilers, python3) to its next intervals, 20-25 s
	// after its ready line on this workload. With 20 s of warm-up that
	// start-up work fell into the guard-on window only (the guard-off agent
	// had done it before), and the window is the steady state under churn;
	// the start-up's CPU is reported apart (warm-up CPU).
	warmup := fs.Duration("warmup", 60*time.Second, "time after the ready line before the window (then the first interval, then the next interval boundary)")
	align := fs.Duration("interval", 15*time.Second, "the agent's interval (receiver interval and stackaggregator window of the config): windows start on its wall-clock boundaries, so the intervals stored cover them exactly")
	goEvery := fs.Duration("go-every", 6*time.Second, "a go build of a new module version this often")
	after := fs.Duration("after", 180*time.Second, "after the window, the churn stops and the agent's memory is measured this long with the steady workloads alone (0: not)")
	python := fs.String("python", "", "python3 for the churn (default /usr/bin/python3, else python3 from PATH)")
	inContainer := fs.Bool("container", false, "the container phase: the workload in a container (an overlay over / entered with chroot, a kubepods cgroup), one run with the guard on")
	_ = fs.Parse(args)
	if *window < *align {
		return fmt.Errorf("-window must be at least one interval (%s)", *align)
	}
	*window = (*window + *align - 1).Truncate(*align)
	phase := "churn"
	if *inContainer {
		phase = "container"
	}
	r, err := af.newRun(phase)
	if err != nil {
		return err
	}
	queryEndpoint, ok := envValue(r.env, "HOTPATH_AGENT_QUERY")
	if !ok {
		return fmt.Errorf("%s has no ${env:HOTPATH_AGENT_QUERY} for its SQL endpoint", r.agentCfg)
	}
	cfg, err := os.ReadFile(r.agentCfg)
	if err != nil {
		return err
	}
	m := frequencyRe.FindSubmatch(cfg)
	if m == nil {
		return fmt.Errorf("no frequency_hz in %s", r.agentCfg)
	}
	hz, _ := strconv.ParseFloat(string(m[1]), 64)
	py, err := findRuntime(*python, "python3", "-python")
	if err != nil {
		return err
	}
	// Guard on is the configuration as shipped (with any -set other than
	// the guard's); guard off adds max_cpu_percent=0.
	const guardOff = "--set=receivers.ebpfprofile.max_cpu_percent=0"
	var base []string
	for _, a := range r.agentArgs {
		if !strings.HasPrefix(a, "--set=receivers.ebpfprofile.max_cpu_percent=") {
			base = append(base, a)
		}
	}
	// Each run's agent starts with an empty binary cache of its own: the
	// two agents share the phase's state directory, and with one cache the
	// second (guard off) would find the unwind rows of every binary the
	// first had met.
	cacheArg := func(i int) string {
		return "--set=receivers.ebpfprofile.binary_cache.directory=" + filepath.Join(r.dir, fmt.Sprintf("binary-cache-%d", i+1))
	}
	runs := []struct {
		label string
		args  []string
	}{{"guard on", append(slices.Clone(base), cacheArg(0))}, {"guard off", append(slices.Clone(base), guardOff, cacheArg(1))}}
	if *inContainer {
		runs = runs[:1]
	}

	steadyC, err := buildC(r.dir, "churn-steady-c", steadyCSource, nil, nil)
	if err != nil {
		return err
	}
	res := &churnResult{Phase: phase, CPUs: runtime.NumCPU(), AgentConfig: r.agentCfg, GatewayConfig: r.gatewayCfg, ConfiguredHz: hz,
		WindowSeconds: window.Seconds(), WarmupSeconds: warmup.Seconds(), AfterSeconds: after.Seconds(), AlignSeconds: align.Seconds(), GoEvery: goEvery.Seconds(),
		BinaryCache: "each run's agent starts with an empty binary cache of its own (receivers.ebpfprofile.binary_cache.directory)",
		GoCache:     "GOCACHE inside the phase's work directory, warmed by one build before the first agent starts (the standard library is compiled then; each churn build compiles one package and links)"}
	res.LoadAvg = append(res.LoadAvg, loadAvg())

	// An interrupted phase stops the workload (the whole process group)
	// and the collectors before exiting.
	var mu sync.Mutex
	var cleanups []func()
	onInterrupt := func(f func()) func() {
		mu.Lock()
		defer mu.Unlock()
		cleanups = append(cleanups, f)
		i := len(cleanups) - 1
		return func() { mu.Lock(); cleanups[i] = nil; mu.Unlock() }
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := <-sigs; ok {
			logf("%s: %v: stopping the workload and the collectors", phase, s)
			mu.Lock()
			for i := len(cleanups) - 1; i >= 0; i-- {
				if cleanups[i] != nil {
					cleanups[i]()
				}
			}
			mu.Unlock()
			os.Exit(1)
		}
	}()

	logf("%s: state and logs in %s; runs: %d (guard on: the shipped config; guard off); %s window each", phase, r.dir, len(runs), *window)
	gw, err := r.startGateway()
	if err != nil {
		return err
	}
	undo := onInterrupt(func() { _ = gw.Stop(5 * time.Second) })
	defer func() { undo(); _ = gw.Stop(30 * time.Second) }()

	for i, run := range runs {
		r.agentArgs = run.args
		cr, err := r.churnRun(res, run.label, filepath.Join(r.dir, fmt.Sprintf("load-%d", i+1)), steadyC, py, *window, *warmup, *align, *goEvery, *after, queryEndpoint, onInterrupt)
		if err != nil {
			return fmt.Errorf("run %q: %w", run.label, err)
		}
		res.Runs = append(res.Runs, *cr)
		logf("%s: %s: agent %.2f %% of a core, RSS median %.1f MB, peak %.1f MB, frequency %s, steady samples %s",
			phase, run.label, 100*cr.CPUSeconds/cr.Seconds, benchfmt.Summarize(cr.RSS).Median, cr.PeakRSSMB, hzRange(cr), steadyString(cr))
		time.Sleep(3 * time.Second) // the gateway writes the agent's last interval
	}
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	return writeJSON(*out, res)
}

// churnRun starts the workload (in a container in the container phase),
// then the agent with r.agentArgs, measures one window and counts what the
// agent stored for it.
func (r *agentRun) churnRun(res *churnResult, label, loadDir, steadyC, python string, window, warmup, align, goEvery, after time.Duration, queryEndpoint string, onInterrupt func(func()) func()) (*churnRun, error) {
	run := &churnRun{Label: label, AgentArgs: r.agentArgs, LoadAvg: loadAvg()}
	tag := strings.ReplaceAll(label, " ", "-")
	goCache := filepath.Join(filepath.Dir(loadDir), "gocache")
	var ctr *benchContainer
	if res.Phase == "container" {
		var err error
		if ctr, err = newBenchContainer(filepath.Join(r.dir, "container")); err != nil {
			return nil, err
		}
		// Registered first, so undone last: after the load is killed.
		undo := onInterrupt(ctr.close)
		defer func() { undo(); ctr.close() }()
		run.ContainerID = ctr.ID
	}
	load, err := newChurnLoad(loadDir, goCache, python, ctr)
	if err != nil {
		return nil, err
	}
	undo := onInterrupt(load.kill)
	defer func() { undo(); load.kill() }()
	logf("%s: warming the Go build cache %s", label, goCache)
	if err := load.warmGo(); err != nil {
		return nil, err
	}
	steady := []struct{ name, service, bin string }{
		{"C without frame pointers (" + nativeCFlags + ")", "churn-steady-c-" + tag, steadyC},
		{"Go (hotpath-burn, 1 thread)", "churn-steady-go-" + tag, r.burn},
	}
	var pids []int
	for _, s := range steady {
		args := []string{}
		if s.bin == r.burn {
			args = []string{"-threads", "1", "-duration", "2h"}
		}
		bin, err := load.program(s.bin)
		if err != nil {
			return nil, err
		}
		c, err := load.startSteady(s.service, bin, args...)
		if err != nil {
			return nil, err
		}
		pids = append(pids, c.Process.Pid)
		run.Steady = append(run.Steady, steadyFigure{Name: s.name, Service: s.service})
	}
	res.Steady = []string{steadyC + "  (OTEL_SERVICE_NAME=churn-steady-c-<run>)", r.burn + " -threads 1  (OTEL_SERVICE_NAME=churn-steady-go-<run>)"}
	res.Churn = []string{
		"once a second on average (gaps drawn evenly from 0.5-1.5 s): gcc " + nativeCFlags + " of a new tiny C file (a new binary each time), then that binary; " + python + " -B -c '" + churnPython + "'; /bin/true twice",
		fmt.Sprintf("every %s on average (gaps from half to one and a half of it): go build of a small module with a changed constant (a new binary each time), then that binary", goEvery),
	}
	load.startChurn(goEvery)
	time.Sleep(2 * time.Second) // a busy node before the agent starts

	a, _, ttfs, err := r.startAgent()
	if err != nil {
		return nil, err
	}
	undoAgent := onInterrupt(func() { _ = a.Stop(5 * time.Second) })
	defer func() { undoAgent(); _ = a.Stop(30 * time.Second) }()
	run.TTFSMillis = millis(ttfs)
	logf("%s: agent ready after %.0f ms; warm-up, then a %s window from the next %s boundary", label, run.TTFSMillis, window, align)

	tl := r.startTimeline(a)
	sw, err := r.measureSteady(a, window, warmup, steadyOptions{Watch: pids, Align: align})
	run.Timeline = tl.stop()
	if err != nil {
		return nil, err
	}
	run.WindowStart, run.WindowEnd = sw.Start.UTC(), sw.Start.Add(window).UTC()
	run.Seconds, run.CPUSeconds, run.WarmupCPU = sw.Seconds, sw.CPUSeconds, sw.WarmupCPU
	run.RSS, run.Anon, run.PeakRSSMB = sw.RSS, sw.Anon, sw.PeakRSSMB
	for i := range run.Steady {
		run.Steady[i].CPUSeconds = sw.WatchedCPU[i]
		run.Steady[i].Expected = res.ConfiguredHz * sw.WatchedCPU[i]
	}
	for i, pid := range pids {
		if _, err := procstat.ReadMemory(pid); err != nil {
			return nil, fmt.Errorf("steady workload %s exited during the window: %w", run.Steady[i].Name, err)
		}
	}
	run.Starts = load.startsIn(run.WindowStart, run.WindowEnd)
	run.MachineForks = forksIn(run.Timeline, a.Started, run.WindowStart, run.WindowEnd)
	run.LoadProblems = load.problems()
	for _, l := range a.Lines("overhead guard") {
		run.GuardLines = append(run.GuardLines, fmt.Sprintf("+%.0fs %s", l.At.Sub(a.Started).Seconds(), l.Text))
	}
	churnSelfMetrics(run, sw.M0, sw.M1)

	// The last interval is stored once the stackaggregator's max_delay
	// has passed after its end; wait for it, then count.
	if err := countSteadySamples(run, queryEndpoint, align); err != nil {
		return nil, err
	}
	if ctr != nil {
		if err := countContainerSamples(run, sqlquery.Client{Endpoint: queryEndpoint}, sqlTimestamp); err != nil {
			return nil, err
		}
	}
	if after > 0 {
		r.afterChurn(run, a, load, after)
	}
	// After the churn stopped (afterChurn), every start of the window has
	// finished and is counted; without it, the last ones may not be.
	run.ChurnCPU, run.ChurnFinished = load.cpuIn(run.WindowStart, run.WindowEnd)
	return run, nil
}

// afterChurn stops the churn, keeps the steady workloads, and records the
// agent's memory once a second for d, then its symbol and unwind tables:
// what a node gets back once a CI job is over.
func (r *agentRun) afterChurn(run *churnRun, a *collectorproc.Process, load *churnLoad, d time.Duration) {
	load.stopChurn()
	logf("%s: churn stopped; the agent's memory for %s with the steady workloads alone", run.Label, d)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-t.C {
		if mem, err := procstat.ReadMemory(a.PID()); err == nil {
			run.AfterRSS = append(run.AfterRSS, float64(mem.RSS)/1e6)
			run.AfterAnon = append(run.AfterAnon, float64(mem.Anon)/1e6)
		}
	}
	if m, err := selfmetrics.Scrape(r.metricsURL); err == nil {
		readGauges(m, tableGauges(&run.AfterSymbolTables, &run.AfterSymbolTableBytes, &run.AfterUnwindTables, &run.AfterUnwindTableBytes))
	}
}

// gauge is a receiver gauge the phase reads into a field of its run.
type gauge struct {
	name     string
	dst      *float64
	suffixes []string // the unit the Prometheus exporter may append
}

var byteSuffixes = []string{"_bytes", "_By"}

// tableGauges are the receiver's symbol and unwind table gauges (count and
// bytes of each), read into the fields given.
func tableGauges(symbolTables, symbolBytes, unwindTables, unwindBytes *float64) []gauge {
	return []gauge{{"symbol_tables", symbolTables, nil}, {"symbol_table_bytes", symbolBytes, byteSuffixes},
		{"unwind_tables", unwindTables, nil}, {"unwind_table_bytes", unwindBytes, byteSuffixes}}
}

// readGauges reads gs from m and returns the names of the series read.
func readGauges(m selfmetrics.Metrics, gs []gauge) (names []string) {
	for _, g := range gs {
		if v, n, ok := m.Receiver(g.name, g.suffixes); ok {
			*g.dst = v
			names = append(names, n)
		}
	}
	return names
}

// timeline samples the agent once a second from its start: its memory and
// the machine's process count, and every hzScrapeEvery seconds the
// receiver's frequency gauge (a scrape of /metrics).
type timeline struct {
	done   chan struct{}
	wg     sync.WaitGroup
	points []churnPoint
}

func (r *agentRun) startTimeline(a *collectorproc.Process) *timeline {
	tl := &timeline{done: make(chan struct{})}
	tl.wg.Add(1)
	go func() {
		defer tl.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for tick := 0; ; tick++ {
			p := churnPoint{T: time.Since(a.Started).Seconds(), Hz: -1, Forks: machineForks()}
			if tick%hzScrapeEvery == 0 {
				r.scrapeHz(&p)
			}
			if mem, err := procstat.ReadMemory(a.PID()); err == nil {
				p.RSSMB, p.AnonMB = float64(mem.RSS)/1e6, float64(mem.Anon)/1e6
			}
			tl.points = append(tl.points, p)
			select {
			case <-tl.done:
				return
			case <-t.C:
			}
		}
	}()
	return tl
}

// hzScrapeEvery is how many seconds apart the timeline reads the
// frequency gauge: once an interval (15 s), a common Prometheus scrape
// interval. A scrape costs the agent CPU (the collector's Prometheus
// exporter gathers every metric, reads the Go runtime's memory statistics
// and gzips the page): 12-17 ms each when they come seconds apart, against
// 3 ms back to back (2026-11-30: the agent's CPU ticks over 12 scrapes 5 s
// apart, and perf record). Every 5 s that was 14 % of the agent's samples in
// this phase, and once a second a tenth before that (2026-11-28), all of it
// counted as the agent's own overhead. The overhead guard changes the rate
// at most once an interval, so one scrape an interval still sees each
// change.
const hzScrapeEvery = 15

// scrapeHz reads the receiver's frequency gauge into p (left at -1 when
// the scrape fails).
func (r *agentRun) scrapeHz(p *churnPoint) {
	m, err := selfmetrics.Scrape(r.metricsURL)
	if err != nil {
		return
	}
	if v, _, ok := m.Receiver("frequency", []string{"_hertz", "_Hz"}); ok {
		p.Hz = v
	}
}

func (tl *timeline) stop() []churnPoint {
	close(tl.done)
	tl.wg.Wait()
	return tl.points
}

// machineForks is the number of processes created on the machine since
// boot (/proc/stat "processes").
func machineForks() uint64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "processes "); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// forksIn is the machine's process creations per second between the first
// timeline point at or after from and the last before to.
func forksIn(tl []churnPoint, started, from, to time.Time) float64 {
	var first, last *churnPoint
	for i := range tl {
		at := started.Add(time.Duration(tl[i].T * float64(time.Second)))
		if first == nil && !at.Before(from) {
			first = &tl[i]
		}
		if at.Before(to) {
			last = &tl[i]
		}
	}
	if first == nil || last == nil || last.T <= first.T {
		return 0
	}
	return float64(last.Forks-first.Forks) / (last.T - first.T)
}

// churnSelfMetrics reads the receiver's per-binary work counters (by
// outcome and kind, when this build has them), samples kept over the
// window and its gauges at the end.
func churnSelfMetrics(run *churnRun, m0, m1 selfmetrics.Metrics) {
	for _, n := range selfmetrics.ReceiverNames("binary_work", counterSuffixes...) {
		kinds := m1.ByLabel(n, "kind")
		if len(kinds) == 0 {
			continue
		}
		run.BinaryWorkName = n
		run.BinaryWork = map[string]map[string]float64{}
		for outcome := range m1.ByLabel(n, "outcome") {
			for kind := range kinds {
				sel := []string{`outcome="` + outcome + `"`, `kind="` + kind + `"`}
				v1, ok := m1.Sum(n, sel...)
				if !ok {
					continue // no series for this pair
				}
				v0, _ := m0.Sum(n, sel...)
				if run.BinaryWork[outcome] == nil {
					run.BinaryWork[outcome] = map[string]float64{}
				}
				run.BinaryWork[outcome][kind] = v1 - v0
			}
		}
		break
	}
	run.BinaryWorkCPU, _ = metricDelta(m0, m1, selfmetrics.ReceiverNames("binary_work_cpu", "_seconds_total", "_total", "_seconds"))
	var name string
	if run.SamplesKept, name = metricDelta(m0, m1, selfmetrics.ReceiverNames("samples", counterSuffixes...), `outcome="kept"`); name != "" {
		run.MetricNames = append(run.MetricNames, name)
	}
	gs := append(tableGauges(&run.SymbolTables, &run.WindowSymbolTableBytes, &run.UnwindTables, &run.WindowUnwindTableBytes),
		gauge{"processes", &run.Processes, nil})
	run.MetricNames = append(run.MetricNames, readGauges(m1, gs)...)
}

// sqlTimestamp is t as a DuckDB TIMESTAMP literal (UTC).
func sqlTimestamp(t time.Time) string {
	return "TIMESTAMP '" + t.UTC().Format("2006-01-02 15:04:05") + "'"
}

// countSteadySamples asks the agent's SQL endpoint (what `hotpath sql
// --endpoint` uses) for the samples of each steady workload's service in
// the window's intervals, and the C workload's leaf functions. It waits
// until the window's last interval is stored (at most a minute).
func countSteadySamples(run *churnRun, endpoint string, interval time.Duration) error {
	ts := sqlTimestamp
	var services []string
	for _, s := range run.Steady {
		services = append(services, "'"+s.Service+"'")
	}
	stmt := fmt.Sprintf(`SELECT service_id, sum(sample_count)::BIGINT, (sum(sample_count) FILTER (WHERE build_id = ''))::BIGINT,
       count(DISTINCT timestamp)::BIGINT, max(timestamp) = %s
FROM cpu_profile_samples_local
WHERE timestamp >= %s AND timestamp < %s AND service_id IN (%s)
GROUP BY service_id`, ts(run.WindowEnd.Add(-interval)), ts(run.WindowStart), ts(run.WindowEnd), strings.Join(services, ", "))
	client := sqlquery.Client{Endpoint: endpoint}
	deadline := run.WindowEnd.Add(interval + time.Minute)
	time.Sleep(time.Until(run.WindowEnd.Add(5 * time.Second)))
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		rows, err := client.Query(ctx, stmt)
		cancel()
		if err != nil {
			return fmt.Errorf("query the agent's SQL endpoint %s: %w", endpoint, err)
		}
		complete := 0
		for _, row := range rows.Rows {
			for i := range run.Steady {
				if run.Steady[i].Service != fmt.Sprint(row[0]) {
					continue
				}
				run.Steady[i].Samples, run.Steady[i].NoBuildID = number(row[1]), number(row[2])
				run.Steady[i].Intervals = int(number(row[3]))
				if row[4] == true {
					complete++
				}
			}
		}
		if complete == len(run.Steady) || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	if err := countToolStacks(run, client, ts); err != nil {
		return err
	}
	leaves := fmt.Sprintf(`SELECT function, samples FROM top_functions('%s', %s, %s, 50)`, run.Steady[0].Service, ts(run.WindowStart), ts(run.WindowEnd))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := client.Query(ctx, leaves)
	if err != nil {
		return fmt.Errorf("query the C workload's leaf functions: %w", err)
	}
	var total float64
	got := map[string]float64{}
	for _, row := range rows.Rows {
		n := number(row[1])
		total += n
		for _, l := range steadyCLeaves {
			if strings.Contains(fmt.Sprint(row[0]), l.Function) {
				got[l.Function] += n
			}
		}
	}
	for _, l := range steadyCLeaves {
		if total > 0 {
			l.Got = 100 * got[l.Function] / total
		}
		l.Samples = total
		run.Leaves = append(run.Leaves, l)
	}
	return nil
}

// number is a number of a query result (the client keeps numbers as
// json.Number; nil is 0).
func number(v any) float64 {
	switch x := v.(type) {
	case json.Number:
		f, _ := x.Float64()
		return f
	case float64:
		return x
	case string:
		f, _ := strconv.ParseFloat(x, 64)
		return f
	}
	return 0
}

// hzRange is the frequency the receiver reported, as steps: "19 Hz from
// +22 s, 9 Hz from +43 s" ("19 Hz throughout" when it never changed).
func hzRange(r *churnRun) string {
	var steps []string
	last := -1.0
	for _, p := range r.Timeline {
		if p.Hz < 0 || p.Hz == last {
			continue
		}
		last = p.Hz
		steps = append(steps, fmt.Sprintf("%.0f Hz from +%.0f s", p.Hz, p.T))
	}
	switch len(steps) {
	case 0:
		return "not reported"
	case 1:
		return fmt.Sprintf("%.0f Hz throughout", last)
	}
	return strings.Join(steps, ", ")
}

func steadyString(r *churnRun) string {
	var parts []string
	for _, s := range r.Steady {
		parts = append(parts, fmt.Sprintf("%s %.0f of %.0f", s.Service, s.Samples, s.Expected))
	}
	return strings.Join(parts, ", ")
}
