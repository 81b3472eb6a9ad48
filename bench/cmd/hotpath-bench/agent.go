package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hotpath-dev/hotpath/bench/internal/collectorproc"
	"github.com/hotpath-dev/hotpath/bench/internal/filecopy"
	"github.com/hotpath-dev/hotpath/bench/internal/procstat"
	"github.com/hotpath-dev/hotpath/internal/selfmetrics"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

// readyLine is what the receiver logs once its BPF programs sample every CPU.
const readyLine = "sampling every CPU"

// collectorReady is what the collector logs once every component started.
const collectorReady = "Everything is ready"

var mapBytesRe = regexp.MustCompile(`"bpf_map_bytes":\s*(\d+)`)

// agentResult is everything measured on the real collector.
type agentResult struct {
	CPUs          int    `json:"cpus"`
	AgentConfig   string `json:"agent_config"`
	GatewayConfig string `json:"gateway_config"`

	// Steady phase: the agent runs SteadySeconds while the workload loads
	// every core; CPU and memory are read from /proc.
	SteadySeconds    float64   `json:"steady_seconds"`
	SteadyCPUSeconds float64   `json:"steady_cpu_seconds"`
	StartupCPU       float64   `json:"startup_cpu_seconds"` // from exec to the ready line
	WarmupCPU        float64   `json:"warmup_cpu_seconds"`  // from exec to the steady window (first interval included)
	WarmupSeconds    float64   `json:"warmup_seconds"`
	RSSSamples       []float64 `json:"rss_mb_samples"`      // once a second during the steady phase
	AnonSamples      []float64 `json:"rss_anon_mb_samples"` // RssAnon, same times
	FileSamples      []float64 `json:"rss_file_mb_samples"` // RssFile, same times
	PeakRSSMB        float64   `json:"peak_rss_mb"`         // VmHWM at the end
	BPFMapsLogged    uint64    `json:"bpf_map_bytes_logged"`
	BPFMapsFdinfo    uint64    `json:"bpf_map_bytes_fdinfo"`
	BPFMapCount      int       `json:"bpf_map_count"`
	SamplesKept      float64   `json:"samples_kept"` // receiver self-metric delta over the steady phase
	SamplesLost      float64   `json:"samples_lost"`
	SymbolizeSum     float64   `json:"symbolize_seconds_sum"` // self-metric delta
	SymbolizeCount   float64   `json:"symbolize_count"`
	Processes        float64   `json:"processes_tracked"`
	MetricNames      []string  `json:"metric_names_used"`
	GatewayCPU       float64   `json:"gateway_cpu_seconds"` // whole run, for reference
	AgentArgs        []string  `json:"agent_args"`
	GuardChanges     int       `json:"overhead_guard_changes"` // "overhead guard" log lines in the steady run
	PerfSeconds      float64   `json:"perf_seconds"`
	PerfCPUSeconds   float64   `json:"perf_cpu_seconds"` // cpu-clock event count (ns) perf attributes to the agent
	PerfHz           int       `json:"perf_hz"`
	PerfTop          string    `json:"perf_top"` // perf report, by symbol`

	// Time to first sample, once per agent start.
	TTFSMillis []float64 `json:"ttfs_ms"`

	// Slowdown: workload throughput without (A) and with (B) the agent,
	// interleaved A B B A ... so drift hits both arms alike. B arms start
	// once the agent has emitted its first interval.
	ArmSeconds float64     `json:"arm_seconds"`
	Pairs      []abPair    `json:"pairs"`
	ArmCPU     []float64   `json:"agent_cpu_percent_in_b_arms"`
	LoadAvg    [][]float64 `json:"loadavg"` // 1/5/15 min at start and end
}

type abPair struct {
	Without float64 `json:"without_ops_per_sec"`
	With    float64 `json:"with_ops_per_sec"`
}

type agentRun struct {
	collector, burn, agentCfg, gatewayCfg, dir string
	gatewayBin                                 string // a copy of collector, see newRun
	env                                        []string
	metricsURL                                 string
	starts                                     int
	agentArgs                                  []string // extra collector flags (--set ...)
	perfFor                                    time.Duration
}

// multiFlag is a repeatable string flag; the first use replaces the default.
type multiFlag struct {
	vals []string
	set  bool
}

func (m *multiFlag) String() string { return strings.Join(m.vals, ",") }

func (m *multiFlag) Set(v string) error {
	if !m.set {
		m.vals = nil
	}
	m.set = true
	m.vals = append(m.vals, v)
	return nil
}

// agentFlags are the flags every phase that runs the real collector has.
type agentFlags struct {
	collector, burn, agentCfg, gatewayCfg, dir *string
	sets                                       multiFlag
}

func addAgentFlags(fs *flag.FlagSet) *agentFlags {
	f := &agentFlags{
		collector:  fs.String("collector", "bin/otelcol-hotpath", "collector binary"),
		burn:       fs.String("burn", "bin/hotpath-burn", "workload binary"),
		agentCfg:   fs.String("agent-config", "distributions/agent/config.yaml", "agent configuration (the shipped one)"),
		gatewayCfg: fs.String("gateway-config", "distributions/gateway/config.yaml", "gateway configuration the agent exports to over loopback"),
		dir:        fs.String("dir", "", "state and logs (default: a new temporary directory)"),
		sets:       multiFlag{vals: []string{"receivers.ebpfprofile.max_cpu_percent=0"}},
	}
	fs.Var(&f.sets, "set", "collector --set override for the agent, repeatable (default turns the overhead guard off, so the figures are at the configured 19 Hz; -set '' keeps the shipped config as is)")
	return f
}

// newRun makes the state directory and gives every endpoint of both
// configurations a free loopback port.
func (f *agentFlags) newRun(phase string) (*agentRun, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("must run as root: the agent loads eBPF programs")
	}
	dir := *f.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "hotpath-bench-"+phase+"-")
		if err != nil {
			return nil, err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	env, err := stateEnv(dir, *f.agentCfg, *f.gatewayCfg)
	if err != nil {
		return nil, err
	}
	metricsPort, ok := envValue(env, "HOTPATH_AGENT_METRICS")
	if !ok {
		return nil, fmt.Errorf("%s has no ${env:HOTPATH_AGENT_METRICS} for its Prometheus port", *f.agentCfg)
	}
	// The gateway runs from a copy of the collector binary, as it would
	// from its own machine's: two processes of one file share its cached
	// pages, and the kernel does not reclaim or drop a page another
	// process maps, so the large folios a build leaves in the cache stayed
	// in the agent's RSS, mapped whole at each fault (selfmem's
	// ReadExecutableByPage; 4-16 MB of 2 MB folios in each of the two).
	gatewayBin := filepath.Join(dir, "otelcol-hotpath-gateway")
	if err := filecopy.Copy(*f.collector, gatewayBin, 0o755); err != nil {
		return nil, fmt.Errorf("the gateway's copy of the collector: %w", err)
	}
	r := &agentRun{collector: *f.collector, burn: *f.burn, agentCfg: *f.agentCfg, gatewayCfg: *f.gatewayCfg, dir: dir,
		gatewayBin: gatewayBin, metricsURL: fmt.Sprintf("http://127.0.0.1:%s/metrics", metricsPort), env: env}
	for _, s := range f.sets.vals {
		if s != "" {
			r.agentArgs = append(r.agentArgs, "--set="+s)
		}
	}
	return r, nil
}

// startGateway starts the gateway the agent exports to and waits until it
// is ready; the caller stops it.
func (r *agentRun) startGateway() (*collectorproc.Process, error) {
	gw, err := collectorproc.Start("gateway", r.gatewayBin, []string{"--config", r.gatewayCfg}, r.env, filepath.Join(r.dir, "gateway.log"))
	if err != nil {
		return nil, err
	}
	if _, _, err := gw.WaitFor(collectorReady, 60*time.Second); err != nil {
		_ = gw.Stop(10 * time.Second)
		return nil, err
	}
	return gw, nil
}

func agentCmd(args []string) error {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	out := fs.String("out", "agent.json", "result file")
	af := addAgentFlags(fs)
	steady := fs.Duration("steady", 60*time.Second, "steady-state measurement window (covers several 15 s intervals)")
	warmup := fs.Duration("warmup", 20*time.Second, "time after the ready line before the steady window starts (past the first, cold interval: symbol tables of every running binary load then)")
	pairs := fs.Int("pairs", 4, "A/B pairs for the slowdown")
	arm := fs.Duration("arm", 15*time.Second, "workload run per arm (at least one 15 s interval, so B arms include the agent's interval work)")
	perfFor := fs.Duration("perf", 20*time.Second, "after the steady window, record the agent with `perf record -g` this long to show where its CPU goes (0: off; skipped without perf)")
	_ = fs.Parse(args)
	if *pairs < 1 || *steady < 15*time.Second || *arm < time.Second {
		return fmt.Errorf("-pairs must be at least 1, -steady at least 15s, -arm at least 1s")
	}
	r, err := af.newRun("agent")
	if err != nil {
		return err
	}
	r.perfFor = *perfFor
	res := &agentResult{CPUs: runtime.NumCPU(), AgentConfig: r.agentCfg, GatewayConfig: r.gatewayCfg, ArmSeconds: arm.Seconds()}
	res.LoadAvg = append(res.LoadAvg, loadAvg())

	logf("agent: state and logs in %s", r.dir)
	gw, err := r.startGateway()
	if err != nil {
		return err
	}
	defer func() { _ = gw.Stop(30 * time.Second) }()

	if err := r.steady(res, *steady, *warmup); err != nil {
		return err
	}
	if err := r.slowdown(res, *pairs, *arm); err != nil {
		return err
	}
	if cpu, err := procstat.CPUTime(gw.PID()); err == nil {
		res.GatewayCPU = cpu.Seconds()
	}
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	return writeJSON(*out, res)
}

// startAgent starts the agent with r.agentArgs and waits for its ready
// line; the time to it (ttfs) is one time-to-first-sample figure.
func (r *agentRun) startAgent() (a *collectorproc.Process, ready collectorproc.Line, ttfs time.Duration, err error) {
	r.starts++
	log := filepath.Join(r.dir, fmt.Sprintf("agent-%d.log", r.starts))
	a, err = collectorproc.Start("agent", r.collector, append([]string{"--config", r.agentCfg}, r.agentArgs...), r.env, log)
	if err != nil {
		return nil, collectorproc.Line{}, 0, err
	}
	ready, ttfs, err = a.WaitFor(readyLine, 60*time.Second)
	if err == nil {
		// The receiver samples from here, but another component may still
		// fail to start and take the collector down.
		_, _, err = a.WaitFor(collectorReady, 60*time.Second)
	}
	if err != nil {
		_ = a.Stop(10 * time.Second)
		return nil, ready, 0, err
	}
	return a, ready, ttfs, nil
}

// loggedMapBytes is the bpf_map_bytes field of the receiver's ready line.
func loggedMapBytes(ready collectorproc.Line) uint64 {
	if m := mapBytesRe.FindStringSubmatch(ready.Text); m != nil {
		v, _ := strconv.ParseUint(m[1], 10, 64)
		return v
	}
	return 0
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// steadyWindow is one measured window of a running agent: its CPU and
// memory from /proc, its BPF maps and programs, its self-metrics at both
// ends, and the CPU of other processes watched over the same window.
type steadyWindow struct {
	Start                    time.Time // the window's start (the aligned boundary when aligned)
	WarmupCPU, WarmupSeconds float64   // agent CPU and wall time from exec to the window
	Seconds, CPUSeconds      float64
	RSS, Anon, File          []float64 // MB, once a second
	PeakRSSMB                float64   // VmHWM at the end
	Maps                     procstat.BPFMaps
	M0, M1                   selfmetrics.Metrics
	Progs0, Progs1           []procstat.BPFProgram
	WatchedCPU               []float64 // seconds, per watched pid
}

// steadyOptions are what a phase adds to a measured window.
type steadyOptions struct {
	// Watch are other pids whose CPU over the same window is recorded (0
	// for one that exited).
	Watch []int
	// Align starts the window on the next multiple of Align on the wall
	// clock (the agent's intervals and windows are aligned so), so that
	// what the agent stored per interval covers the window exactly.
	Align time.Duration
}

// measureSteady waits warmup and the agent's first emitted interval, then
// samples the agent for window.
func (r *agentRun) measureSteady(a *collectorproc.Process, window, warmup time.Duration, opt steadyOptions) (*steadyWindow, error) {
	pid := a.PID()
	busyEveryCPU(time.Second)
	time.Sleep(warmup)
	if err := r.waitFirstInterval(60 * time.Second); err != nil {
		return nil, err
	}
	if opt.Align > 0 {
		time.Sleep(time.Until(time.Now().Truncate(opt.Align).Add(opt.Align)))
	}
	cpuOf := func(pids []int) []time.Duration {
		out := make([]time.Duration, len(pids))
		for i, p := range pids {
			out[i], _ = procstat.CPUTime(p)
		}
		return out
	}
	sw := &steadyWindow{}
	var err error
	if sw.M0, err = selfmetrics.Scrape(r.metricsURL); err != nil {
		return nil, err
	}
	w0 := cpuOf(opt.Watch)
	sw.Progs0, _ = procstat.ReadBPFPrograms(pid)
	c0, err := procstat.CPUTime(pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	sw.Start = t0
	if opt.Align > 0 {
		sw.Start = t0.Truncate(opt.Align)
	}
	end := sw.Start.Add(window)
	sw.WarmupCPU, sw.WarmupSeconds = c0.Seconds(), t0.Sub(a.Started).Seconds()
	for now := time.Now(); now.Before(end); now = time.Now() {
		time.Sleep(min(time.Second, end.Sub(now)))
		mem, err := procstat.ReadMemory(pid)
		if err != nil {
			return nil, fmt.Errorf("agent died during the steady window: %w\n%s", err, a.Tail(15))
		}
		sw.RSS = append(sw.RSS, float64(mem.RSS)/1e6)
		sw.Anon = append(sw.Anon, float64(mem.Anon)/1e6)
		sw.File = append(sw.File, float64(mem.File)/1e6)
	}
	// The window ends here: the watched processes first, as at its start.
	for i, c := range cpuOf(opt.Watch) {
		sw.WatchedCPU = append(sw.WatchedCPU, (c - w0[i]).Seconds())
	}
	c1, err := procstat.CPUTime(pid)
	if err != nil {
		return nil, err
	}
	sw.Progs1, _ = procstat.ReadBPFPrograms(pid)
	sw.Seconds = time.Since(t0).Seconds()
	sw.CPUSeconds = (c1 - c0).Seconds()
	if sw.M1, err = selfmetrics.Scrape(r.metricsURL); err != nil {
		return nil, err
	}
	mem, err := procstat.ReadMemory(pid)
	if err != nil {
		return nil, err
	}
	sw.PeakRSSMB = float64(mem.Peak) / 1e6
	if sw.Maps, err = procstat.ReadBPFMaps(pid); err != nil {
		return nil, err
	}
	return sw, nil
}

// steady runs the agent for a measured window while the workload loads
// every core.
func (r *agentRun) steady(res *agentResult, window, warmup time.Duration) error {
	total := warmup + window + 30*time.Second
	w := exec.Command(r.burn, "-duration", total.String())
	if err := w.Start(); err != nil {
		return fmt.Errorf("start workload: %w", err)
	}
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()

	a, line, ttfs, err := r.startAgent()
	if err != nil {
		return err
	}
	defer func() { _ = a.Stop(30 * time.Second) }()
	res.TTFSMillis = append(res.TTFSMillis, millis(ttfs))
	res.BPFMapsLogged = loggedMapBytes(line)
	pid := a.PID()
	if cpu, err := procstat.CPUTime(pid); err == nil {
		res.StartupCPU = cpu.Seconds()
	}
	logf("agent: ready after %.0f ms; steady window of %s under load", res.TTFSMillis[0], window)
	sw, err := r.measureSteady(a, window, warmup, steadyOptions{})
	if err != nil {
		return err
	}
	res.WarmupCPU, res.WarmupSeconds = sw.WarmupCPU, sw.WarmupSeconds
	res.SteadySeconds, res.SteadyCPUSeconds = sw.Seconds, sw.CPUSeconds
	res.RSSSamples, res.AnonSamples, res.FileSamples = sw.RSS, sw.Anon, sw.File
	res.PeakRSSMB = sw.PeakRSSMB
	res.BPFMapsFdinfo, res.BPFMapCount = sw.Maps.Memlock, sw.Maps.Count
	r.selfMetrics(res, sw.M0, sw.M1)
	res.AgentArgs = r.agentArgs
	res.GuardChanges = a.Count("overhead guard")
	if r.perfFor > 0 {
		if err := r.perfProfile(res, pid); err != nil {
			logf("agent: no perf profile: %v", err)
		}
	}
	logf("agent: %.2f s CPU in %.1f s wall (%.2f%% of one core), RSS %.1f MB, peak %.1f MB",
		res.SteadyCPUSeconds, res.SteadySeconds, 100*res.SteadyCPUSeconds/res.SteadySeconds, res.RSSSamples[len(res.RSSSamples)-1], res.PeakRSSMB)
	return nil
}

// perfProfile records the agent alone with perf (cpu-clock, call graphs)
// and keeps the top of the report: where its CPU goes, and a second,
// independent count of its CPU time (samples ÷ frequency).
func (r *agentRun) perfProfile(res *agentResult, pid int) error {
	perf, err := exec.LookPath("perf")
	if err != nil {
		return err
	}
	const hz = 499
	data := filepath.Join(r.dir, "agent.perf.data")
	rec := exec.Command(perf, "record", "-q", "-e", "cpu-clock", "-F", strconv.Itoa(hz), "-g", "-p", strconv.Itoa(pid), "-o", data, "--", "sleep", strconv.Itoa(int(r.perfFor.Seconds())))
	if out, err := rec.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %v: %s", err, out)
	}
	out, err := exec.Command(perf, "report", "-i", data, "--stdio", "--no-children", "--sort", "dso,sym", "-g", "none", "--percent-limit", "2").Output()
	if err != nil {
		return fmt.Errorf("perf report: %w", err)
	}
	res.PerfSeconds, res.PerfHz = r.perfFor.Seconds(), hz
	var top []string
	for _, l := range strings.Split(string(out), "\n") {
		if m := perfEventsRe.FindStringSubmatch(l); m != nil {
			ns, _ := strconv.ParseFloat(m[1], 64)
			res.PerfCPUSeconds = ns / 1e9
		}
		if strings.HasPrefix(l, "#") || strings.TrimSpace(l) == "" {
			continue
		}
		top = append(top, l)
		if len(top) == 25 {
			break
		}
	}
	res.PerfTop = strings.Join(top, "\n")
	return nil
}

// perfEventsRe is the report's total; for cpu-clock it is in nanoseconds.
var perfEventsRe = regexp.MustCompile(`^# Event count \(approx\.\): (\d+)`)

// Suffixes the Prometheus exporter may append to a receiver counter, and
// to the count of the symbolization histogram (see
// selfmetrics.ReceiverNames).
var (
	counterSuffixes        = []string{"_total"}
	symbolizeCountSuffixes = []string{"_seconds_count", "_count"}
)

// metricDelta is the growth of the first of names present in m1 (names
// differ by exporter version in their unit and _total suffixes), or -1
// when none is; name is the one read.
func metricDelta(m0, m1 selfmetrics.Metrics, names []string, labels ...string) (delta float64, name string) {
	v1, name, ok := m1.First(names, labels...)
	if !ok {
		return -1, ""
	}
	v0, _ := m0.Sum(name, labels...)
	return v1 - v0, name
}

// selfMetrics takes the deltas of the receiver's own counters over the
// steady window; names are tried with and without the unit suffixes the
// Prometheus exporter adds.
func (r *agentRun) selfMetrics(res *agentResult, m0, m1 selfmetrics.Metrics) {
	delta := func(names []string, labels ...string) float64 {
		d, name := metricDelta(m0, m1, names, labels...)
		if name != "" {
			res.MetricNames = append(res.MetricNames, name)
		}
		return d
	}
	res.SamplesKept = delta(selfmetrics.ReceiverNames("samples", counterSuffixes...), `outcome="kept"`)
	res.SamplesLost = delta(selfmetrics.ReceiverNames("samples_lost", counterSuffixes...))
	res.SymbolizeSum = delta(selfmetrics.ReceiverNames("symbolize_duration", "_seconds_sum", "_sum"))
	res.SymbolizeCount = delta(selfmetrics.ReceiverNames("symbolize_duration", symbolizeCountSuffixes...))
	if v, name, ok := m1.Receiver("processes", nil); ok {
		res.Processes = v
		res.MetricNames = append(res.MetricNames, name)
	}
}

// slowdown runs the workload alone (A) and with the agent (B) in the order
// A B, B A, A B ... and records throughput per arm.
func (r *agentRun) slowdown(res *agentResult, pairs int, arm time.Duration) error {
	for i := 0; i < pairs; i++ {
		var p abPair
		order := []bool{false, true}
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, with := range order {
			ops, err := r.arm(res, with, arm)
			if err != nil {
				return err
			}
			if with {
				p.With = ops
			} else {
				p.Without = ops
			}
		}
		res.Pairs = append(res.Pairs, p)
		logf("agent: pair %d/%d: without %.0f ops/s, with %.0f ops/s (ratio %.3f)", i+1, pairs, p.Without, p.With, p.With/p.Without)
	}
	return nil
}

func (r *agentRun) arm(res *agentResult, withAgent bool, d time.Duration) (float64, error) {
	var a *collectorproc.Process
	if withAgent {
		var err error
		var ttfs time.Duration
		if a, _, ttfs, err = r.startAgent(); err != nil {
			return 0, err
		}
		res.TTFSMillis = append(res.TTFSMillis, millis(ttfs))
		defer func() {
			_ = a.Stop(30 * time.Second)
			// The agent flushes its last interval to the gateway on the
			// way out; let the gateway write it before the next arm.
			time.Sleep(3 * time.Second)
		}()
		// An always-on agent is past its first, cold interval (symbol
		// tables of every running process); wait for it, so the arm sees
		// the steady cost, interval work included.
		if err := r.waitFirstInterval(60 * time.Second); err != nil {
			return 0, err
		}
	}
	var c0 time.Duration
	if a != nil {
		c0, _ = procstat.CPUTime(a.PID())
	}
	t0 := time.Now()
	outb, err := exec.Command(r.burn, "-duration", d.String()).Output()
	if err != nil {
		return 0, fmt.Errorf("workload: %w", err)
	}
	if a != nil {
		if c1, err := procstat.CPUTime(a.PID()); err == nil {
			res.ArmCPU = append(res.ArmCPU, 100*(c1-c0).Seconds()/time.Since(t0).Seconds())
		}
	}
	var w struct {
		OpsPerSec float64 `json:"ops_per_sec"`
	}
	if err := json.Unmarshal(outb, &w); err != nil || w.OpsPerSec <= 0 {
		return 0, fmt.Errorf("workload output %q: %v", outb, err)
	}
	return w.OpsPerSec, nil
}

// envRef is a configuration's ${env:HOTPATH_X:-default} reference.
var envRef = regexp.MustCompile(`\$\{env:(HOTPATH_[A-Z0-9_]+):-([^}]*)\}`)

// stateEnv points every HOTPATH_* variable the two configurations read at
// this run: the state directory, and a free loopback port for every
// endpoint or port (the machine is shared: the defaults may be taken, by a
// `make run` for instance). The agent's gateway endpoint is the gateway's
// gRPC listener.
func stateEnv(dir string, configs ...string) ([]string, error) {
	vals := map[string]string{}
	var order []string
	for _, c := range configs {
		raw, err := os.ReadFile(c)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", c, err)
		}
		for _, m := range envRef.FindAllStringSubmatch(string(raw), -1) {
			if _, seen := vals[m[1]]; !seen {
				vals[m[1]] = m[2]
				order = append(order, m[1])
			}
		}
	}
	hostPort := regexp.MustCompile(`^(127\.0\.0\.1|localhost):\d+$`)
	portOnly := regexp.MustCompile(`^\d+$`)
	needPort := 0
	for _, k := range order {
		if k != "HOTPATH_GATEWAY_ENDPOINT" && (hostPort.MatchString(vals[k]) || portOnly.MatchString(vals[k])) {
			needPort++
		}
	}
	// Below the ephemeral range, none twice (testport.Pick): a port a
	// listen on port 0 gave could be taken by an outgoing connection
	// before the collector binds it.
	ports := make([]int, needPort)
	for i := range ports {
		port, err := testport.Pick()
		if err != nil {
			return nil, err
		}
		ports[i] = port
	}
	var env []string
	for _, k := range order {
		def := vals[k]
		var v string
		switch {
		case k == "HOTPATH_STATE_DIR":
			v = dir
		case k == "HOTPATH_GATEWAY_ENDPOINT":
			continue // set below, from the gateway's listener
		case hostPort.MatchString(def):
			v, ports = "127.0.0.1:"+strconv.Itoa(ports[0]), ports[1:]
		case portOnly.MatchString(def):
			v, ports = strconv.Itoa(ports[0]), ports[1:]
		default:
			continue // not a place or a port: the default stands
		}
		env = append(env, k+"="+v)
	}
	if grpc, ok := envValue(env, "HOTPATH_GATEWAY_GRPC"); ok {
		env = append(env, "HOTPATH_GATEWAY_ENDPOINT="+grpc)
	}
	return env, nil
}

func envValue(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// waitFirstInterval polls the agent's self-metrics until it has
// symbolized (and so emitted) its first interval.
func (r *agentRun) waitFirstInterval(timeout time.Duration) error {
	names := selfmetrics.ReceiverNames("symbolize_duration", symbolizeCountSuffixes...)
	deadline := time.Now().Add(timeout)
	for {
		if m, err := selfmetrics.Scrape(r.metricsURL); err == nil {
			if n, _, ok := m.First(names); ok && n >= 1 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent reported no symbolized interval within %s (%s)", timeout, r.metricsURL)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func loadAvg() []float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	var a, b, c float64
	if _, err := fmt.Sscanf(string(raw), "%f %f %f", &a, &b, &c); err != nil {
		return nil
	}
	return []float64{a, b, c}
}

// busyEveryCPU keeps this process running on every CPU for d, so that the
// agent samples it, and builds its symbol and unwind tables, in the
// warm-up. The bench is a Go binary with DuckDB linked in, whose tables
// cost the agent about half a second of CPU; it is otherwise sampled only
// when it wakes up, and where its first sample fell (in the warm-up or in
// the window) decided a churn run's figure (docs/performance-history.md). At 19 Hz
// a second on each CPU is 19 samples per CPU, and about half that when the
// phase's workloads share the CPUs: missing them all is unlikely.
func busyEveryCPU(d time.Duration) {
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
			}
		}()
	}
	wg.Wait()
}
