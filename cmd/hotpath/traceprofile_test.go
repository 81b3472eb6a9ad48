package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/pdict"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

// tracedBatch is a batch whose samples were all taken under one trace and
// span (hex; "" for untraced).
type tracedBatch struct {
	batch
	trace, span string
}

// tracedOTLP lays batches out as otlp does and links each traced batch's
// samples to its trace/span in the dictionary's link table, as the receiver
// does for tagged samples.
func tracedOTLP(t testing.TB, bs []tracedBatch) pprofile.Profiles {
	plain := make([]batch, len(bs))
	for i, b := range bs {
		plain[i] = b.batch
	}
	pd := otlp(plain)
	links := pdict.New(pd.Dictionary())
	for i, b := range bs {
		if b.trace == "" {
			continue
		}
		var tid [16]byte
		var sid [8]byte
		if _, err := hex.Decode(tid[:], []byte(b.trace)); err != nil {
			t.Fatal(err)
		}
		if _, err := hex.Decode(sid[:], []byte(b.span)); err != nil {
			t.Fatal(err)
		}
		li := links.Link(tid, sid)
		samples := pd.ResourceProfiles().At(i).ScopeProfiles().At(0).Profiles().At(0).Samples()
		for j := 0; j < samples.Len(); j++ {
			samples.At(j).SetLinkIndex(li)
		}
	}
	return pd
}

// writeTraced stores batches through the real exporter into a new file of
// the tier; with endpoint set it keeps serving queries there until the test
// ends.
func writeTraced(t testing.TB, tier, path, endpoint string, bs []tracedBatch) {
	t.Helper()
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Tier = tier
	cfg.Path = path
	cfg.Query.Enabled = endpoint != ""
	cfg.Query.HTTP.NetAddr.Endpoint = endpoint
	ctx := context.Background()
	exp, err := f.CreateProfiles(ctx, exportertest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := exp.ConsumeProfiles(ctx, tracedOTLP(t, bs)); err != nil {
		t.Fatal(err)
	}
	if endpoint == "" {
		if err := exp.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Cleanup(func() { _ = exp.Shutdown(ctx) })
	table := "cpu_profile_samples_local"
	if tier == "summary" {
		table = "cpu_profile_summaries"
	}
	c := sqlquery.Client{Endpoint: endpoint}
	for i := 0; ; i++ {
		res, err := c.Query(ctx, "SELECT count(*) FROM "+table)
		if err == nil && len(res.Rows) == 1 && fmt.Sprint(res.Rows[0][0]) != "0" {
			return
		}
		if i == 1000 {
			t.Fatalf("rows never became visible at %s: %v", endpoint, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

const (
	slowTrace  = "0af7651916cd43dd8448eb211c80319c"
	otherTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	frontSpan  = "b7ad6b7169203331"
	backSpan1  = "00f067aa0ba902b7"
	backSpan2  = "53995c3f42cd8ad8"
)

// traceFixture: trace slowTrace went frontend → payment (two spans in
// payment, in two windows); a concurrent trace and untraced background work
// ran in payment too and must not show in slowTrace's profile.
func traceFixture(now time.Time) []tracedBatch {
	at := now.Add(-10 * time.Minute)
	return []tracedBatch{
		{batch{at: at, service: "frontend", build: newBuild, exe: "/srv/frontend", pod: "fe-1", stacks: map[string]int64{
			"main.main;main.handle;main.renderPage": 18,
			"main.main;main.handle;json.Marshal":    2,
		}}, slowTrace, frontSpan},
		{batch{at: at, service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-1", stacks: map[string]int64{
			"main.main;main.serve;main.validateSignature;rsa.VerifyPKCS1v15": 50,
			"main.main;main.serve;main.serializeResponse":                    2,
		}}, slowTrace, backSpan1},
		{batch{at: at.Add(15 * time.Second), service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-1", stacks: map[string]int64{
			"main.main;main.serve;main.validateSignature;rsa.VerifyPKCS1v15": 34,
			"runtime.gcBgMarkWorker": 3,
		}}, slowTrace, backSpan2},
		{batch{at: at, service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-1", stacks: map[string]int64{
			"main.main;main.serve;main.refund": 40,
		}}, otherTrace, "1111111111111111"},
		{batch: batch{at: at, service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-1", stacks: map[string]int64{
			"main.main;main.idle": 100,
		}}},
	}
}

func traceDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.duckdb")
	writeTraced(t, "local", path, "", traceFixture(time.Now()))
	return path
}

func TestTraceProfileTextPerService(t *testing.T) {
	db := traceDB(t)
	out, stderr, code := runCLI(t, "trace-profile", slowTrace, "--db", db)
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	// payment: 84+2+3 = 89 samples = 4.68 s at 19 Hz; frontend 20 = 1.05 s.
	for _, want := range []string{
		"trace " + slowTrace + ": 2 services, 109 samples, ~5.74s CPU (19 Hz, 52.6ms per sample; local tier",
		"  payment                     4.68s   81.7% of the trace's CPU\n",
		"  frontend                    1.05s   18.3% of the trace's CPU\n",
		"Top CPU Hotspots (payment, trace " + slowTrace + "):\n  89 samples, ~4.68s CPU, 2 spans, ",
		"   94.4%     4.42s  main.validateSignature → rsa.VerifyPKCS1v15\n",
		"    3.4%   157.9ms  runtime.gcBgMarkWorker\n",
		"    2.2%   105.3ms  main.serve → main.serializeResponse\n",
		"Top CPU Hotspots (frontend, trace " + slowTrace + "):\n  20 samples, ~1.05s CPU, 1 span, ",
		"   90.0%   947.4ms  main.handle → main.renderPage\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Index(out, "(payment,") > strings.Index(out, "(frontend,") {
		t.Errorf("services not ordered by CPU:\n%s", out)
	}
	// The concurrent trace and the untraced samples of the same service
	// and window do not leak in.
	for _, leak := range []string{"refund", "idle"} {
		if strings.Contains(out, leak) {
			t.Errorf("%s leaked into the trace:\n%s", leak, out)
		}
	}

	// A traceparent (upper case, header name included) names the same
	// trace; flags may come first; --frequency scales CPU time.
	tp := "traceparent: 00-" + strings.ToUpper(slowTrace) + "-" + frontSpan + "-01"
	out2, stderr, code := runCLI(t, "trace-profile", "--db", db, "--frequency", "99", "-n", "1", tp)
	if code != 0 {
		t.Fatalf("traceparent: code %d: %s", code, stderr)
	}
	if !strings.Contains(out2, "109 samples, ~1.10s CPU (99 Hz, 10.1ms per sample") || !strings.Contains(out2, "   94.4%   848.5ms  main.validateSignature → rsa.VerifyPKCS1v15\n") {
		t.Errorf("traceparent / 99 Hz:\n%s", out2)
	}
	if strings.Contains(out2, "gcBgMarkWorker") {
		t.Errorf("-n 1 shows more than one hotspot:\n%s", out2)
	}

	// --service: only that service.
	out, _, code = runCLI(t, "trace-profile", slowTrace, "--db", db, "--service", "frontend")
	if code != 0 || !strings.Contains(out, "1 service, 20 samples") || strings.Contains(out, "payment") {
		t.Errorf("--service frontend: %d\n%s", code, out)
	}
}

func TestTraceProfileFoldedJSONGraph(t *testing.T) {
	db := traceDB(t)
	out, stderr, code := runCLI(t, "trace-profile", slowTrace, "--db", db, "--format", "folded")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	want := `payment;main.main;main.serve;main.validateSignature;rsa.VerifyPKCS1v15 84
frontend;main.main;main.handle;main.renderPage 18
payment;runtime.gcBgMarkWorker 3
frontend;main.main;main.handle;json.Marshal 2
payment;main.main;main.serve;main.serializeResponse 2
`
	if out != want {
		t.Fatalf("folded:\n%s\nwant:\n%s", out, want)
	}

	out, stderr, code = runCLI(t, "trace-profile", slowTrace, "--db", db, "--format", "json")
	if code != 0 {
		t.Fatalf("json: code %d: %s", code, stderr)
	}
	var doc struct {
		TraceID  string  `json:"trace_id"`
		Period   float64 `json:"sample_period_ms"`
		Samples  int64   `json:"total_samples"`
		Services []struct {
			Service   string   `json:"service"`
			Samples   int64    `json:"samples"`
			CPUTimeMs float64  `json:"cpu_time_ms"`
			Spans     []string `json:"span_ids"`
			Builds    []string `json:"build_ids"`
			Hotspots  []struct {
				Function string  `json:"function"`
				Caller   string  `json:"caller"`
				Samples  int64   `json:"samples"`
				Share    float64 `json:"share"`
			} `json:"hotspots"`
			Stacks []struct {
				Frames  []string `json:"frames"`
				Samples int64    `json:"samples"`
			} `json:"stacks"`
		} `json:"services"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if doc.TraceID != slowTrace || doc.Samples != 109 || len(doc.Services) != 2 || fmt.Sprintf("%.2f", doc.Period) != "52.63" {
		t.Fatalf("json: %+v", doc)
	}
	pay := doc.Services[0]
	if pay.Service != "payment" || pay.Samples != 89 || fmt.Sprintf("%.0f", pay.CPUTimeMs) != "4684" ||
		strings.Join(pay.Spans, ",") != backSpan1+","+backSpan2 || len(pay.Builds) != 1 || pay.Builds[0] != oldBuild ||
		pay.Hotspots[0].Function != "rsa.VerifyPKCS1v15" || pay.Hotspots[0].Caller != "main.validateSignature" || pay.Hotspots[0].Samples != 84 ||
		len(pay.Stacks) != 3 || pay.Stacks[0].Samples != 84 {
		t.Errorf("payment: %+v", pay)
	}
	if fe := doc.Services[1]; fe.Service != "frontend" || fe.Samples != 20 || strings.Join(fe.Spans, ",") != frontSpan {
		t.Errorf("frontend: %+v", fe)
	}

	for _, f := range []string{"svg", "html"} {
		out, stderr, code = runCLI(t, "trace-profile", slowTrace, "--db", db, "--format", f)
		if code != 0 {
			t.Fatalf("%s: code %d: %s", f, code, stderr)
		}
		for _, want := range []string{"trace " + slowTrace, "payment", "frontend", "rsa.VerifyPKCS1v15", "main.renderPage"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s lacks %q", f, want)
			}
		}
		if strings.Contains(out, "main.refund") || strings.Contains(out, "main.idle") {
			t.Errorf("%s shows another trace's frames", f)
		}
	}
}

// The gateway tier through a running exporter's query endpoint: the same
// per-service answer.
func TestTraceProfileSummaryEndpoint(t *testing.T) {
	ep := testport.Addr(t)
	writeTraced(t, "summary", filepath.Join(t.TempDir(), "gateway.duckdb"), ep, traceFixture(time.Now()))
	out, stderr, code := runCLI(t, "trace-profile", slowTrace, "--db", ep, "--format", "folded", "--service", "payment")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	if !strings.HasPrefix(out, "payment;main.main;main.serve;main.validateSignature;rsa.VerifyPKCS1v15 84\n") || strings.Contains(out, "frontend") || strings.Contains(out, "refund") {
		t.Fatalf("summary tier:\n%s", out)
	}
	out, _, code = runCLI(t, "trace-profile", slowTrace, "--db", ep)
	if code != 0 || !strings.Contains(out, "2 services, 109 samples") || !strings.Contains(out, "summary tier on collector at "+ep) {
		t.Fatalf("summary text: %d\n%s", code, out)
	}
}

func TestTraceProfileErrors(t *testing.T) {
	db := traceDB(t)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--db", db}, 2, []string{"a trace ID is required", "Usage:\n  hotpath trace-profile <trace-id|traceparent>"}},
		{[]string{slowTrace, otherTrace, "--db", db}, 2, []string{"one trace ID expected, got 2"}},
		{[]string{"abc123", "--db", db}, 1, []string{"want 32 hex characters", "got 6"}},
		{[]string{strings.Repeat("g", 32), "--db", db}, 1, []string{"not hexadecimal"}},
		{[]string{strings.Repeat("0", 32), "--db", db}, 1, []string{"all-zero trace ID is invalid"}},
		{[]string{"00-" + slowTrace + "-abc-01", "--db", db}, 1, []string{"W3C traceparent is 00-"}},
		{[]string{slowTrace, "--db", db, "--format", "pprof"}, 1, []string{"--format must be text, folded, json, svg or html"}},
		{[]string{slowTrace, "--db", db, "--frequency", "0"}, 1, []string{"--frequency must be"}},
		// A trace with no samples: the reasons, with the period.
		{[]string{"11112222333344445555666677778888", "--db", db}, 1, []string{
			"no samples for trace 11112222333344445555666677778888 on " + db,
			"less than one sampling period (52.6ms at 19 Hz)",
			"trace_context enabled", "sdk/go/tracectx",
			"keeps 1 hour by default; the gateway keeps trace-tagged summaries 7 days",
			"holds 149 trace-tagged samples of 2 traces",
		}},
		{[]string{"11112222333344445555666677778888", "--db", db, "--frequency", "99"}, 1, []string{"(10.1ms at 99 Hz)"}},
		// The trace exists, in other services.
		{[]string{slowTrace, "--db", db, "--service", "checkout"}, 1, []string{`in service "checkout"`, "the trace has samples in: payment (89 samples), frontend (20 samples)"}},
	} {
		_, stderr, code := runCLI(t, append([]string{"trace-profile"}, tc.args...)...)
		if code != tc.code {
			t.Errorf("%v: code %d want %d: %s", tc.args, code, tc.code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%v: stderr lacks %q:\n%s", tc.args, w, stderr)
			}
		}
	}

	// A file without any traced sample says trace context is not reaching it.
	plain := filepath.Join(t.TempDir(), "plain.duckdb")
	writeDB(t, "local", plain, "", deployFixture(time.Now()))
	_, stderr, code := runCLI(t, "trace-profile", slowTrace, "--db", plain)
	if code != 1 || !strings.Contains(stderr, "holds no trace-tagged samples at all") {
		t.Errorf("untraced file: %d %s", code, stderr)
	}
}

// BenchmarkTraceProfileLocalHour measures `hotpath trace-profile` on a
// local-tier file holding an hour of a busy service: 2,000 untraced
// distinct stacks of depth 10 at each of 240 15-second intervals (480k
// rows), plus 2,000 traces of 5 stacks each in two services; one trace is
// looked up (the tables have no index: a scan with zone maps).
func BenchmarkTraceProfileLocalHour(b *testing.B) {
	path := filepath.Join(b.TempDir(), "agent.duckdb")
	now := time.Now()
	var bs []tracedBatch
	for i := 0; i < 240; i++ {
		st := map[string]int64{}
		for s := 0; s < 2000; s++ {
			folded := "main.main"
			for d := 1; d < 10; d++ {
				folded += fmt.Sprintf(";pkg%d.fn%d", d, (s>>uint(d%8))%23)
			}
			st[folded+fmt.Sprintf(";leaf%d", s)] = int64(1 + s%5)
		}
		bs = append(bs, tracedBatch{batch: batch{at: now.Add(-time.Hour + time.Duration(i)*15*time.Second), service: "api", build: oldBuild, exe: "/srv/api", stacks: st}})
	}
	var want string
	for i := 0; i < 2000; i++ {
		var tid [16]byte
		binary.BigEndian.PutUint64(tid[8:], uint64(i+1))
		trace := hex.EncodeToString(tid[:])
		want = trace
		at := now.Add(-time.Hour + time.Duration(i%240)*15*time.Second)
		for _, svc := range []string{"api", "db-proxy"} {
			st := map[string]int64{}
			for s := 0; s < 5; s++ {
				st[fmt.Sprintf("main.main;main.serve;handler%d;work%d", i%50, s)] = int64(1 + s)
			}
			bs = append(bs, tracedBatch{batch{at: at, service: svc, build: oldBuild, exe: "/srv/" + svc, stacks: st}, trace, "00f067aa0ba902b7"})
		}
	}
	writeTraced(b, "local", path, "", bs)
	b.ResetTimer()
	for b.Loop() {
		out, stderr, code := runCLIB(b, "trace-profile", want, "--db", path, "--format", "json")
		if code != 0 || !strings.Contains(out, `"total_samples": 30`) {
			b.Fatalf("code %d: %s\n%s", code, stderr, out)
		}
	}
}

func runCLIB(b *testing.B, args ...string) (string, string, int) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestMixedFrequenciesGiveCPUTime: nodes sampling at 19, 49 and 99 Hz in one
// range. CPU time is each sample's own period, whatever --frequency says
// (it only covers samples stored without a period), in trace-profile's
// text and JSON and in the pprof file's cpu values, on both tiers.
func TestMixedFrequenciesGiveCPUTime(t *testing.T) {
	const mixedTrace = "5ce0e9a56015fec5aadfa328ae398115"
	at := time.Now().Add(-5 * time.Minute)
	// One CPU-second at each frequency: 19, 49 and 99 samples.
	fixture := []tracedBatch{
		{batch{at: at, service: "frontend", build: newBuild, exe: "/srv/frontend", pod: "fe-1", hz: 19, stacks: map[string]int64{
			"main.main;main.handle;main.renderPage": 19,
		}}, mixedTrace, frontSpan},
		{batch{at: at, service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-1", hz: 49, stacks: map[string]int64{
			"main.main;main.serve;rsa.VerifyPKCS1v15": 49,
		}}, mixedTrace, backSpan1},
		{batch{at: at.Add(time.Second), service: "payment", build: oldBuild, exe: "/srv/payment", pod: "pay-2", hz: 99, stacks: map[string]int64{
			"main.main;main.serve;rsa.VerifyPKCS1v15": 99,
		}}, mixedTrace, backSpan2},
	}
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), tier+".duckdb")
			writeTraced(t, tier, db, "", fixture)
			out, stderr, code := runCLI(t, "trace-profile", mixedTrace, "--db", db, "--frequency", "7")
			if code != 0 {
				t.Fatalf("code %d: %s", code, stderr)
			}
			for _, want := range []string{
				"2 services, 167 samples, ~3.00s CPU (19, 49 and 99 Hz;",
				"  payment                     2.00s   66.7% of the trace's CPU\n",
				"  frontend                 1000.0ms   33.3% of the trace's CPU\n", // 19 × 52631578 ns
				"  148 samples, ~2.00s CPU, 2 spans",
				"  100.0%     2.00s  main.serve → rsa.VerifyPKCS1v15\n",
			} {
				if !strings.Contains(out, want) {
					t.Errorf("missing %q in:\n%s", want, out)
				}
			}

			js, stderr, code := runCLI(t, "trace-profile", mixedTrace, "--db", db, "--format", "json")
			if code != 0 {
				t.Fatalf("json: code %d: %s", code, stderr)
			}
			var doc struct {
				FrequencyHz   float64   `json:"frequency_hz"`
				FrequenciesHz []float64 `json:"frequencies_hz"`
				CPUTimeMs     float64   `json:"cpu_time_ms"`
			}
			if err := json.Unmarshal([]byte(js), &doc); err != nil {
				t.Fatal(err)
			}
			if doc.FrequencyHz != 99 || fmt.Sprint(doc.FrequenciesHz) != "[99 49 19]" || fmt.Sprintf("%.1f", doc.CPUTimeMs) != "3000.0" {
				t.Errorf("json: %+v", doc)
			}

			// pprof: the period of most samples (99 Hz), cpu values at
			// each sample's own.
			pb := filepath.Join(t.TempDir(), "payment.pb.gz")
			if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "payment", "--since", "1h", "--format", "pprof", "-o", pb); code != 0 {
				t.Fatalf("pprof: %s", stderr)
			}
			p := readPprof(t, pb)
			var samples, cpu int64
			for _, s := range p.Sample {
				samples += s.Value[0]
				cpu += s.Value[1]
			}
			if p.Period != int64(time.Second/99) || p.SampleType[1].Type != "cpu" || samples != 148 || cpu < 1999_999_000 || cpu > 2000_000_000 {
				t.Errorf("pprof: period %d, types %v, %d samples, %d ns", p.Period, p.SampleType, samples, cpu)
			}

			// The stack stored at 49 and at 99 Hz is one stack of the
			// profile (rows merge on their frame IDs).
			pj, stderr, code := runCLI(t, "profile", "--db", db, "--service", "payment", "--since", "1h", "--format", "json")
			if code != 0 {
				t.Fatalf("profile json: code %d: %s", code, stderr)
			}
			var prof struct {
				Stacks []struct {
					Frames  []string `json:"frames"`
					Samples int64    `json:"samples"`
				} `json:"stacks"`
			}
			if err := json.Unmarshal([]byte(pj), &prof); err != nil {
				t.Fatal(err)
			}
			if len(prof.Stacks) != 1 || prof.Stacks[0].Samples != 148 || strings.Join(prof.Stacks[0].Frames, ";") != "main.main;main.serve;rsa.VerifyPKCS1v15" {
				t.Errorf("profile json: stacks %+v, want one of 148 samples", prof.Stacks)
			}
		})
	}
}

func readPprof(t *testing.T, path string) *profile.Profile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A trace's stored range names the end's date only when it is on another
// day than the start.
func TestStoredWhen(t *testing.T) {
	at := time.Date(2026, 11, 25, 23, 59, 0, 0, time.UTC)
	for _, c := range []struct {
		first, last time.Time
		want        string
	}{
		{at, at, "at 2026-11-25 23:59:00"},
		{at.Add(-time.Minute), at, "from 2026-11-25 23:58:00 to 23:59:00"},
		{at, at.Add(time.Minute), "from 2026-11-25 23:59:00 to 2026-11-26 00:00:00"},
		{at, at.AddDate(1, 0, 0), "from 2026-11-25 23:59:00 to 2027-11-25 23:59:00"},
	} {
		if got := storedWhen(c.first, c.last); got != c.want {
			t.Errorf("storedWhen(%v, %v) = %q, want %q", c.first, c.last, got, c.want)
		}
	}
}
