package main

import (
	"os"
	"path/filepath"
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
		Summary: storebench.Tier{Path: "/x/summary.duckdb", BytesPerSvcDay: 1.5e6, Rows: 100},
		Local:   storebench.Tier{Path: "/x/local.duckdb", BytesPerSvcDay: 24 * 600e3, Rows: 100},
		Queries: []storebench.Query{
			{Name: "summary 30d folded_stacks (30 days stored)", SQL: "SELECT 1", Samples: 10, Want: 10, Millis: []float64{250, 260}},
			{Name: "local 1h folded_stacks (3 h stored)", SQL: "SELECT 2", Samples: 9, Want: 10, Millis: []float64{5}},
		}}
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
	micro := "BenchmarkMerge-2 100 5000 ns/op 2000000 merges/s\nBenchmarkMerge-2 100 5000 ns/op 3000000 merges/s\n"
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
