package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hotpath-dev/hotpath/bench/internal/storebench"
)

// TestReport builds the table from fixture results: verdicts follow the
// goals, a query whose answer is wrong fails whatever its speed, and a
// missing phase makes the report fail after writing what it has.
func TestReport(t *testing.T) {
	dir := t.TempDir()
	ag := agentResult{CPUs: 2, SteadySeconds: 60, SteadyCPUSeconds: 0.12, RSSSamples: []float64{20, 22, 21}, PeakRSSMB: 40,
		TTFSMillis: []float64{300, 320, 310}, Pairs: []abPair{{1000, 999}, {1000, 1001}, {1000, 998}}, ArmSeconds: 8,
		SamplesKept: 2200, SymbolizeSum: 0.04, SymbolizeCount: 4}
	st := storebench.Result{Services: 10, SpanHours: 24, LocalSpanHours: 3,
		Summary: storebench.Tier{Path: "/x/summary.duckdb", BytesPerSvcDay: 1.5e6, Rows: 100, FileBytes: 15e6, UsedBytes: 12e6, CompactBytes: 10e6},
		Local:   storebench.Tier{Path: "/x/local.duckdb", BytesPerSvcDay: 24 * 600e3, Rows: 100},
		LocalHour: storebench.Steady{FileBytes: 11e6, UsedBytes: 10e6, CompactBytes: 6.8e6, Rows: 40, Stacks: 30, KeptHours: 58.0 / 60,
			BytesPerSvcHour: 6.8e6 / 10 / (58.0 / 60)},
		Queries: []storebench.Query{
			{Name: "summary 30d folded_stacks (30 days stored)", SQL: "SELECT 1", Samples: 10, Want: 10, Millis: []float64{250, 260}},
			{Name: "local 1h folded_stacks (3 h stored)", SQL: "SELECT 2", Samples: 9, Want: 10, Millis: []float64{5}},
		}}
	// The agent tier is judged by issue 16's 200 KB, not RFD 072's 480 KB.
	for perHour, want := range map[float64]string{300e3: "FAIL", 190e3: "PASS"} {
		small := st
		small.Local.BytesPerSvcDay = 24 * perHour
		if got := storageRows(&small)[1]; got.Goal != "≤ 200 KB" || got.Status != want {
			t.Errorf("agent tier at %.0f KB per hour: goal %q, %s; want ≤ 200 KB, %s", perHour/1e3, got.Goal, got.Status, want)
		}
	}
	// The agent's hour is judged by the same goal, on its compact copy.
	for perHour, want := range map[float64]string{300e3: "FAIL", 190e3: "PASS"} {
		small := st
		small.LocalHour.BytesPerSvcHour = perHour
		rows := storageRows(&small)
		i := slices.IndexFunc(rows, func(r row) bool { return strings.Contains(r.Figure, "agent local tier holding its hour") })
		if i < 0 || rows[i].Goal != "≤ 200 KB" || rows[i].Status != want {
			t.Errorf("agent's hour at %.0f KB per hour: row %d %+v; want ≤ 200 KB, %s", perHour/1e3, i, rows, want)
		}
	}
	// The queries are judged by issue 16's goals: 50 ms for a 1 h flame graph
	// and a trace lookup (the RFDs' 100 and 200 ms in their column).
	for _, c := range []struct {
		name string
		ms   float64
		want string
	}{
		{"summary 1h folded_stacks (30 days stored)", 49, "PASS"}, {"summary 1h folded_stacks (30 days stored)", 60, "FAIL"},
		{"local trace lookup (3 h of trace-tagged rows)", 45, "PASS"}, {"local trace lookup (3 h of trace-tagged rows)", 80, "FAIL"},
		{"summary 30d folded_stacks (30 days stored)", 290, "PASS"}, {"summary 30d folded_stacks (30 days stored)", 310, "FAIL"},
	} {
		one := st
		one.Queries = []storebench.Query{{Name: c.name, SQL: "SELECT 1", Samples: 10, Want: 10, Millis: []float64{c.ms}}}
		rows := storageRows(&one)
		i := slices.IndexFunc(rows, func(r row) bool { return r.Figure == "query: "+c.name })
		if i < 0 || rows[i].Status != c.want {
			t.Errorf("%s at %.0f ms: row %d; want %s (%+v)", c.name, c.ms, i, c.want, rows)
		}
	}
	noisy := ag
	noisy.Pairs = []abPair{{1000, 600}, {1000, 1400}}
	if rows := agentRows(&noisy); rows[2].Status != "NOISY" {
		t.Fatalf("a ±40 %% spread must give no verdict, got %q", rows[2].Status)
	}
	for name, v := range map[string]any{"agent.json": ag, "storage.json": st} {
		if err := writeJSON(filepath.Join(dir, name), v); err != nil {
			t.Fatal(err)
		}
	}
	micro := "BenchmarkMerge-2 100 5000 ns/op 2000000 merges/s\nBenchmarkMerge-2 100 5000 ns/op 3000000 merges/s\n" +
		"BenchmarkLocalTierUptime-2 22 4398334182 ns/op 14.88 MB-duckdb-mem-peak 1.003 MB-file/svc-h 0.4915 MB-used/svc-h 4.041 MB-wal-peak 481.0 batch-ids\n"
	if err := os.WriteFile(filepath.Join(dir, "micro.txt"), []byte(micro), 0o644); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "out", "r.md")
	err := reportCmd([]string{"-dir", dir, "-results", results})
	if err == nil || !strings.Contains(err.Error(), "could not be measured") {
		t.Fatalf("symbolize.json is missing: want an error, got %v", err)
	}
	raw, rerr := os.ReadFile(results)
	if rerr != nil {
		t.Fatal(rerr)
	}
	md := string(raw)
	for _, want := range []string{
		"| agent CPU, % of one core (19 Hz, busy host) | < 1 % | ≤ 0.25 % | 0.200 % (0.12 s CPU in 60 s) | PASS |",
		"| agent RSS, peak (VmHWM) | — | ≤ 30 MB | 40.0 MB | FAIL |",
		"2.50 M merges/s",
		"| storage, gateway summary tier, per service per day",
		// 15 MB for 10 services' day is 1.5 MB per service; compact, 1.0.
		"| storage, gateway summary tier as written against the same data copied in one go | — | — | file 15.0 MB (used 12.0, free 3.0), compact copy 10.0 MB = 1.00 MB per service per day: used ×1.20, file ×1.50 | info |",
		"| storage, agent local tier, per service per hour (3 h simulated) | ~480 KB per hour (1 h kept) | ≤ 200 KB | 0.60 MB per hour, 14.40 MB per day written (100 rows) | FAIL |",
		"| storage, agent local tier holding its hour (the default 1 h retention run on the file), per service per hour | ~480 KB per hour (1 h kept) | ≤ 200 KB | 0.70 MB compact (40 rows and 30 stacks over 58 min; file 11.0 MB, used 10.0 MB, compact copy 6.8 MB) | FAIL |",
		"| storage, agent local tier after a simulated day at its default retention, used blocks per service per hour kept | ~480 KB per hour (1 h kept) | ≤ 200 KB | 0.49 MB [0.49, 0.49] (n=1) | FAIL |",
		"| batch ids an agent's file keeps (after a simulated day) | — | — | 481 ids [481, 481] (n=1) | info |",
		"| agent's write-ahead log beside its file, largest over the simulated day | — | — | 4.04 MB [4.04, 4.04] (n=1) | info |",
		"| agent's writes and retention, wall seconds per simulated hour (10 services) | — | — | 4.40 s [4.40, 4.40] (n=1) | info |",
		"MISMATCH: 9 samples returned, 10 stored",
		"symbolization per interval: not measured",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue // only table rows carry verdicts
		}
		switch {
		case strings.Contains(l, "query: summary 30d") && !strings.HasSuffix(l, "| PASS |"):
			t.Errorf("30d query at 255 ms should pass: %s", l)
		case strings.Contains(l, "query: local 1h") && !strings.HasSuffix(l, "| FAIL |"):
			t.Errorf("a wrong answer must fail: %s", l)
		case strings.Contains(l, "workload slowdown") && !strings.HasSuffix(l, "| PASS |"):
			t.Errorf("0.1 %% median slowdown should pass: %s", l)
		}
	}
}

// TestReportUnwinding builds the unwinding section from fixture runs: per
// mode the median over its runs, the ratios auto / frame_pointer, the
// agent goals stated per mode, phases not run left out rather than failed,
// and a DWARF share far below the workload's share called out.
func TestReportUnwinding(t *testing.T) {
	run := func(mode string, cpuSec, rss, ns, dwarf float64) unwindRun {
		r := unwindRun{Mode: mode, Seconds: 60, CPUSeconds: cpuSec, RSSMB: rss, AnonMB: rss / 2,
			BPFMapBytes: 8e6, SamplesKept: 1140, DWARFUnwound: dwarf, BPFRunCount: 1140, BPFRunNs: uint64(ns * 1140),
			WorkloadCPU: []float64{30, 15, 15}, LoadAvg: []float64{1, 1, 1}, EndedEarly: map[string]float64{"truncated": 0}, TTFSMillis: 200}
		if mode == modeAuto {
			r.TTFSMillis = 900
			r.UnwindTables, r.UnwindTableBytes, r.KernelTables, r.KernelTableBytes, r.UnwindProcesses = 30, 6e6, 30, 6e6, 4
			r.EndedEarly["no_unwind_rule"] = 12
		}
		return r
	}
	unw := unwindingResult{CPUs: 2, SteadySeconds: 60, WarmupSeconds: 20, NativeCFlags: nativeCFlags,
		AgentArgs: []string{"--set=receivers.ebpfprofile.max_cpu_percent=0"}, Workload: []string{"burn", "native", "python"},
		Runs: []unwindRun{
			run(modeFP, 0.12, 20, 4000, 0), run(modeAuto, 0.15, 30, 5000, 570), run(modeAutoNoPython, 0.09, 28, 3000, 570),
			run(modeFP, 0.12, 22, 4000, 0), run(modeAuto, 0.21, 33, 7000, 570), run(modeAutoNoPython, 0.11, 30, 5000, 570),
		}}
	dir := t.TempDir()
	if err := writeJSON(filepath.Join(dir, "unwinding.json"), unw); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "r.md")
	if err := reportCmd([]string{"-dir", dir, "-results", results, "-phases", "unwinding"}); err != nil {
		t.Fatalf("only the unwinding phase ran, and it is complete: %v", err)
	}
	raw, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	md := string(raw)
	for _, want := range []string{
		"| agent CPU, % of one core (19 Hz, unwinding: frame_pointer, code without frame pointers) | < 1 % | ≤ 0.25 % | 0.200 % median of 2 runs [0.200, 0.200] | PASS |",
		"| agent CPU, % of one core (19 Hz, unwinding: auto, code without frame pointers) | < 1 % | ≤ 0.25 % | 0.300 % median of 2 runs [0.250, 0.350] | FAIL |",
		"| agent RSS, steady (unwinding: frame_pointer) | — | ≤ 30 MB | 21.0 MB median of 2 runs [20.0, 22.0] | PASS |",
		"| agent RSS, steady (unwinding: auto) | — | ≤ 30 MB | 31.5 MB median of 2 runs [30.0, 33.0] | FAIL |",
		"| agent CPU with the CPython frame walk ÷ without it (unwinding: auto, python_frames true / false) | — | ≤ 1.5× | 1.80× (0.300 % / 0.167 % of a core, medians of 2 and 2 runs) | FAIL |",
		"## Unwinding: auto vs frame_pointer, and the CPython walk (19 Hz)",
		"Runs in order frame_pointer, auto, auto_no_python, frame_pointer, auto, auto_no_python",
		"| agent CPU, % of one core | 0.200 % | 0.300 % | 0.167 % | 1.50× | 1.80× |",
		"| agent RSS, median of 1 s samples | 21.0 MB | 31.5 MB | 29.0 MB | 1.50× | 1.09× |",
		"| BPF cpu_sample, ns per sample (run_time_ns ÷ run_cnt) | 4000 ns | 6000 ns | 4000 ns | 1.50× | 1.50× |",
		"| unwind table memory, kernel (memlock of unwind_tables' inner maps) | 0.00 MB | 6.00 MB | 0.00 MB | — | — |",
		"| BPF maps + unwind tables (kernel) | 8.00 MB | 14.00 MB | 8.00 MB | — | — |",
		"| stacks ended early: no_unwind_rule | 0 | 12 | 0 | — | — |",
		"| time to first sample (exec → \"sampling every CPU\"; goal ≤ 0.5 s) | 200 ms | 900 ms | 200 ms | — | — |",
		"DWARF share of kept samples with unwinding: auto: 50.0 % (median of 2 runs; the C and python workload alone are 50.0 % of the samples by their CPU time).",
		"- agent: not run (-phases \"unwinding\")",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "not being used") {
		t.Error("a DWARF share equal to the workload's share was called out")
	}

	// Without a run that has the walk off, the walk's ratio is an error,
	// not a figure made up from the other modes.
	noWalkOff := unw
	noWalkOff.Runs = slices.DeleteFunc(slices.Clone(unw.Runs), func(r unwindRun) bool { return r.Mode == modeAutoNoPython })
	if err := writeJSON(filepath.Join(dir, "unwinding.json"), noWalkOff); err != nil {
		t.Fatal(err)
	}
	if err := reportCmd([]string{"-dir", dir, "-results", results, "-phases", "unwinding"}); err == nil {
		t.Error("no run with python_frames: false, yet the report has every figure")
	}
	if raw, _ := os.ReadFile(results); !strings.Contains(string(raw), "no run without the walk (python_frames: false) | ERROR |") {
		t.Error("the report does not say the walk's ratio is missing")
	}
	if err := writeJSON(filepath.Join(dir, "unwinding.json"), unw); err != nil {
		t.Fatal(err)
	}

	// Tables that unwind next to nothing are said so, not hidden.
	low := unw
	low.Runs = append([]unwindRun(nil), unw.Runs...)
	for i := range low.Runs {
		if low.Runs[i].Mode == modeAuto {
			low.Runs[i].DWARFUnwound = 10
		}
	}
	if sec := unwindingSection(&low); !strings.Contains(sec, "auto: 0.9 %") || !strings.Contains(sec, "the tables are not being used") {
		t.Errorf("a 0.9 %% DWARF share against a 50 %% workload share is not called out:\n%s", sec)
	}
	// A mode without runs is an error, not a silent gap.
	fpOnly := unw
	fpOnly.Runs = []unwindRun{unw.Runs[0], unw.Runs[2]}
	if rows := unwindingRows(&fpOnly); rows[len(rows)-1].Status != "ERROR" {
		t.Errorf("no auto run: want an ERROR row, got %+v", rows[len(rows)-1])
	}
	// Without -phases every phase is expected: the missing ones fail.
	if err := reportCmd([]string{"-dir", dir, "-results", results}); err == nil {
		t.Error("agent.json and the others are missing: want an error without -phases")
	}
}

// TestStateEnv gives every endpoint of the shipped configurations its own
// free port and points the agent at the gateway's gRPC listener.
func TestStateEnv(t *testing.T) {
	env, err := stateEnv("/state", "../../../distributions/agent/config.yaml", "../../../distributions/gateway/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if prev, dup := seen[v]; dup && k != "HOTPATH_GATEWAY_ENDPOINT" && prev != "HOTPATH_GATEWAY_ENDPOINT" {
			t.Fatalf("%s and %s share %s", k, prev, v)
		}
		seen[v] = k
	}
	for _, k := range []string{"HOTPATH_STATE_DIR", "HOTPATH_AGENT_METRICS", "HOTPATH_GATEWAY_GRPC", "HOTPATH_GATEWAY_ENDPOINT"} {
		if _, ok := envValue(env, k); !ok {
			t.Fatalf("%s not set: %v", k, env)
		}
	}
	grpc, _ := envValue(env, "HOTPATH_GATEWAY_GRPC")
	if ep, _ := envValue(env, "HOTPATH_GATEWAY_ENDPOINT"); ep != grpc || !strings.HasPrefix(ep, "127.0.0.1:") {
		t.Fatalf("agent exports to %q, gateway listens on %q", ep, grpc)
	}
	if d, _ := envValue(env, "HOTPATH_STATE_DIR"); d != "/state" {
		t.Fatalf("state dir %q", d)
	}
}

// TestReportChurn states issue 14's targets per run from fixture runs: a
// guard that lowered the rate fails "19 Hz throughout", the samples and
// leaf shares are judged against the design, and a build without the
// per-binary work counters says so instead of failing.
func TestReportChurn(t *testing.T) {
	run := func(label string, hz []float64, samples float64, hot70 float64) churnRun {
		r := churnRun{Label: label, Seconds: 120, CPUSeconds: 0.6, RSS: []float64{50, 55, 58}, Anon: []float64{20, 25, 28}, PeakRSSMB: 75,
			Starts: map[string]int{startTrue: 240, startGCC: 120, startPython: 120, startBuiltC: 120}, MachineForks: 30,
			ChurnCPU:      map[string]float64{startTrue: 0.24, startGCC: 24, startPython: 2.4, startBuiltC: 0.12},
			ChurnFinished: map[string]int{startTrue: 240, startGCC: 120, startPython: 120, startBuiltC: 120},
			Steady:        []steadyFigure{{Name: "C", Service: "c", CPUSeconds: 60, Expected: 1140, Samples: samples}},
			Leaves:        []leafShare{{Function: "churn_hot70", Want: 70, Got: hot70, Samples: samples}, {Function: "churn_hot30", Want: 30, Got: 99 - hot70, Samples: samples}}}
		for i, h := range hz {
			r.Timeline = append(r.Timeline, churnPoint{T: float64(10 * i), Hz: h})
		}
		return r
	}
	on := run("guard on", []float64{-1, 19, 9, 4}, 500, 60)
	on.GuardLines = []string{"+40s overhead guard: sampling frequency changed"}
	off := run("guard off", []float64{-1, 19, 19, 19}, 1120, 70.5)
	on.BinaryWorkCPU = -1
	off.BinaryWork = map[string]map[string]float64{"done": {"symbols": 12}, "deferred": {"symbols": 3}}
	off.BinaryWorkCPU = 0.25
	// After the churn: the last minute of the memory samples is judged, not
	// the first ones, taken while the tables of the churn's binaries were
	// still cached.
	for i := range 180 {
		rss := 90.0
		if i >= 120 {
			rss = 52 + float64(i%3)
		}
		on.AfterRSS = append(on.AfterRSS, rss)
		on.AfterAnon = append(on.AfterAnon, rss-30)
		off.AfterRSS = append(off.AfterRSS, 90)
		off.AfterAnon = append(off.AfterAnon, 60)
	}
	on.SymbolTables, on.WindowSymbolTableBytes, on.AfterSymbolTables, on.AfterSymbolTableBytes = 60, 14.2e6, 12, 5.1e6
	on.UnwindTables, on.WindowUnwindTableBytes, on.AfterUnwindTables, on.AfterUnwindTableBytes = 31, 22.4e6, 4, 1.3e6
	res := churnResult{CPUs: 2, ConfiguredHz: 19, AlignSeconds: 15, AfterSeconds: 180, AgentConfig: "agent.yaml", Runs: []churnRun{on, off}}
	dir := t.TempDir()
	if err := writeJSON(filepath.Join(dir, "churn.json"), res); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "r.md")
	if err := reportCmd([]string{"-dir", dir, "-results", results, "-phases", "churn"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	md := string(raw)
	for _, want := range []string{
		"| churn, guard on: sampling rate held | — | 19 Hz throughout | 19 Hz from +10 s, 9 Hz from +20 s, 4 Hz from +30 s; 1 overhead-guard lines | FAIL |",
		"| churn, guard off: sampling rate held | — | 19 Hz throughout | 19 Hz throughout; 0 overhead-guard lines | PASS |",
		"| churn, guard on: samples of the steady C | — | ≥ 97 % of expected | 43.9 % (500 of 1140 = 19 Hz × 60.0 s CPU; 0 without build ID) | FAIL |",
		"| churn, guard off: samples of the steady C | — | ≥ 97 % of expected | 98.2 % (1120 of 1140 = 19 Hz × 60.0 s CPU; 0 without build ID) | PASS |",
		"| churn, guard on: C leaf shares | — | within 3 pp of the design | churn_hot70 60.0 % (designed 70 %), churn_hot30 39.0 % (designed 30 %), other leaves 1.0 %; of 500 samples, ±2.0 pp (1 σ) | FAIL |",
		"| churn, guard off: C leaf shares | — | within 3 pp of the design | churn_hot70 70.5 % (designed 70 %), churn_hot30 28.5 % (designed 30 %), other leaves 1.0 %; of 1120 samples, ±1.4 pp (1 σ) | PASS |",
		"| churn, guard off: agent CPU, % of one core | < 1 % | ≤ 1 % | 0.50 % (0.60 s CPU in 120 s) | PASS |",
		"| churn, guard off: process starts per second (the churn's own; the workload's definition) | — | ≥ 5 /s |",
		"| churn, guard on: per-binary work done / deferred / skipped | — | — | not reported by this build | info |",
		"| churn, guard off: the churn's own CPU (the work profiled, and the machine's speed) | — | — | 26.8 s CPU (22 % of one core); agent ÷ churn 2.2 %; per start: /bin/true 1 ms, gcc (compile a new C file) 200 ms, python3 -B -c 20 ms, the new C binary 1 ms | info |",
		"| churn, guard off: per-binary work done / deferred / skipped | — | — | done 12 (symbols 12); deferred 3 (symbols 3); skipped 0 (); 0.25 s CPU | info |",
		"| churn, guard on: agent RSS / anonymous memory once the churn stopped (the last minute of 180 s) | — | ≤ 60 MB | 53.0 / 23.0 MB (window medians 55.0 / 25.0 MB); symbol tables 60 (14.2 MB) at the window's end, 12 (5.1 MB) after; unwind tables 31 (22.4 MB of kernel memory) at the window's end, 4 (1.3 MB) after | PASS |",
		"| churn, guard off: agent RSS / anonymous memory once the churn stopped (the last minute of 180 s) | — | ≤ 60 MB | 90.0 / 60.0 MB (window medians 55.0 / 25.0 MB); symbol tables 0 (0.0 MB) at the window's end, 0 (0.0 MB) after; unwind tables 0 (0.0 MB of kernel memory) at the window's end, 0 (0.0 MB) after | FAIL |",
		"| RSS / RssAnon once the churn stopped, medians of the last minute of 180 s | 53.0 / 23.0 MB; symbol tables 60 (14.2 MB) at the window's end, 12 (5.1 MB) after; unwind tables 31 (22.4 MB of kernel memory) at the window's end, 4 (1.3 MB) after |",
		"## Churn: a CI node (guard on and off)",
		"- agent: not run (-phases \"churn\")",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Results of a build that did not measure the churn's CPU say so.
	if got := churnCPUString(&churnRun{Seconds: 120}); got != "not measured" {
		t.Errorf("churn CPU of a run without it: %q", got)
	}
	// 66 % against 70 % is 4 pp off, but 81 samples cannot tell (σ 5 pp).
	few := run("guard on", nil, 81, 66)
	if v := leavesVerdict(&few); v != "NOISY" {
		t.Errorf("4 pp off on 81 samples: %s, want NOISY", v)
	}
}

// TestReportContainer reports the container phase apart from the churn's:
// its rows say "container", the share of the workload's samples with the
// container's id is judged against 99 % and names the services of those
// without it, and a results directory with both phases has both sections.
func TestReportContainer(t *testing.T) {
	run := func(containers map[string]containerSamples) churnRun {
		return churnRun{Label: "guard on", Seconds: 120, CPUSeconds: 1.2, RSS: []float64{50}, Anon: []float64{20}, PeakRSSMB: 75,
			Steady:      []steadyFigure{{Name: "C", Service: "c", CPUSeconds: 60, Expected: 1140, Samples: 1130}},
			ContainerID: benchContainerID, Containers: containers}
	}
	in := run(map[string]containerSamples{"cc1": {With: 400, Without: 0}, "churn-steady-c-guard-on": {With: 1130}, "python3.11": {With: 95, Without: 5}})
	dir := t.TempDir()
	if err := writeJSON(filepath.Join(dir, "container.json"), churnResult{Phase: "container", ConfiguredHz: 19, AgentConfig: "agent.yaml", Runs: []churnRun{in}}); err != nil {
		t.Fatal(err)
	}
	onHost := run(nil)
	onHost.ContainerID = ""
	if err := writeJSON(filepath.Join(dir, "churn.json"), churnResult{ConfiguredHz: 19, AgentConfig: "agent.yaml", Runs: []churnRun{onHost}}); err != nil {
		t.Fatal(err)
	}
	results := filepath.Join(dir, "r.md")
	if err := reportCmd([]string{"-dir", dir, "-results", results, "-phases", "churn container"}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	md := string(raw)
	for _, want := range []string{
		"| container, guard on: the workload's samples with its container's id | — | ≥ 99 % | 99.7 % (1625 of 1630); without: python3.11 5 | PASS |",
		"| container, guard on: samples of the steady C | — | ≥ 97 % of expected | 99.1 % (1130 of 1140",
		"| churn, guard on: agent CPU, % of one core |",
		"## Churn: a CI node (guard on and off)",
		"## Container: the churn's workload in a container (guard on)",
		"| the workload's samples with its container's id | 99.7 % (1625 of 1630); without: python3.11 5 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md, "churn, guard on: the workload's samples with its container's id") {
		t.Error("the churn phase's run (not in a container) has a container row")
	}
	// 97 of 100: below the goal.
	few := run(map[string]containerSamples{"cc1": {With: 97, Without: 3}})
	if share, s := containerSamplesString(&few); share >= containerSamplesGoal || !strings.Contains(s, "without: cc1 3") {
		t.Errorf("97 of 100: %.1f %%, %q", share, s)
	}
}
