package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/hotpath-dev/hotpath/bench/internal/benchfmt"
)

// Issue 14's targets for the churn phase.
const (
	churnCPUGoal     = 1.0  // % of one core, averaged over the window
	churnSamplesGoal = 97.0 // % of configured Hz × CPU seconds, each steady workload
	churnLeafPP      = 3.0  // leaf share within this many points of the design
	churnRSSGoal     = 60.0 // MB, median and max over the window
	churnPeakGoal    = 80.0 // MB, VmHWM (start-up included)
	churnAnonGoal    = 30.0 // MB, max RssAnon over the window
	// The container phase: the share of the workload's samples that carry
	// its container's id. Every process is created in the container's
	// cgroup; the 1 % allows for samples of processes the agent neither
	// read nor could match to a cgroup it had found yet (it walks the
	// hierarchy for an unknown cgroup at most once a second).
	containerSamplesGoal = 99.0
)

// phaseName is the results' phase: churn, or container.
func (res *churnResult) phaseName() string {
	if res.Phase == "" {
		return "churn"
	}
	return res.Phase
}

func churnAgentCPU(r *churnRun) float64 { return 100 * r.CPUSeconds / r.Seconds }

// heldHz reports whether the receiver reported the configured rate at
// every scrape from its first report to the window's end, and no guard
// line was logged.
func heldHz(r *churnRun, hz float64) bool {
	seen := false
	for _, p := range r.Timeline {
		if p.Hz < 0 {
			continue
		}
		seen = true
		if p.Hz != hz {
			return false
		}
	}
	return seen && len(r.GuardLines) == 0
}

func (s *steadyFigure) percent() float64 {
	if s.Expected <= 0 {
		return 0
	}
	return 100 * s.Samples / s.Expected
}

// leavesVerdict is PASS when every leaf share is within churnLeafPP of
// its design, NOISY when one is not but within two binomial standard
// deviations (too few samples to tell: the guard lowered the rate), FAIL
// otherwise.
func leavesVerdict(r *churnRun) string {
	if len(r.Leaves) == 0 || r.Leaves[0].Samples == 0 {
		return "FAIL"
	}
	status := "PASS"
	for _, l := range r.Leaves {
		d := math.Abs(l.Got - l.Want)
		sigma := 100 * math.Sqrt(l.Want/100*(1-l.Want/100)/l.Samples)
		switch {
		case d <= churnLeafPP:
		case d <= 2*sigma:
			status = "NOISY"
		default:
			return "FAIL"
		}
	}
	return status
}

// leafNoise is the leaf shares' sampling noise: the samples they are of
// and one binomial standard deviation of the larger share.
func leafNoise(r *churnRun) string {
	if len(r.Leaves) == 0 || r.Leaves[0].Samples == 0 {
		return "no samples"
	}
	n, p := r.Leaves[0].Samples, r.Leaves[0].Want/100
	var other float64 = 100
	for _, l := range r.Leaves {
		other -= l.Got
	}
	return fmt.Sprintf("other leaves %.1f %%; of %.0f samples, ±%.1f pp (1 σ)", other, n, 100*math.Sqrt(p*(1-p)/n))
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// churnRows states issue 14's targets for each run.
func churnRows(res *churnResult) []row {
	var rows []row
	for i := range res.Runs {
		r := &res.Runs[i]
		tag := res.phaseName() + ", " + r.Label
		how := fmt.Sprintf("agent %s %s over a %.0f s window aligned to its %.0f s intervals, %.0f s after its ready line; see the %s section", res.AgentConfig, strings.Join(r.AgentArgs, " "), r.Seconds, res.AlignSeconds, res.WarmupSeconds, res.phaseName())
		cpu := churnAgentCPU(r)
		rows = append(rows,
			row{tag + ": sampling rate held", "—", fmt.Sprintf("%.0f Hz throughout", res.ConfiguredHz), hzRange(r) + fmt.Sprintf("; %d overhead-guard lines", len(r.GuardLines)),
				pass(heldHz(r, res.ConfiguredHz)), "the receiver's frequency gauge from /metrics every 15 s from the agent's start to the window's end, and its \"overhead guard\" log lines"},
			row{tag + ": agent CPU, % of one core", "< 1 %", "≤ 1 %", fmt.Sprintf("%.2f %% (%.2f s CPU in %.0f s)", cpu, r.CPUSeconds, r.Seconds),
				verdict(cpu, churnCPUGoal, true), "utime+stime of the agent (/proc/PID/stat); " + how},
		)
		for j := range r.Steady {
			s := &r.Steady[j]
			rows = append(rows, row{fmt.Sprintf("%s: samples of the steady %s", tag, s.Name), "—", "≥ 97 % of expected",
				fmt.Sprintf("%.1f %% (%.0f of %.0f = %.0f Hz × %.1f s CPU; %.0f without build ID)", s.percent(), s.Samples, s.Expected, res.ConfiguredHz, s.CPUSeconds, s.NoBuildID),
				verdict(-s.percent(), -churnSamplesGoal, true),
				fmt.Sprintf("sum(sample_count) of service %s in the window's intervals of the agent's local DuckDB (SQL endpoint, as hotpath sql --endpoint) vs utime+stime of the process over the window", s.Service)})
		}
		var leaves []string
		for _, l := range r.Leaves {
			leaves = append(leaves, fmt.Sprintf("%s %.1f %% (designed %.0f %%)", l.Function, l.Got, l.Want))
		}
		leaves = append(leaves, leafNoise(r))
		rows = append(rows, row{tag + ": C leaf shares", "—", fmt.Sprintf("within %.0f pp of the design", churnLeafPP), strings.Join(leaves, ", "),
			leavesVerdict(r), "top_functions(service, window) of the agent's local DuckDB; NOISY: off by more than 3 pp but within 2 binomial σ of its samples"})
		rows = append(rows, row{tag + ": stacks of the churn's tools reaching their program's entry", "—", "—", toolStacksString(r), "info",
			"samples of services " + churnToolServices + " in the window's intervals of the agent's local DuckDB whose root frame is _start, __libc_start_main, __libc_start_call_main or _dl_start_user, or calls __libc_start_main; of those with a build ID (the process was read) and a user frame"})
		rows = append(rows, row{tag + ": samples of the churn's tools with an [unknown] frame", "—", "—", toolUnknownString(r), "info",
			"samples of services " + churnToolServices + " in the window's intervals of the agent's local DuckDB with a frame [unknown] (in no file the agent knew of: the process was gone before it was read), of all their samples; a frame in a file without symbols (cc1+0x…) is not counted"})
		if r.ContainerID != "" {
			share, s := containerSamplesString(r)
			rows = append(rows, row{tag + ": the workload's samples with its container's id", "—", fmt.Sprintf("≥ %.0f %%", containerSamplesGoal), s,
				verdict(-share, -containerSamplesGoal, true),
				"samples of services " + churnLoadServices + " in the window's intervals of the agent's local DuckDB (stack_samples_local) with container_id = the container's id (from its cgroup kubepods/burstable/pod<uid>/<id>), of all of them"})
		}
		rss, anon := benchfmt.Summarize(r.RSS), benchfmt.Summarize(r.Anon)
		rows = append(rows,
			row{tag + ": agent RSS, median / max", "—", "≤ 60 MB", fmt.Sprintf("%.1f / %.1f MB", rss.Median, rss.Max),
				verdict(rss.Max, churnRSSGoal, true), "VmRSS from /proc/PID/status once a second in the window"},
			row{tag + ": agent peak RSS (VmHWM, start-up included)", "—", "≤ 80 MB", fmt.Sprintf("%.1f MB", r.PeakRSSMB),
				verdict(r.PeakRSSMB, churnPeakGoal, true), "VmHWM from /proc/PID/status at the window's end"},
			row{tag + ": agent anonymous memory, median / max", "—", "≤ 30 MB", fmt.Sprintf("%.1f / %.1f MB", anon.Median, anon.Max),
				verdict(anon.Max, churnAnonGoal, true), "RssAnon from /proc/PID/status once a second in the window"},
			row{tag + ": process starts per second (the churn's own; the workload's definition)", "—", "≥ 5 /s", fmt.Sprintf("%.1f /s (%s); machine: %.1f processes created /s", startsPerSecond(r), startsString(r), r.MachineForks),
				verdict(-startsPerSecond(r), -5, true), "start times of the churn's children in the window; /proc/stat processes for the machine"},
			row{tag + ": the churn's own CPU (the work profiled, and the machine's speed)", "—", "—", churnCPUString(r), "info",
				"utime+stime of each of the churn's starts in the window from its wait (with the children it waited for: gcc's cc1, as and ld, go build's compile and link); the agent's CPU in the window ÷ that. The same builds cost more CPU on a slower or busier host, whose guest may show no steal time"},
			row{tag + ": per-binary work done / deferred / skipped", "—", "—", binaryWorkString(r), "info", "otelcol_receiver_ebpfprofile_binary_work{outcome,kind} deltas over the window"},
		)
		if len(r.AfterRSS) > 0 {
			rss, anon := lastMinute(r.AfterRSS), lastMinute(r.AfterAnon)
			rows = append(rows, row{fmt.Sprintf("%s: agent RSS / anonymous memory once the churn stopped (the last minute of %.0f s)", tag, res.AfterSeconds), "—", "≤ 60 MB",
				fmt.Sprintf("%.1f / %.1f MB (window medians %.1f / %.1f MB); %s", rss.Median, anon.Median, benchfmt.Summarize(r.RSS).Median, benchfmt.Summarize(r.Anon).Median, tablesAfter(r)),
				verdict(rss.Median, churnRSSGoal, true), "VmRSS and RssAnon from /proc/PID/status once a second after the churn's last start, the steady workloads still running: medians of the last 60 s; the receiver's symbol_tables, symbol_table_bytes, unwind_tables and unwind_table_bytes gauges at the window's end and at the end (unwind tables are kernel memory, charged to the agent's memory cgroup, not in RSS)"})
		}
	}
	return rows
}

// containerSamplesString is the share of the workload's samples that
// carry its container's id, and the services of those that do not.
func containerSamplesString(r *churnRun) (float64, string) {
	var with, all float64
	var without []string
	for _, svc := range slices.Sorted(maps.Keys(r.Containers)) {
		c := r.Containers[svc]
		with, all = with+c.With, all+c.With+c.Without
		if c.Without > 0 {
			without = append(without, fmt.Sprintf("%s %.0f", svc, c.Without))
		}
	}
	if all == 0 {
		return 0, "no samples"
	}
	share := 100 * with / all
	s := fmt.Sprintf("%.1f %% (%.0f of %.0f)", share, with, all)
	if len(without) > 0 {
		s += "; without: " + strings.Join(without, ", ")
	}
	return share, s
}

// toolStacksString is the share of each tool's stacks (of processes the
// agent read) that reach the program's entry, and all of them together.
func toolStacksString(r *churnRun) string {
	if len(r.ToolStacks) == 0 {
		return "not measured"
	}
	var parts []string
	var user, whole, unread float64
	for _, t := range r.ToolStacks {
		user, whole, unread = user+t.User, whole+t.Whole, unread+t.Unread
		if t.User > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f %% of %.0f", t.Service, 100*t.Whole/t.User, t.User))
		}
	}
	all := "none read"
	if user > 0 {
		all = fmt.Sprintf("%.1f %% of %.0f", 100*whole/user, user)
	}
	return fmt.Sprintf("%s (%s; %.0f more in processes never read)", all, strings.Join(parts, ", "), unread)
}

// toolUnknownString is the share of the churn's tools' samples with a
// frame in no file the agent knew of, in all and per tool.
func toolUnknownString(r *churnRun) string {
	var all, unknown float64
	var parts []string
	for _, t := range r.ToolStacks {
		all, unknown = all+t.All, unknown+t.Unknown
		if t.All > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f of %.0f", t.Service, t.Unknown, t.All))
		}
	}
	if all == 0 {
		return "not measured"
	}
	return fmt.Sprintf("%.1f %% (%.0f of %.0f: %s)", 100*unknown/all, unknown, all, strings.Join(parts, ", "))
}

// lastMinute summarizes the last 60 of once-a-second samples.
func lastMinute(v []float64) benchfmt.Summary {
	return benchfmt.Summarize(v[max(0, len(v)-60):])
}

// tablesAfter is the receiver's symbol and unwind tables at the window's
// end and once the churn had stopped.
func tablesAfter(r *churnRun) string {
	return fmt.Sprintf("symbol tables %.0f (%.1f MB) at the window's end, %.0f (%.1f MB) after; unwind tables %.0f (%.1f MB of kernel memory) at the window's end, %.0f (%.1f MB) after",
		r.SymbolTables, r.WindowSymbolTableBytes/1e6, r.AfterSymbolTables, r.AfterSymbolTableBytes/1e6,
		r.UnwindTables, r.WindowUnwindTableBytes/1e6, r.AfterUnwindTables, r.AfterUnwindTableBytes/1e6)
}

func startsPerSecond(r *churnRun) float64 {
	n := 0
	for _, v := range r.Starts {
		n += v
	}
	if r.Seconds <= 0 {
		return 0
	}
	return float64(n) / r.Seconds
}

func startsString(r *churnRun) string { return countsString(r.Starts) }

// churnCPUString is the churn's own CPU in the window, the agent's as a
// share of it, and the CPU of one start of each kind.
func churnCPUString(r *churnRun) string {
	if len(r.ChurnCPU) == 0 {
		return "not measured"
	}
	var total float64
	var perStart []string
	for _, kind := range slices.Sorted(maps.Keys(r.ChurnCPU)) {
		total += r.ChurnCPU[kind]
		if n := r.ChurnFinished[kind]; n > 0 {
			perStart = append(perStart, fmt.Sprintf("%s %.0f ms", kind, 1000*r.ChurnCPU[kind]/float64(n)))
		}
	}
	if total <= 0 || r.Seconds <= 0 {
		return "no CPU measured"
	}
	return fmt.Sprintf("%.1f s CPU (%.0f %% of one core); agent ÷ churn %.1f %%; per start: %s",
		total, 100*total/r.Seconds, 100*r.CPUSeconds/total, strings.Join(perStart, ", "))
}

func binaryWorkString(r *churnRun) string {
	if r.BinaryWork == nil {
		return "not reported by this build"
	}
	outcomes := []string{"done", "deferred", "skipped"}
	for _, o := range slices.Sorted(maps.Keys(r.BinaryWork)) {
		if !slices.Contains(outcomes, o) {
			outcomes = append(outcomes, o)
		}
	}
	var parts []string
	for _, outcome := range outcomes {
		var total float64
		for _, v := range r.BinaryWork[outcome] {
			total += v
		}
		parts = append(parts, fmt.Sprintf("%s %.0f (%s)", outcome, total, countsString(r.BinaryWork[outcome])))
	}
	s := strings.Join(parts, "; ")
	if r.BinaryWorkCPU >= 0 {
		s += fmt.Sprintf("; %.2f s CPU", r.BinaryWorkCPU)
	}
	return s
}

// churnSection is the phase's part of the results file: the workload, a
// figure per run side by side, and the time series.
func churnSection(res *churnResult) string {
	var b strings.Builder
	if res.phaseName() == "container" {
		b.WriteString("## Container: the churn's workload in a container (guard on)\n\n")
		b.WriteString("Every process of the workload is created in the cgroup v2 directory kubepods/burstable/pod" + benchPodUID + "/" + res.Runs[0].ContainerID + " (as the kubelet's cgroupfs driver lays out a containerd container) and runs chrooted in an overlay mount whose lower layer is the host's root file system; the steady programs are copied into it. ")
	} else {
		b.WriteString("## Churn: a CI node (guard on and off)\n\n")
	}
	fmt.Fprintf(&b, "Steady workload: `%s`. Churn: %s. Go builds: %s. Binary cache: %s. Each run starts its own workload (one process group, killed at the run's end), then the agent; the window starts on the first %.0f s boundary %.0f s after the agent's ready line and its first interval. Load average (1/5/15 min) at the phase's start and end: %v.\n\n",
		strings.Join(res.Steady, "`, `"), strings.Join(res.Churn, "; "), res.GoCache, res.BinaryCache, res.AlignSeconds, res.WarmupSeconds, res.LoadAvg)
	b.WriteString("| figure |")
	for _, r := range res.Runs {
		fmt.Fprintf(&b, " %s |", r.Label)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(res.Runs)) + "\n")
	line := func(name string, f func(r *churnRun) string) {
		fmt.Fprintf(&b, "| %s |", name)
		for i := range res.Runs {
			fmt.Fprintf(&b, " %s |", strings.ReplaceAll(f(&res.Runs[i]), "|", "\\|"))
		}
		b.WriteString("\n")
	}
	line("agent flags", func(r *churnRun) string {
		return "`" + strings.Join(append([]string{"--config", res.AgentConfig}, r.AgentArgs...), " ") + "`"
	})
	line("window (UTC)", func(r *churnRun) string {
		return r.WindowStart.Format("15:04:05") + "–" + r.WindowEnd.Format("15:04:05")
	})
	line("load average at the run's start", func(r *churnRun) string { return fmt.Sprint(r.LoadAvg) })
	line("time to first sample", func(r *churnRun) string { return fmt.Sprintf("%.0f ms", r.TTFSMillis) })
	line("agent CPU, % of one core", func(r *churnRun) string { return fmt.Sprintf("%.2f %%", churnAgentCPU(r)) })
	line("agent start-up CPU (exec → window)", func(r *churnRun) string { return fmt.Sprintf("%.2f s", r.WarmupCPU) })
	line("RSS median / max (window)", func(r *churnRun) string {
		s := benchfmt.Summarize(r.RSS)
		return fmt.Sprintf("%.1f / %.1f MB", s.Median, s.Max)
	})
	line("RssAnon median / max (window)", func(r *churnRun) string {
		s := benchfmt.Summarize(r.Anon)
		return fmt.Sprintf("%.1f / %.1f MB", s.Median, s.Max)
	})
	line("peak RSS (VmHWM)", func(r *churnRun) string { return fmt.Sprintf("%.1f MB", r.PeakRSSMB) })
	if res.AfterSeconds > 0 {
		line(fmt.Sprintf("RSS / RssAnon once the churn stopped, medians of the last minute of %.0f s", res.AfterSeconds), func(r *churnRun) string {
			if len(r.AfterRSS) == 0 {
				return "not measured"
			}
			return fmt.Sprintf("%.1f / %.1f MB; %s", lastMinute(r.AfterRSS).Median, lastMinute(r.AfterAnon).Median, tablesAfter(r))
		})
	}
	line("sampling rate (receiver gauge)", hzRange)
	for j := range res.Runs[0].Steady {
		line("samples / expected: "+res.Runs[0].Steady[j].Name, func(r *churnRun) string {
			s := &r.Steady[j]
			return fmt.Sprintf("%.0f / %.0f (%.1f %%; %.1f s CPU; %d intervals; %.0f without build ID)", s.Samples, s.Expected, s.percent(), s.CPUSeconds, s.Intervals, s.NoBuildID)
		})
	}
	line("C leaf shares (designed 70 / 30)", func(r *churnRun) string {
		var parts []string
		for _, l := range r.Leaves {
			parts = append(parts, fmt.Sprintf("%.1f %%", l.Got))
		}
		return strings.Join(parts, " / ") + "; " + leafNoise(r)
	})
	line("stacks of the churn's tools reaching their entry", toolStacksString)
	if res.Runs[0].ContainerID != "" {
		line("the workload's samples with its container's id", func(r *churnRun) string { _, s := containerSamplesString(r); return s })
	}
	line("samples kept, all processes", func(r *churnRun) string { return fmt.Sprintf("%.0f", r.SamplesKept) })
	line("process starts /s (churn) ", func(r *churnRun) string { return fmt.Sprintf("%.1f (%s)", startsPerSecond(r), startsString(r)) })
	line("processes created /s (machine)", func(r *churnRun) string { return fmt.Sprintf("%.1f", r.MachineForks) })
	line("the churn's own CPU; agent ÷ churn; per start", churnCPUString)
	line("per-binary work (done / deferred / skipped)", binaryWorkString)
	line("symbol tables / processes tracked / unwind tables (end)", func(r *churnRun) string {
		return fmt.Sprintf("%.0f / %.0f / %.0f", r.SymbolTables, r.Processes, r.UnwindTables)
	})
	line("overhead guard lines", func(r *churnRun) string { return fmt.Sprint(len(r.GuardLines)) })
	line("workload problems", func(r *churnRun) string {
		if len(r.LoadProblems) == 0 {
			return "none"
		}
		return strings.Join(r.LoadProblems, "; ")
	})

	for i := range res.Runs {
		r := &res.Runs[i]
		fmt.Fprintf(&b, "\n### %s: every 10 s from the agent's start\n\n| t (s) | Hz | RSS (MB) | anon (MB) |\n|---|---|---|---|\n", r.Label)
		next := 0.0
		for _, p := range r.Timeline {
			if p.T < next {
				continue
			}
			next = p.T + 10
			hz := "—"
			if p.Hz >= 0 {
				hz = fmt.Sprintf("%.0f", p.Hz)
			}
			fmt.Fprintf(&b, "| %.0f | %s | %.1f | %.1f |\n", p.T, hz, p.RSSMB, p.AnonMB)
		}
		if len(r.GuardLines) > 0 {
			b.WriteString("\nOverhead guard:\n\n```\n" + strings.Join(r.GuardLines, "\n") + "\n```\n")
		}
	}
	if n := len(res.Runs); n > 0 {
		fmt.Fprintf(&b, "\nMetric names read: %v; per-binary work metric: %q.\n", res.Runs[n-1].MetricNames, res.Runs[n-1].BinaryWorkName)
	}
	return b.String()
}
