package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hotpath-dev/hotpath/bench/internal/benchfmt"
	"github.com/hotpath-dev/hotpath/bench/internal/storebench"
)

// row is one line of the results table.
type row struct {
	Figure, RFD, Goal, Measured, Status, How string
}

// verdict compares a measured value with a bound (lower is better unless
// higherBetter); no bound means the figure is informational.
func verdict(v, bound float64, haveBound bool) string {
	if !haveBound {
		return "info"
	}
	if v <= bound {
		return "PASS"
	}
	return "FAIL"
}

func reportCmd(args []string) error {
	fset := flag.NewFlagSet("report", flag.ExitOnError)
	dir := fset.String("dir", "", "directory with agent.json, unwinding.json, churn.json, container.json, symbolize.json, storage.json, micro.txt, benchstat.txt")
	results := fset.String("results", "", "markdown file to write (bench/results/<date>-<host>.md)")
	phases := fset.String("phases", "", "phases that were run (BENCH_ONLY, space or comma separated); the results of the others are not looked for (default: all of "+strings.Join(allPhases, " ")+")")
	_ = fset.Parse(args)
	if *dir == "" || *results == "" {
		return fmt.Errorf("-dir and -results are required")
	}
	ran := strings.FieldsFunc(*phases, func(r rune) bool { return r == ' ' || r == ',' })
	if len(ran) == 0 {
		ran = allPhases
	}
	var rows []row
	var notes []string
	missing := func(what string, err error) {
		notes = append(notes, fmt.Sprintf("- %s: not measured (%v)", what, err))
		rows = append(rows, row{Figure: what, Measured: "not measured", Status: "ERROR"})
	}
	wanted := func(phase string) bool {
		if slices.Contains(ran, phase) {
			return true
		}
		notes = append(notes, fmt.Sprintf("- %s: not run (-phases %q)", phase, strings.Join(ran, " ")))
		return false
	}

	var ag agentResult
	if wanted("agent") {
		if err := readJSON(filepath.Join(*dir, "agent.json"), &ag); err != nil {
			missing("agent (CPU, memory, start, slowdown)", err)
		} else {
			rows = append(rows, agentRows(&ag)...)
		}
	}
	var unw unwindingResult
	if wanted("unwinding") {
		if err := readJSON(filepath.Join(*dir, "unwinding.json"), &unw); err != nil {
			missing("unwinding: auto vs frame_pointer", err)
		} else {
			rows = append(rows, unwindingRows(&unw)...)
		}
	}
	var churn churnResult
	if wanted("churn") {
		if err := readJSON(filepath.Join(*dir, "churn.json"), &churn); err != nil {
			missing("churn: a CI node, guard on and off", err)
		} else {
			rows = append(rows, churnRows(&churn)...)
		}
	}
	var ctr churnResult
	if wanted("container") {
		if err := readJSON(filepath.Join(*dir, "container.json"), &ctr); err != nil {
			missing("container: the churn's workload in a container", err)
		} else {
			rows = append(rows, churnRows(&ctr)...)
		}
	}
	var sym symbolizeResult
	if wanted("symbolize") {
		if err := readJSON(filepath.Join(*dir, "symbolize.json"), &sym); err != nil {
			missing("symbolization per interval", err)
		} else {
			s := slices.Sorted(slices.Values(sym.Millis))
			p50, p99 := benchfmt.Percentile(s, 50), benchfmt.Percentile(s, 99)
			rows = append(rows, row{
				Figure: fmt.Sprintf("symbolization per interval, p50 / p99 (%d stacks × %d frames)", sym.StacksPerIv, sym.Depth),
				RFD:    "< 50 ms", Goal: "p99 < 50 ms",
				Measured: fmt.Sprintf("%.1f / %.1f ms (first, cold: %.0f ms; %.0f%% frames named)", p50, p99, sym.ColdMillis, 100*sym.ResolvedFrames),
				Status:   verdict(p99, 50, true),
				How:      sym.Command + " (internal/symbolize on the workload and the collector binary, timed per interval)",
			})
		}
	}
	if wanted("micro") {
		if micro, err := readMicro(filepath.Join(*dir, "micro.txt")); err != nil {
			missing("Go micro-benchmarks", err)
		} else {
			rows = append(rows, microRows(micro)...)
		}
	}
	var st storebench.Result
	if wanted("storage") {
		if err := readJSON(filepath.Join(*dir, "storage.json"), &st); err != nil {
			missing("storage and queries", err)
		} else {
			rows = append(rows, storageRows(&st)...)
		}
	}

	printTable(os.Stdout, rows)
	var sections []string
	if len(unw.Runs) > 0 {
		sections = append(sections, unwindingSection(&unw))
	}
	if len(churn.Runs) > 0 {
		sections = append(sections, churnSection(&churn))
	}
	if len(ctr.Runs) > 0 {
		sections = append(sections, churnSection(&ctr))
	}
	for _, s := range sections {
		fmt.Printf("\n%s", s)
	}
	md := markdown(*dir, rows, notes, &ag, &st, strings.Join(sections, "\n"))
	if err := os.MkdirAll(filepath.Dir(*results), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(*results, []byte(md), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", *results, err)
	}
	fmt.Printf("\nresults: %s\n", *results)
	for _, r := range rows {
		if r.Status == "ERROR" {
			return errors.New("some figures could not be measured (see the table)")
		}
	}
	return nil
}

func agentRows(ag *agentResult) []row {
	var rows []row
	wall := ag.SteadySeconds
	core := 100 * ag.SteadyCPUSeconds / wall
	machine := core / float64(ag.CPUs)
	how := fmt.Sprintf("utime+stime of the agent (/proc/PID/stat) over a %.0f s window while hotpath-burn loads all %d CPUs; config %s, exporting to a loopback gateway", wall, ag.CPUs, ag.AgentConfig)
	rows = append(rows,
		row{"agent CPU, % of one core (19 Hz, busy host)", "< 1 %", "≤ 0.25 %", fmt.Sprintf("%.3f %% (%.2f s CPU in %.0f s)", core, ag.SteadyCPUSeconds, wall), verdict(core, 0.25, true), how},
		row{"agent CPU, % of the machine", "< 1 %", "≤ 0.125 %", fmt.Sprintf("%.3f %% of %d CPUs", machine, ag.CPUs), verdict(machine, 0.125, true), how},
	)
	if len(ag.Pairs) > 0 {
		var ratios []float64
		for _, p := range ag.Pairs {
			ratios = append(ratios, p.With/p.Without)
		}
		s := benchfmt.Summarize(ratios)
		slow := 100 * (1 - s.Median)
		status := verdict(slow, 0.5, true)
		// A spread many times the goal means the machine's own noise
		// swamps the agent: no verdict, re-run on a quiet machine.
		if spread := 100 * (s.Max - s.Min); spread > 5*0.5 {
			status = "NOISY"
		}
		rows = append(rows, row{
			"workload slowdown with the agent (median, [min, max] over pairs)", "< 1 %", "≤ 0.5 %",
			fmt.Sprintf("%.2f %% [%.2f, %.2f] over %d pairs", slow, 100*(1-s.Max), 100*(1-s.Min), s.N),
			status,
			fmt.Sprintf("hotpath-burn throughput, %.0f s arms interleaved A B, B A ... without/with the agent", ag.ArmSeconds),
		})
	}
	rss, anon, file := benchfmt.Summarize(ag.RSSSamples), benchfmt.Summarize(ag.AnonSamples), benchfmt.Summarize(ag.FileSamples)
	rows = append(rows,
		row{"agent start-up CPU (exec → steady window, first interval included)", "—", "—", fmt.Sprintf("%.2f s CPU in %.0f s", ag.WarmupCPU, ag.WarmupSeconds), "info", "utime+stime of the agent when the steady window starts"},
		row{"agent RSS, steady (median of 1 s samples)", "—", "≤ 30 MB", fmt.Sprintf("%.1f MB [%.1f, %.1f]; anonymous %.1f MB, file-backed %.1f MB", rss.Median, rss.Min, rss.Max, anon.Median, file.Median), verdict(rss.Median, 30, true), "VmRSS (RssAnon, RssFile) from /proc/PID/status once a second in the steady window"},
		row{"agent RSS, peak (VmHWM)", "—", "≤ 30 MB", fmt.Sprintf("%.1f MB", ag.PeakRSSMB), verdict(ag.PeakRSSMB, 30, true), "VmHWM from /proc/PID/status at the end of the steady window"},
		row{"BPF map memory", "~500 KB per profiled service", "—", fmt.Sprintf("%.2f MB in %d maps (receiver logs %.2f MB)", float64(ag.BPFMapsFdinfo)/1e6, ag.BPFMapCount, float64(ag.BPFMapsLogged)/1e6), "info", "sum of memlock over the agent's BPF map fds (/proc/PID/fdinfo); the receiver's bpf_map_bytes log field"},
	)
	if len(ag.TTFSMillis) > 0 {
		s := benchfmt.Summarize(ag.TTFSMillis)
		rows = append(rows, row{"time to first sample (process start → \"sampling every CPU\")", "—", "≤ 0.5 s (OTel eBPF profiler: 3–4 s)",
			fmt.Sprintf("%.0f ms median [%.0f, %.0f] over %d starts", s.Median, s.Min, s.Max, s.N), verdict(s.Median/1000, 0.5, true),
			"time from exec to the log line being read on the agent's stderr"})
	}
	if ag.SymbolizeCount > 0 {
		mean := 1000 * ag.SymbolizeSum / ag.SymbolizeCount
		rows = append(rows, row{"symbolization in the running agent (mean per interval)", "< 50 ms", "—",
			fmt.Sprintf("%.1f ms over %.0f intervals", mean, ag.SymbolizeCount), verdict(mean, 50, true),
			"otelcol_receiver_ebpfprofile_symbolize_duration sum/count from the agent's /metrics (its buckets are too coarse for percentiles)"})
	}
	if ag.PerfSeconds > 0 {
		pc := 100 * ag.PerfCPUSeconds / ag.PerfSeconds
		rows = append(rows, row{"agent CPU cross-check: perf cpu-clock, % of one core", "—", "≤ 0.25 %",
			fmt.Sprintf("%.3f %% (%.2f s in %.0f s)", pc, ag.PerfCPUSeconds, ag.PerfSeconds), verdict(pc, 0.25, true),
			fmt.Sprintf("perf record -e cpu-clock -F %d -g -p AGENT_PID -- sleep %.0f; perf report --no-children --sort dso,sym (the top is in the results file)", ag.PerfHz, ag.PerfSeconds)})
	}
	if ag.SamplesKept >= 0 {
		expected := 19 * float64(ag.CPUs) * wall
		rows = append(rows, row{"samples kept in the steady window (plausibility)", "—", fmt.Sprintf("≈ %.0f (19 Hz × %d busy CPUs)", expected, ag.CPUs),
			fmt.Sprintf("%.0f kept, %.0f lost", ag.SamplesKept, ag.SamplesLost), "info", "otelcol_receiver_ebpfprofile_samples{outcome=kept} delta from /metrics"})
	}
	return rows
}

func readMicro(path string) (benchfmt.Results, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := benchfmt.Parse(f)
	if err == nil && len(r) == 0 {
		err = fmt.Errorf("%s holds no benchmark results", path)
	}
	return r, err
}

func microRows(r benchfmt.Results) []row {
	var rows []row
	add := func(figure, name, unit, scaleUnit string, scale float64, rfd, goal string, bound float64, haveBound, lowerBetter bool) {
		xs := r.Get(name, unit)
		if len(xs) == 0 {
			rows = append(rows, row{Figure: figure, RFD: rfd, Goal: goal, Measured: "no result for " + name, Status: "ERROR"})
			return
		}
		s := benchfmt.Summarize(xs)
		status := "info"
		if haveBound {
			v := s.Median * scale
			if lowerBetter {
				status = verdict(v, bound, true)
			} else {
				status = verdict(-v, -bound, true)
			}
		}
		rows = append(rows, row{figure, rfd, goal,
			fmt.Sprintf("%s %s [%s, %s] (n=%d)", human(s.Median*scale), scaleUnit, human(s.Min*scale), human(s.Max*scale), s.N), status,
			fmt.Sprintf("go test -run '^$' -bench '%s$' (see micro.txt, benchstat.txt)", name)})
	}
	add("symbolization, Go benchmark (300 stacks × 15 frames, addresses seen in an earlier interval, mean per interval)", "BenchmarkSymbolizeInterval", "ns/op", "ms", 1e-6, "< 50 ms", "< 50 ms", 50, true, true)
	// The same with every address new to the symbolizer: what call sites
	// never sampled before cost (a new binary, a deploy).
	add("symbolization, Go benchmark (300 stacks × 15 frames, every address new, mean per interval)", "BenchmarkSymbolizeIntervalUnseen", "ns/op", "ms", 1e-6, "< 50 ms", "< 50 ms", 50, true, true)
	// The rest of the running agent's symbolization figure: the interval's
	// symbolized stacks made into OTLP profiles (its dictionary and samples).
	add("interval profile from symbolized stacks, Go benchmark (400 stacks × 15 frames)", "BenchmarkInterval", "ns/op", "ms", 1e-6, "—", "—", 0, false, true)
	// An agent merges 19 Hz × CPUs samples; 1M merges/s leaves that under
	// a millisecond of CPU per second even on a 64-CPU host.
	add("stack merges/s (stackaggregator, steady window)", "BenchmarkMerge", "merges/s", "merges/s", 1, "—", "≥ 1 M/s", 1e6, true, false)
	add("stack merges/s (stackaggregator, whole window incl. emit)", "BenchmarkWindow", "merges/s", "merges/s", 1, "—", "—", 0, false, false)
	// The writer benchmark has a sub-benchmark per tier (it had one named
	// "appender" before the stack dictionary; the report kept asking for it).
	add("exporter rows/s (writer alone, local tier)", "BenchmarkWrite/local", "rows/s", "rows/s", 1, "—", "—", 0, false, false)
	add("exporter rows/s (writer alone, summary tier)", "BenchmarkWrite/summary", "rows/s", "rows/s", 1, "—", "—", 0, false, false)
	// Issue 16's goal for the whole push, with 6.5 % of the rows bringing
	// a stack new to the file (the storage phase's simulated day); the
	// -known rows (no new stack) say what the rows alone cost.
	add("exporter rows/s (OTLP → DuckDB, local tier, 6.5 % new stacks)", "BenchmarkPush/local", "rows/s", "rows/s", 1, "—", "≥ 500 k", 5e5, true, false)
	add("exporter rows/s (OTLP → DuckDB, summary tier, 6.5 % new stacks)", "BenchmarkPush/summary", "rows/s", "rows/s", 1, "—", "≥ 500 k", 5e5, true, false)
	add("exporter rows/s (OTLP → DuckDB, local tier, known stacks)", "BenchmarkPush/local-known", "rows/s", "rows/s", 1, "—", "—", 0, false, false)
	add("exporter rows/s (OTLP → DuckDB, summary tier, known stacks)", "BenchmarkPush/summary-known", "rows/s", "rows/s", 1, "—", "—", 0, false, false)
	// The gateway's push is a minute of every agent's stacks: its size
	// grows with the fleet, and a push's fixed cost is spread over more
	// rows. Reported beside the 5,000-row figures, which stay the goal's.
	add("exporter rows/s (OTLP → DuckDB, summary tier, a gateway minute of 200 services: 50,000 rows a push, 6.5 % new stacks)", "BenchmarkPush/summary-fleet-minute", "rows/s", "rows/s", 1, "—", "—", 0, false, false)
	// An agent that has run a day on a simulated clock: its file as its
	// disk holds it, retention and checkpoints having run all along (the
	// storage phase's agent rows are one retention run on a fresh file).
	add("storage, agent local tier after a simulated day at its default retention, used blocks per service per hour kept", "BenchmarkLocalTierUptime", "MB-used/svc-h", "MB", 1,
		"~480 KB per hour (1 h kept)", "≤ 200 KB", agentGoalPerHour/1e6, true, true)
	add("storage, agent local tier after a simulated day, whole file per service per hour kept", "BenchmarkLocalTierUptime", "MB-file/svc-h", "MB", 1, "—", "—", 0, false, false)
	add("batch ids an agent's file keeps (after a simulated day)", "BenchmarkLocalTierUptime", "batch-ids", "ids", 1, "—", "—", 0, false, false)
	add("agent's write-ahead log beside its file, largest over the simulated day", "BenchmarkLocalTierUptime", "MB-wal-peak", "MB", 1, "—", "—", 0, false, false)
	add("agent's DuckDB memory, largest over the simulated day (after retention runs)", "BenchmarkLocalTierUptime", "MB-duckdb-mem-peak", "MB", 1, "—", "—", 0, false, false)
	add("agent's writes and retention, wall seconds per simulated hour (10 services)", "BenchmarkLocalTierUptime", "ns/op", "s", 1e-9, "—", "—", 0, false, false)
	return rows
}

// Issue 16's storage goals, bytes per service: the gateway's per day, the
// agent's per hour.
const (
	gatewayGoalPerDay = 2e6
	agentGoalPerHour  = 200e3
)

func storageRows(st *storebench.Result) []row {
	mb := func(b float64) string { return fmt.Sprintf("%.2f MB", b/1e6) }
	rows := []row{
		{fmt.Sprintf("storage, gateway summary tier, per service per day (%d services, %.0f h simulated)", st.Services, st.SpanHours), "~5.8 MB (table: ~21 MB, ceiling 50 MB)", "≤ 2 MB",
			fmt.Sprintf("%s (%d rows, %.0f distinct stacks per service-minute)", mb(st.Summary.BytesPerSvcDay), st.Summary.Rows, st.Summary.DistinctPerSvcMn),
			verdict(st.Summary.BytesPerSvcDay, gatewayGoalPerDay, true),
			fmt.Sprintf("file size after CHECKPOINT ÷ services ÷ days (du -b %s)", st.Summary.Path)},
		{fmt.Sprintf("storage, agent local tier, per service per hour (%.0f h simulated)", st.LocalSpanHours), "~480 KB per hour (1 h kept)", "≤ 200 KB",
			fmt.Sprintf("%s per hour, %s per day written (%d rows)", mb(st.Local.BytesPerSvcDay/24), mb(st.Local.BytesPerSvcDay), st.Local.Rows),
			verdict(st.Local.BytesPerSvcDay/24, agentGoalPerHour, true),
			fmt.Sprintf("file size after CHECKPOINT ÷ services ÷ hours (du -b %s)", st.Local.Path)},
	}
	for _, t := range []struct {
		name, per string
		perDay    float64 // units per day
		tier      storebench.Tier
	}{{"gateway summary", "day", 1, st.Summary}, {"agent local", "hour", 24, st.Local}} {
		if t.tier.CompactBytes <= 0 || t.tier.UsedBytes <= 0 || t.tier.FileBytes <= 0 {
			continue
		}
		fb, ub, cb := float64(t.tier.FileBytes), float64(t.tier.UsedBytes), float64(t.tier.CompactBytes)
		rows = append(rows, row{
			fmt.Sprintf("storage, %s tier as written against the same data copied in one go", t.name), "—", "—",
			fmt.Sprintf("file %.1f MB (used %.1f, free %.1f), compact copy %.1f MB = %s per service per %s: used ×%.2f, file ×%.2f",
				fb/1e6, ub/1e6, (fb-ub)/1e6, cb/1e6, mb(t.tier.BytesPerSvcDay*cb/fb/t.perDay), t.per, ub/cb, fb/cb),
			"info",
			"after CHECKPOINT: used blocks from pragma_database_size; the compact copy is COPY FROM DATABASE into a fresh file, CHECKPOINTed"})
	}
	// What an agent's file holds: its hour (the row above spreads the
	// stack dictionary of the whole simulated span over its hours).
	if lh := st.LocalHour; lh.BytesPerSvcHour > 0 {
		rows = append(rows, row{
			"storage, agent local tier holding its hour (the default 1 h retention run on the file), per service per hour", "~480 KB per hour (1 h kept)", "≤ 200 KB",
			fmt.Sprintf("%s compact (%d rows and %d stacks over %.0f min; file %.1f MB, used %.1f MB, compact copy %.1f MB)",
				mb(lh.BytesPerSvcHour), lh.Rows, lh.Stacks, 60*lh.KeptHours, float64(lh.FileBytes)/1e6, float64(lh.UsedBytes)/1e6, float64(lh.CompactBytes)/1e6),
			verdict(lh.BytesPerSvcHour, agentGoalPerHour, true),
			"a copy of the agent's file after the exporter's default retention (rows and stacks older than 1 h by the real clock) ran on it and CHECKPOINT; the compact copy (COPY FROM DATABASE into a fresh file) ÷ services ÷ hours kept. One retention run deletes two thirds of the file, scattered over its row groups, which stay in their blocks: the used blocks are an upper bound, the compact copy the layout's own cost"})
	}
	if sd := st.Steady; sd.UsedBytes > 0 {
		rows = append(rows, row{
			fmt.Sprintf("storage, gateway after %d days at the default retention (traces kept 7 days), per service per day", st.SummaryDay), "—", "≤ 2 MB",
			fmt.Sprintf("%s (%.1f MB used of a %.1f MB file, %.1f MB after hotpath compact; trace-tagged rows over %.1f days)", mb(sd.BytesPerSvcDay), float64(sd.UsedBytes)/1e6, float64(sd.FileBytes)/1e6, float64(sd.CompactBytes)/1e6, sd.TraceDays),
			verdict(sd.BytesPerSvcDay, gatewayGoalPerDay, true),
			fmt.Sprintf("the %d-day file after the exporter's default retention ran on it and CHECKPOINT: DuckDB's used blocks ÷ services ÷ days (pragma_database_size; free blocks are reused by later writes). The days before the written one are copied in by INSERT … SELECT, laid out like a compact copy: a gateway that wrote them itself holds more, as the row comparing the written day with its compact copy shows", st.SummaryDay)})
	}
	for _, t := range []struct {
		name, per string
		tier      storebench.Tier
	}{{"summary", "1-minute batch", st.Summary}, {"local", "15 s batch", st.Local}} {
		ms := t.tier.PushMillis
		if len(ms) < 10 {
			continue
		}
		sorted := slices.Sorted(slices.Values(ms))
		tenth := len(ms) / 10
		first, last := benchfmt.Summarize(ms[:tenth]), benchfmt.Summarize(ms[len(ms)-tenth:])
		rows = append(rows, row{fmt.Sprintf("exporter push latency, %s tier (one %s)", t.name, t.per), "—", "—",
			fmt.Sprintf("p50 %.0f ms, p99 %.0f ms; mean of first tenth %.0f ms, last tenth %.0f ms", benchfmt.Percentile(sorted, 50), benchfmt.Percentile(sorted, 99), first.Mean, last.Mean),
			"info", "ConsumeProfiles timed around each push of the simulated day"})
	}
	for _, q := range st.Queries {
		s := benchfmt.Summarize(q.Millis)
		// Issue 16's goals; the RFDs' bounds stay in their column.
		rfd, goal, bound, have := "—", "—", 0.0, false
		switch {
		case strings.HasPrefix(q.Name, "reference"), strings.HasPrefix(q.Name, "cli:"):
		case strings.Contains(q.Name, "trace lookup"):
			rfd, goal, bound, have = "< 200 ms (RFD 078)", "≤ 50 ms", 50, true
		case strings.Contains(q.Name, " 1h "):
			rfd, goal, bound, have = "< 100 ms", "≤ 50 ms", 50, true
		default:
			rfd, goal, bound, have = "< 2 s", "≤ 300 ms", 300, true
		}
		check := "rows match the raw table"
		if q.Samples != q.Want {
			check = fmt.Sprintf("MISMATCH: %d samples returned, %d stored", q.Samples, q.Want)
			have, bound = true, -1 // a wrong answer fails whatever its speed
		}
		figure := "query: " + q.Name
		if strings.HasPrefix(q.Name, "cli:") {
			figure = q.Name
		}
		rows = append(rows, row{figure, rfd, goal,
			fmt.Sprintf("%.0f ms median [%.0f, %.0f] (%d rows, %d samples; %s)", s.Median, s.Min, s.Max, q.Rows, q.Samples, check),
			verdict(s.Median, bound, have), q.SQL})
	}
	return rows
}

// human prints large rates compactly (1.23 M, 45.6 k).
func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2f M", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1f k", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func printTable(w *os.File, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tRFD TARGET\tOUR GOAL\tMEASURED\tRESULT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Figure, r.RFD, r.Goal, r.Measured, r.Status)
	}
	_ = tw.Flush()
}

// allPhases are the phases of scripts/bench.sh whose results report reads.
var allPhases = []string{"agent", "unwinding", "churn", "container", "symbolize", "micro", "storage"}

// markdown is the results file; sections are the unwinding and churn
// phases' sections ("" when neither ran).
func markdown(dir string, rows []row, notes []string, ag *agentResult, st *storebench.Result, sections string) string {
	var b strings.Builder
	host, _ := os.Hostname()
	fmt.Fprintf(&b, "# hotpath bench: %s on %s\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), host)
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %s.", cpuModel(), runtime.NumCPU(), kernel())
	if len(ag.LoadAvg) > 0 {
		fmt.Fprintf(&b, " Load average (1/5/15 min) at the agent phase's start and end: %v.", ag.LoadAvg)
	}
	b.WriteString("\n\n")
	if env, err := os.ReadFile(filepath.Join(dir, "env.txt")); err == nil {
		b.WriteString("```\n" + strings.TrimSpace(string(env)) + "\n```\n\n")
	}
	b.WriteString("| figure | RFD target | our goal | measured | result |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Figure, r.RFD, r.Goal, strings.ReplaceAll(r.Measured, "|", "\\|"), r.Status)
	}
	b.WriteString("\n## How each figure was measured\n\n")
	for _, r := range rows {
		if r.How != "" {
			fmt.Fprintf(&b, "- **%s**: `%s`\n", r.Figure, strings.ReplaceAll(r.How, "\n", " "))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Not measured\n\n" + strings.Join(notes, "\n") + "\n")
	}
	if sections != "" {
		b.WriteString("\n" + sections)
	}
	if len(ag.Pairs) > 0 {
		b.WriteString("\n## Slowdown pairs (hotpath-burn ops/s)\n\n| pair | without agent | with agent | ratio | agent CPU in the B arm |\n|---|---|---|---|---|\n")
		for i, p := range ag.Pairs {
			cpu := ""
			if i < len(ag.ArmCPU) {
				cpu = fmt.Sprintf("%.2f %% of a core", ag.ArmCPU[i])
			}
			fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.4f | %s |\n", i+1, p.Without, p.With, p.With/p.Without, cpu)
		}
		fmt.Fprintf(&b, "\nTime to first sample per start (ms): %v. Agent CPU before the ready line: %.2f s. Gateway CPU over the whole phase: %.2f s. Metric names read: %v. Agent flags: %v; overhead-guard frequency changes logged in the steady run: %d.\n",
			ag.TTFSMillis, ag.StartupCPU, ag.GatewayCPU, ag.MetricNames, ag.AgentArgs, ag.GuardChanges)
		if ag.PerfTop != "" {
			b.WriteString("\n### Where the agent's CPU goes (perf, steady state)\n\n```\n" + ag.PerfTop + "\n```\n")
		}
	}
	if st.Services > 0 {
		fmt.Fprintf(&b, "\n## Storage details\n\n| tier | file | bytes | rows | trace-tagged rows | frames | samples | pushes |\n|---|---|---|---|---|---|---|---|\n")
		for _, t := range []struct {
			name string
			t    storebench.Tier
		}{{"local", st.Local}, {"summary", st.Summary}} {
			fmt.Fprintf(&b, "| %s | %s | %d (du: %d) | %d | %d | %d | %d | %d |\n", t.name, filepath.Base(t.t.Path), t.t.FileBytes, t.t.DiskBytes, t.t.Rows, t.t.TracedRows, t.t.Frames, t.t.Samples, t.t.Pushes)
		}
		if len(st.Summary.Breakdown) > 0 {
			b.WriteString("\nWhere the summary tier's bytes go: each table, or column subset, copied alone into a fresh file and CHECKPOINTed (bytes per row: per row of that table).\n\n| table: columns | bytes | bytes per row |\n|---|---|---|\n")
			for _, p := range st.Summary.Breakdown {
				fmt.Fprintf(&b, "| `%s` | %d | %.1f |\n", p.Columns, p.Bytes, p.BytesPerRow)
			}
		}
		fmt.Fprintf(&b, "\nBoth tiers were written concurrently in %.0f s. The %d-day file for the long queries is %.1f MB (the written day replicated into the past).\n",
			st.Local.WriteSeconds, st.SummaryDay, float64(st.LongFile)/1e6)
	}
	for _, f := range []string{"benchstat.txt", "micro.txt"} {
		raw, err := os.ReadFile(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) || len(raw) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s\n```\n", f, strings.TrimSpace(string(raw)))
	}
	return b.String()
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func kernel() string {
	raw, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown kernel"
	}
	return "Linux " + strings.TrimSpace(string(raw))
}
