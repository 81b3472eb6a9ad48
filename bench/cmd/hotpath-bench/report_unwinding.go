package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hotpath-dev/hotpath/bench/internal/benchfmt"
)

// The modes of the unwinding phase, in report order: the two values of
// receivers.ebpfprofile.unwinding, and auto without the CPython frame walk
// (python_frames: false), the native-only figure the walk is held to.
const (
	modeFP           = "frame_pointer"
	modeAuto         = "auto"
	modeAutoNoPython = "auto_no_python"
)

// pythonWalkGoal: agent CPU with the CPython walk at most this many times
// the native-only figure (issue 18).
const pythonWalkGoal = 1.5

// unwindMedian is the median over the runs of one mode of f.
func unwindMedian(res *unwindingResult, mode string, f func(*unwindRun) float64) benchfmt.Summary {
	var xs []float64
	for i := range res.Runs {
		if res.Runs[i].Mode == mode {
			xs = append(xs, f(&res.Runs[i]))
		}
	}
	return benchfmt.Summarize(xs)
}

func runCPU(r *unwindRun) float64 { return 100 * r.CPUSeconds / r.Seconds }

// runBPFCPU is cpu_sample's run time as % of one core: charged to the
// sampled processes, not to the agent.
func runBPFCPU(r *unwindRun) float64 { return 100 * float64(r.BPFRunNs) / 1e9 / r.Seconds }

func runDWARFShare(r *unwindRun) float64 {
	if r.SamplesKept <= 0 {
		return 0
	}
	return 100 * r.DWARFUnwound / r.SamplesKept
}

// runNoFPShare is the part of the kept samples the workload without frame
// pointers (the C program and python, Workload[1:3]) should account for:
// their CPU time × 19 Hz ÷ samples kept.
func runNoFPShare(r *unwindRun) float64 {
	if r.SamplesKept <= 0 || len(r.WorkloadCPU) < 3 {
		return 0
	}
	return 100 * (r.WorkloadCPU[1] + r.WorkloadCPU[2]) * 19 / r.SamplesKept
}

// unwindingRows states the agent goals per mode, as the agent phase does.
func unwindingRows(res *unwindingResult) []row {
	var rows []row
	for _, mode := range []string{modeFP, modeAuto} {
		cpu := unwindMedian(res, mode, runCPU)
		rss := unwindMedian(res, mode, func(r *unwindRun) float64 { return r.RSSMB })
		if cpu.N == 0 {
			rows = append(rows, row{Figure: "unwinding: " + mode, Measured: "no run in this mode", Status: "ERROR"})
			continue
		}
		how := fmt.Sprintf("utime+stime of the agent (/proc/PID/stat) over %.0f s windows, unwinding: %s, while hotpath-burn (half the CPUs), a C program built with %s, a python3 loop and a node loop run; %d runs interleaved with the other modes",
			res.SteadySeconds, mode, res.NativeCFlags, cpu.N)
		rows = append(rows,
			row{fmt.Sprintf("agent CPU, %% of one core (19 Hz, unwinding: %s, code without frame pointers)", mode), "< 1 %", "≤ 0.25 %",
				fmt.Sprintf("%.3f %% median of %d runs [%.3f, %.3f]", cpu.Median, cpu.N, cpu.Min, cpu.Max), verdict(cpu.Median, 0.25, true), how},
			row{fmt.Sprintf("agent RSS, steady (unwinding: %s)", mode), "—", "≤ 30 MB",
				fmt.Sprintf("%.1f MB median of %d runs [%.1f, %.1f]", rss.Median, rss.N, rss.Min, rss.Max), verdict(rss.Median, 30, true),
				"VmRSS from /proc/PID/status once a second in each window; median per run, then over the runs"},
		)
	}
	with, without := unwindMedian(res, modeAuto, runCPU), unwindMedian(res, modeAutoNoPython, runCPU)
	if with.N == 0 || without.N == 0 || without.Median <= 0 {
		rows = append(rows, row{Figure: "agent CPU with the CPython walk ÷ without it", Measured: "no run without the walk (python_frames: false)", Status: "ERROR"})
		return rows
	}
	ratio := with.Median / without.Median
	rows = append(rows, row{"agent CPU with the CPython frame walk ÷ without it (unwinding: auto, python_frames true / false)", "—", fmt.Sprintf("≤ %.1f×", pythonWalkGoal),
		fmt.Sprintf("%.2f× (%.3f %% / %.3f %% of a core, medians of %d and %d runs)", ratio, with.Median, without.Median, with.N, without.N), verdict(ratio, pythonWalkGoal, true),
		"the unwinding phase's workload (a python3 loop and a node loop beside a C program without frame pointers and hotpath-burn), runs interleaved; the walk's BPF cost per sample is in the Unwinding section"})
	return rows
}

// unwindingSection compares the modes: the median over each mode's runs of
// every figure, the ratio auto / frame_pointer where it is the question
// (agent CPU, RSS, BPF time per sample), and every run.
func unwindingSection(res *unwindingResult) string {
	var b strings.Builder
	b.WriteString("## Unwinding: auto vs frame_pointer, and the CPython walk (19 Hz)\n\n")
	fmt.Fprintf(&b, "Same workload in every run, started before the agent: %s. Runs in order %s, %.0f s steady window each after %.0f s of warm-up; agent flags %s plus `--set=receivers.ebpfprofile.unwinding=MODE` (auto_no_python: `unwinding=auto` and `python_frames=false`). With auto the kernel also walks the node loop's V8 frames for their functions, and the agent names them from node's memory; with frame_pointer it does neither. BPF program time: %s. Load average (1/5/15 min) at the phase's start and end: %v.\n\n",
		"`"+strings.Join(res.Workload, "`, `")+"`", modeOrder(res), res.SteadySeconds, res.WarmupSeconds, strings.Join(res.AgentArgs, " "), res.BPFStats, res.LoadAvg)
	type figure struct {
		name  string
		f     func(*unwindRun) float64
		unit  string
		prec  int
		ratio bool
	}
	figs := []figure{
		{"agent CPU, % of one core", runCPU, " %", 3, true},
		{"agent RSS, median of 1 s samples", func(r *unwindRun) float64 { return r.RSSMB }, " MB", 1, true},
		{"agent anonymous memory (RssAnon), median", func(r *unwindRun) float64 { return r.AnonMB }, " MB", 1, false},
		{"agent peak RSS (VmHWM)", func(r *unwindRun) float64 { return r.PeakRSSMB }, " MB", 1, false},
		{"agent start-up CPU (exec → window, table loading included)", func(r *unwindRun) float64 { return r.WarmupCPU }, " s", 2, false},
		{"time to first sample (exec → \"sampling every CPU\"; goal ≤ 0.5 s)", func(r *unwindRun) float64 { return r.TTFSMillis }, " ms", 0, false},
		{"BPF map memory, the agent's map fds (fdinfo memlock)", func(r *unwindRun) float64 { return float64(r.BPFMapBytes) / 1e6 }, " MB", 2, false},
		{"unwind tables (receiver gauge)", func(r *unwindRun) float64 { return r.UnwindTables }, "", 0, false},
		{"unwind table memory (receiver gauge)", func(r *unwindRun) float64 { return r.UnwindTableBytes / 1e6 }, " MB", 2, false},
		{"unwind table memory, kernel (memlock of unwind_tables' inner maps)", func(r *unwindRun) float64 { return float64(r.KernelTableBytes) / 1e6 }, " MB", 2, false},
		{"BPF maps + unwind tables (kernel)", func(r *unwindRun) float64 { return float64(r.BPFMapBytes+r.KernelTableBytes) / 1e6 }, " MB", 2, false},
		{"processes unwound with tables", func(r *unwindRun) float64 { return r.UnwindProcesses }, "", 0, false},
		{"BPF cpu_sample, ns per sample (run_time_ns ÷ run_cnt)", nsPerRun, " ns", 0, true},
		{"BPF cpu_sample, % of one core (charged to the sampled processes)", runBPFCPU, " %", 4, false},
		{"samples kept in the window", func(r *unwindRun) float64 { return r.SamplesKept }, "", 0, false},
		{"stacks unwound with tables (DWARF)", func(r *unwindRun) float64 { return r.DWARFUnwound }, "", 0, false},
		{"DWARF share of kept samples", runDWARFShare, " %", 1, false},
		{"share of kept samples in the C and python workload (their CPU × 19 Hz)", runNoFPShare, " %", 1, false},
	}
	for _, reason := range endedReasons(res) {
		figs = append(figs, figure{"stacks ended early: " + reason, func(r *unwindRun) float64 { return r.EndedEarly[reason] }, "", 0, false})
	}
	num := func(v float64, prec int, unit string) string { return fmt.Sprintf("%.*f%s", prec, v, unit) }
	ratio := func(f figure, a, b benchfmt.Summary) string {
		if !f.ratio || a.N == 0 || b.N == 0 || b.Median == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f×", a.Median/b.Median)
	}
	cell := func(v benchfmt.Summary, f figure) string {
		if v.N == 0 {
			return "not run"
		}
		return num(v.Median, f.prec, f.unit)
	}
	b.WriteString("| figure (median over the runs) | frame_pointer | auto | auto_no_python | auto / frame_pointer | auto / auto_no_python (the CPython walk) |\n|---|---|---|---|---|---|\n")
	for _, f := range figs {
		fp, au, np := unwindMedian(res, modeFP, f.f), unwindMedian(res, modeAuto, f.f), unwindMedian(res, modeAutoNoPython, f.f)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", f.name, cell(fp, f), cell(au, f), cell(np, f), ratio(f, au, fp), ratio(f, au, np))
	}
	share, noFP := unwindMedian(res, modeAuto, runDWARFShare), unwindMedian(res, modeAuto, runNoFPShare)
	if share.N > 0 {
		fmt.Fprintf(&b, "\nDWARF share of kept samples with unwinding: auto: %.1f %% (median of %d runs; the C and python workload alone are %.1f %% of the samples by their CPU time).", share.Median, share.N, noFP.Median)
		if share.Median < noFP.Median/2 {
			b.WriteString(" **Less than half of that: the tables are not being used for much of the code without frame pointers.**")
		}
		b.WriteString("\n")
	}
	b.WriteString("Stacks ended early are only classified for stacks unwound with tables: with frame pointers the kernel's bpf_get_stack reports truncation alone, so a walk that stops in code without frame pointers is not counted there.\n")
	b.WriteString("\n| run | mode | load (1 min) | agent CPU | RSS | anon | BPF maps | unwind tables (receiver / kernel) | ns/sample | kept | C + python share | DWARF | ended early |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i := range res.Runs {
		r := &res.Runs[i]
		load := 0.0
		if len(r.LoadAvg) > 0 {
			load = r.LoadAvg[0]
		}
		fmt.Fprintf(&b, "| %d | %s | %.2f | %.3f %% | %.1f MB | %.1f MB | %.2f MB | %.0f, %.2f MB / %d, %.2f MB | %.0f | %.0f | %.1f %% | %.0f (%.1f %%) | %s |\n",
			i+1, r.Mode, load, runCPU(r), r.RSSMB, r.AnonMB, float64(r.BPFMapBytes)/1e6,
			r.UnwindTables, r.UnwindTableBytes/1e6, r.KernelTables, float64(r.KernelTableBytes)/1e6,
			nsPerRun(r), r.SamplesKept, runNoFPShare(r), r.DWARFUnwound, runDWARFShare(r), endedString(r))
	}
	if len(res.Runs) > 0 {
		fmt.Fprintf(&b, "\nMetric names read: %v.\n", res.Runs[len(res.Runs)-1].MetricNames)
	}
	return b.String()
}

func modeOrder(res *unwindingResult) string {
	var ms []string
	for _, r := range res.Runs {
		ms = append(ms, r.Mode)
	}
	return strings.Join(ms, ", ")
}

// endedReasons are the stacks_ended_early reasons seen in any run, sorted.
func endedReasons(res *unwindingResult) []string {
	var rs []string
	for _, r := range res.Runs {
		for k := range r.EndedEarly {
			if !slices.Contains(rs, k) {
				rs = append(rs, k)
			}
		}
	}
	slices.Sort(rs)
	return rs
}

func endedString(r *unwindRun) string { return countsString(r.EndedEarly) }

// countsString is "a 1, b 2": counts by name, sorted by name.
func countsString[V int | float64](m map[string]V) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %v", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
