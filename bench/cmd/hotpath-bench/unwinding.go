package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/bench/internal/benchfmt"
	"github.com/hotpath-dev/hotpath/bench/internal/procstat"
	"github.com/hotpath-dev/hotpath/internal/selfmetrics"
)

// unwindModes is the order of the runs: interleaved, so a drift in the
// machine's load does not favour one mode.
var unwindModes = []string{modeFP, modeAuto, modeAutoNoPython, modeFP, modeAuto, modeAutoNoPython}

// modeArgs are the agent flags of a mode.
func modeArgs(mode string) []string {
	if mode == modeAutoNoPython {
		return []string{"--set=receivers.ebpfprofile.unwinding=" + modeAuto, "--set=receivers.ebpfprofile.python_frames=false"}
	}
	return []string{"--set=receivers.ebpfprofile.unwinding=" + mode}
}

// unwindingResult is the agent with unwinding: auto against unwinding:
// frame_pointer on one workload that has code without frame pointers.
type unwindingResult struct {
	CPUs          int         `json:"cpus"`
	AgentConfig   string      `json:"agent_config"`
	AgentArgs     []string    `json:"agent_args"` // before the per-run unwinding=
	SteadySeconds float64     `json:"steady_seconds_requested"`
	WarmupSeconds float64     `json:"warmup_seconds"`
	Workload      []string    `json:"workload"` // the commands, as started
	NativeCFlags  string      `json:"native_cflags"`
	BPFStats      string      `json:"bpf_stats"` // how program run time was enabled
	Runs          []unwindRun `json:"runs"`
	LoadAvg       [][]float64 `json:"loadavg"` // 1/5/15 min at start and end
}

// unwindRun is one agent run in one mode.
type unwindRun struct {
	Mode          string    `json:"mode"`
	LoadAvg       []float64 `json:"loadavg_at_start"`
	TTFSMillis    float64   `json:"ttfs_ms"`
	WarmupCPU     float64   `json:"warmup_cpu_seconds"` // exec → steady window, first interval (and table loading) included
	WarmupSeconds float64   `json:"warmup_seconds"`
	Seconds       float64   `json:"steady_seconds"`
	CPUSeconds    float64   `json:"steady_cpu_seconds"`
	RSSMB         float64   `json:"rss_mb_median"`      // median of 1 s samples
	AnonMB        float64   `json:"rss_anon_mb_median"` // RssAnon, same samples
	PeakRSSMB     float64   `json:"peak_rss_mb"`
	// BPF maps the agent holds an fd for (fdinfo memlock). Unwind tables
	// are inner maps whose fds the agent closes: they are not in this sum.
	BPFMapBytes  uint64  `json:"bpf_map_bytes_fdinfo"`
	BPFMapCount  int     `json:"bpf_map_count"`
	BPFMapMetric float64 `json:"bpf_map_bytes_metric"` // otelcol_receiver_ebpfprofile_bpf_map_bytes at the end
	// Unwind tables: the receiver's gauges at the end of the window, and
	// the kernel's memlock of every inner map of the agent's unwind_tables
	// map (read through the map's ID, independent of the receiver).
	UnwindTables     float64            `json:"unwind_tables"`
	UnwindTableBytes float64            `json:"unwind_table_bytes"`
	UnwindProcesses  float64            `json:"unwind_processes"`
	KernelTables     int                `json:"unwind_tables_kernel"`
	KernelTableBytes uint64             `json:"unwind_table_bytes_kernel"`
	UnwindOverBudget float64            `json:"unwind_tables_over_budget"`
	SamplesKept      float64            `json:"samples_kept"` // self-metric deltas over the window
	SamplesIdle      float64            `json:"samples_idle"`
	SamplesLost      float64            `json:"samples_lost"`
	DWARFUnwound     float64            `json:"dwarf_unwound"`
	EndedEarly       map[string]float64 `json:"stacks_ended_early"`
	ProcessesTracked float64            `json:"processes_tracked"`
	// cpu_sample, the perf_event program, over the window (bpf_stats).
	BPFProgID    uint64    `json:"bpf_prog_id"`
	BPFRunNs     uint64    `json:"bpf_run_time_ns"`
	BPFRunCount  uint64    `json:"bpf_run_cnt"`
	WorkloadCPU  []float64 `json:"workload_cpu_seconds"` // per workload process, same order as Workload
	GuardChanges int       `json:"overhead_guard_changes"`
	MetricNames  []string  `json:"metric_names_used"`
}

// nativeSource is the workload's code without frame pointers: a qsort
// whose comparator does real work, six calls below main. Nothing is
// printed; it runs until killed.
const nativeSource = `/* hotpath-bench unwinding: native code built without frame pointers. */
#include <stdint.h>
#include <stdlib.h>

#define N 4096
static uint32_t v[N];
volatile uint32_t sink;

__attribute__((noinline, noclone)) static uint32_t mix(uint32_t x)
{
	for (uint32_t i = 0; i < 48; i++)
		x = (x ^ (x >> 15)) * 2246822519u + i;
	return x;
}

static int cmp(const void *a, const void *b)
{
	uint32_t x = mix(*(const uint32_t *)a), y = mix(*(const uint32_t *)b);
	return (x > y) - (x < y);
}

__attribute__((noinline, noclone)) void level6(uint32_t seed)
{
	for (int i = 0; i < N; i++)
		v[i] = seed = seed * 1664525u + 1013904223u;
	qsort(v, N, sizeof v[0], cmp);
	sink += v[N / 2];
}

/* Work after each call keeps it a call (no tail-call jump). */
#define LEVEL(name, next) \
	__attribute__((noinline, noclone)) void name(uint32_t seed) { next(seed * 2654435761u + 1); sink += v[0]; }
LEVEL(level5, level6)
LEVEL(level4, level5)
LEVEL(level3, level4)
LEVEL(level2, level3)
LEVEL(level1, level2)

int main(void)
{
	for (uint32_t seed = 1;; seed++)
		level1(seed);
}
`

const nativeCFlags = "-O2 -fomit-frame-pointer"

// pythonLoop is the interpreter workload: CPython spends its time in its
// own C code (no frame pointers in Debian's build).
const pythonLoop = `
def leaf(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
def mid(n):
    return leaf(n) + 1
while True:
    mid(10000)
`

// nodeLoop is the JavaScript workload: V8's compiled code, which keeps frame
// pointers but has no unwind rows, so that with unwinding: auto the kernel
// also walks V8's frames for their functions (and user space names them
// from the process's memory), and with frame_pointer it does neither.
const nodeLoop = `
function leaf(n) { let s = 0; for (let i = 0; i < n; i++) s += i * i % 7; return s; }
function mid(n) { return leaf(n) + 1; }
for (;;) mid(10000);
`

func unwindingCmd(args []string) error {
	fs := flag.NewFlagSet("unwinding", flag.ExitOnError)
	out := fs.String("out", "unwinding.json", "result file")
	af := addAgentFlags(fs)
	steady := fs.Duration("steady", 45*time.Second, "steady window per run (covers several 15 s intervals)")
	warmup := fs.Duration("warmup", 20*time.Second, "time after the ready line before the steady window (past the first interval, when tables are built and loaded)")
	python := fs.String("python", "", "python3 for the interpreter workload (default /usr/bin/python3, else python3 from PATH)")
	nodeFlag := fs.String("node", "", "node for the JavaScript workload (default /usr/bin/node, else node from PATH)")
	_ = fs.Parse(args)
	if *steady < 15*time.Second {
		return fmt.Errorf("-steady must be at least 15s")
	}
	r, err := af.newRun("unwinding")
	if err != nil {
		return err
	}
	baseArgs := r.agentArgs
	py, err := findRuntime(*python, "python3", "-python")
	if err != nil {
		return err
	}
	node, err := findRuntime(*nodeFlag, "node", "-node")
	if err != nil {
		return err
	}
	native, err := buildC(r.dir, "unwind-native", nativeSource, nil, nil)
	if err != nil {
		return err
	}
	// The modes are compared on the workload alone: other processes of the
	// host (this program, the gateway, anything else running) got unwind
	// tables built in some runs' windows and not in others, which moved
	// one run's agent CPU by 0.7 % of a core and the CPython ratio from
	// 0.49x to 3.64x between two runs of the same code (2026-11-25).
	baseArgs = append(baseArgs, "--set=receivers.ebpfprofile.include.executables=["+
		strings.Join([]string{"hotpath-burn", filepath.Base(native), filepath.Base(py) + "*", filepath.Base(node)}, ",")+"]")
	res := &unwindingResult{CPUs: runtime.NumCPU(), AgentConfig: r.agentCfg, AgentArgs: baseArgs,
		SteadySeconds: steady.Seconds(), WarmupSeconds: warmup.Seconds(), NativeCFlags: nativeCFlags}
	res.LoadAvg = append(res.LoadAvg, loadAvg())

	restore, was, err := enableBPFStats()
	if err != nil {
		return err
	}
	defer restore()
	res.BPFStats = fmt.Sprintf("sysctl kernel.bpf_stats_enabled=1 for the phase (was %s, restored after)", was)
	// An interrupted phase must not leave the kernel timing every BPF
	// program on the machine.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if s, ok := <-sigs; ok {
			restore()
			logf("unwinding: %v: kernel.bpf_stats_enabled restored to %s", s, was)
			os.Exit(1)
		}
	}()

	logf("unwinding: state and logs in %s; modes in order %v", r.dir, unwindModes)
	gw, err := r.startGateway()
	if err != nil {
		return err
	}
	defer func() { _ = gw.Stop(30 * time.Second) }()

	for i, mode := range unwindModes {
		r.agentArgs = append(append([]string(nil), baseArgs...), modeArgs(mode)...)
		run, workload, err := r.unwindRun(mode, native, py, node, *steady, *warmup)
		if err != nil {
			return fmt.Errorf("run %d (%s): %w", i+1, mode, err)
		}
		res.Workload = workload
		res.Runs = append(res.Runs, *run)
		share := 0.0
		if run.SamplesKept > 0 {
			share = 100 * run.DWARFUnwound / run.SamplesKept
		}
		logf("unwinding: run %d/%d %-14s agent %.3f %% of a core, RSS %.1f MB, BPF %.0f ns/sample, DWARF %.0f of %.0f kept samples (%.1f %%), %.0f tables (%.1f MB)",
			i+1, len(unwindModes), mode, 100*run.CPUSeconds/run.Seconds, run.RSSMB, nsPerRun(run), run.DWARFUnwound, run.SamplesKept, share,
			run.UnwindTables, run.UnwindTableBytes/1e6)
		time.Sleep(3 * time.Second) // the gateway writes the agent's last interval
	}
	res.LoadAvg = append(res.LoadAvg, loadAvg())
	return writeJSON(*out, res)
}

// unwindRun starts the workload, then the agent in r.agentArgs' mode, and
// measures one steady window.
func (r *agentRun) unwindRun(mode, native, python, node string, window, warmup time.Duration) (*unwindRun, []string, error) {
	run := &unwindRun{Mode: mode, LoadAvg: loadAvg()}
	threads := max(1, runtime.NumCPU()/2)
	cmds := []*exec.Cmd{
		exec.Command(r.burn, "-threads", fmt.Sprint(threads), "-duration", (warmup + window + 5*time.Minute).String()),
		exec.Command(native),
		exec.Command(python, "-c", pythonLoop),
		exec.Command(node, "-e", nodeLoop),
	}
	var desc []string
	var pids []int
	defer func() {
		for _, c := range cmds {
			if c.Process != nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
	}()
	for _, c := range cmds {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return nil, nil, fmt.Errorf("start workload %s: %w", c.Path, err)
		}
		pids = append(pids, c.Process.Pid)
		d := strings.Join(c.Args, " ")
		switch c.Path {
		case python:
			d = python + " -c '<busy loop: leaf() under mid(), forever>'"
		case node:
			d = node + " -e '<busy loop: leaf() under mid(), forever>'"
		}
		desc = append(desc, d)
	}
	time.Sleep(time.Second) // running before the agent looks at the machine

	a, _, ttfs, err := r.startAgent()
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = a.Stop(30 * time.Second) }()
	run.TTFSMillis = millis(ttfs)
	progID, err := cpuSampleProg(a.PID())
	if err != nil {
		return nil, nil, err
	}
	run.BPFProgID = progID
	sw, err := r.measureSteady(a, window, warmup, steadyOptions{Watch: pids})
	if err != nil {
		return nil, nil, err
	}
	for i, pid := range pids {
		// A child that exited is a zombie until waited for: no VmRSS.
		if _, err := procstat.ReadMemory(pid); err != nil {
			return nil, nil, fmt.Errorf("workload %s exited during the window: %w", desc[i], err)
		}
	}
	run.WarmupCPU, run.WarmupSeconds = sw.WarmupCPU, sw.WarmupSeconds
	run.Seconds, run.CPUSeconds = sw.Seconds, sw.CPUSeconds
	run.RSSMB, run.AnonMB, run.PeakRSSMB = benchfmt.Summarize(sw.RSS).Median, benchfmt.Summarize(sw.Anon).Median, sw.PeakRSSMB
	run.BPFMapBytes, run.BPFMapCount = sw.Maps.Memlock, sw.Maps.Count
	run.WorkloadCPU = sw.WatchedCPU
	run.GuardChanges = a.Count("overhead guard")
	run.KernelTables, run.KernelTableBytes, err = unwindTableMemory(sw.Maps.IDs)
	if err != nil {
		logf("unwinding: unwind tables in the kernel not read: %v", err)
	}
	p0, ok0 := findProg(sw.Progs0, progID)
	p1, ok1 := findProg(sw.Progs1, progID)
	if !ok0 || !ok1 {
		return nil, nil, fmt.Errorf("cpu_sample (prog id %d) not among the agent's fds at both ends of the window", progID)
	}
	run.BPFRunNs, run.BPFRunCount = p1.RunTimeNs-p0.RunTimeNs, p1.RunCount-p0.RunCount
	if run.BPFRunCount == 0 {
		return nil, nil, fmt.Errorf("cpu_sample ran 0 times in the window per its fdinfo (run_cnt): is kernel.bpf_stats_enabled 1?")
	}
	unwindSelfMetrics(run, sw.M0, sw.M1)
	return run, desc, nil
}

// unwindSelfMetrics takes the receiver's counters (deltas over the window)
// and gauges (at its end). A counter the agent does not export reads -1.
func unwindSelfMetrics(run *unwindRun, m0, m1 selfmetrics.Metrics) {
	delta := func(name string, labels ...string) float64 {
		d, found := metricDelta(m0, m1, selfmetrics.ReceiverNames(name, counterSuffixes...), labels...)
		if found != "" {
			run.MetricNames = append(run.MetricNames, found)
		}
		return d
	}
	gauge := func(name string) float64 {
		v, found, ok := m1.Receiver(name, []string{"_bytes"})
		if !ok {
			return 0 // frame_pointer: the unwinder is not running and records nothing
		}
		run.MetricNames = append(run.MetricNames, found)
		return v
	}
	run.SamplesKept = delta("samples", `outcome="kept"`)
	run.SamplesIdle = delta("samples", `outcome="idle"`)
	run.SamplesLost = delta("samples_lost")
	run.DWARFUnwound = delta("dwarf_unwound")
	run.EndedEarly = map[string]float64{}
	for _, n := range selfmetrics.ReceiverNames("stacks_ended_early", counterSuffixes...) {
		by1 := m1.ByLabel(n, "reason")
		if len(by1) == 0 {
			continue
		}
		run.MetricNames = append(run.MetricNames, n)
		by0 := m0.ByLabel(n, "reason")
		for reason, v := range by1 {
			run.EndedEarly[reason] = v - by0[reason]
		}
		break
	}
	run.BPFMapMetric = gauge("bpf_map_bytes")
	run.UnwindTables = gauge("unwind_tables")
	run.UnwindTableBytes = gauge("unwind_table_bytes")
	run.UnwindProcesses = gauge("unwind_processes")
	run.UnwindOverBudget = gauge("unwind_tables_over_budget")
	run.ProcessesTracked = gauge("processes")
}

// nsPerRun is cpu_sample's mean run time per sample in the window.
func nsPerRun(r *unwindRun) float64 {
	if r.BPFRunCount == 0 {
		return 0
	}
	return float64(r.BPFRunNs) / float64(r.BPFRunCount)
}

func findProg(ps []procstat.BPFProgram, id uint64) (procstat.BPFProgram, bool) {
	for _, p := range ps {
		if p.ID == id {
			return p, true
		}
	}
	return procstat.BPFProgram{}, false
}

// cpuSampleProg is the ID of the agent's perf_event program cpu_sample
// (fdinfo has no names: each program's is read through its ID).
func cpuSampleProg(pid int) (uint64, error) {
	progs, err := procstat.ReadBPFPrograms(pid)
	if err != nil {
		return 0, err
	}
	var seen []string
	for _, p := range progs {
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(p.ID))
		if err != nil {
			continue
		}
		info, err := prog.Info()
		prog.Close()
		if err != nil {
			continue
		}
		if info.Name == "cpu_sample" {
			return p.ID, nil
		}
		seen = append(seen, info.Name)
	}
	return 0, fmt.Errorf("the agent (pid %d) holds no BPF program named cpu_sample (it holds %v)", pid, seen)
}

// unwindTableMemory finds the agent's unwind_tables map among its map IDs
// and sums the kernel's memlock of the tables (inner maps) it holds now.
// No such map (an agent without the DWARF unwinder) is 0 tables.
func unwindTableMemory(mapIDs []uint64) (tables int, bytes uint64, err error) {
	for _, id := range mapIDs {
		m, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			continue
		}
		info, err := m.Info()
		if err != nil || info.Name != "unwind_tables" {
			m.Close()
			continue
		}
		defer m.Close()
		var key, inner uint32 // from user space, a map-in-map's value is the inner map's ID
		it := m.Iterate()
		for it.Next(&key, &inner) {
			im, err := ebpf.NewMapFromID(ebpf.MapID(inner))
			if err != nil {
				continue // evicted meanwhile
			}
			ii, err := im.Info()
			im.Close()
			if err != nil {
				continue
			}
			if ml, ok := ii.Memlock(); ok {
				tables++
				bytes += ml
			}
		}
		return tables, bytes, it.Err()
	}
	return 0, 0, nil
}

const bpfStatsSysctl = "/proc/sys/kernel/bpf_stats_enabled"

// enableBPFStats turns on the kernel's per-program run time accounting and
// returns how to put the old value back (safe to call more than once).
func enableBPFStats() (restore func(), was string, err error) {
	old, err := os.ReadFile(bpfStatsSysctl)
	if err != nil {
		return nil, "", fmt.Errorf("read %s (needs Linux 5.8): %w", bpfStatsSysctl, err)
	}
	was = strings.TrimSpace(string(old))
	if err := os.WriteFile(bpfStatsSysctl, []byte("1\n"), 0o644); err != nil {
		return nil, "", fmt.Errorf("sysctl kernel.bpf_stats_enabled=1: %w", err)
	}
	restore = func() {
		if err := os.WriteFile(bpfStatsSysctl, []byte(was+"\n"), 0o644); err != nil {
			logf("unwinding: could not restore kernel.bpf_stats_enabled=%s: %v", was, err)
		}
	}
	return restore, was, nil
}

// findRuntime returns flagged, else the distribution's /usr/bin/name (what
// runs in production on Debian, not a version manager's shim), else name
// from PATH.
func findRuntime(flagged, name, flag string) (string, error) {
	if flagged != "" {
		return flagged, nil
	}
	if _, err := os.Stat("/usr/bin/" + name); err == nil {
		return "/usr/bin/" + name, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("no %s for the workload (%s)", name, flag)
	}
	return p, nil
}

// buildC writes source to dir/name.c and compiles it with nativeCFlags
// (no frame pointers) into dir/name; write writes the source (nil:
// os.WriteFile), run runs the compiler (nil: CombinedOutput).
func buildC(dir, name, source string, write func(path string, data []byte) error, run func(*exec.Cmd) ([]byte, error)) (string, error) {
	src := filepath.Join(dir, name+".c")
	bin := filepath.Join(dir, name)
	if write == nil {
		write = func(p string, data []byte) error { return os.WriteFile(p, data, 0o644) }
	}
	if err := write(src, []byte(source)); err != nil {
		return "", err
	}
	args := append(strings.Fields(nativeCFlags), "-o", bin, src)
	if run == nil {
		run = (*exec.Cmd).CombinedOutput
	}
	if out, err := run(exec.Command("gcc", args...)); err != nil {
		return "", fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}
