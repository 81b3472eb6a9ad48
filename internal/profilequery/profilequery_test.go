package profilequery

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/hotpath-dev/hotpath/internal/timerange"
)

var r0 = timerange.Range{Since: time.Date(2025, 12, 15, 14, 0, 0, 0, time.UTC), Until: time.Date(2025, 12, 15, 15, 0, 0, 0, time.UTC)}

func prof(stacks ...Stack) *Profile {
	return &Profile{Service: "api", Range: r0, Tier: Summary, Stacks: stacks, Binaries: map[string]string{"aaaa1111bbbb2222": "/usr/bin/app"}}
}

func st(build string, count int64, folded string) Stack {
	return Stack{BuildID: build, Count: count, Frames: strings.Split(folded, ";")}
}

func TestFoldedAnnotatesOnlyAcrossBuilds(t *testing.T) {
	one := prof(st("aaaa1111bbbb2222", 5, "main;app+0x1a2b"), st("aaaa1111bbbb2222", 7, "main;work"))
	var b bytes.Buffer
	if err := one.WriteFolded(&b); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "main;work 7\nmain;[build_id:aaaa1111bbbb] 0x1a2b 5\n" {
		t.Fatalf("one build:\n%s", got)
	}
	two := prof(st("aaaa1111bbbb2222", 5, "main;work"), st("ccc", 9, "main;work"), st("", 1, "main;libc.so.6+0x10"))
	b.Reset()
	if err := two.WriteFolded(&b); err != nil {
		t.Fatal(err)
	}
	want := "[build_id:ccc] main;work 9\n[build_id:aaaa1111bbbb] main;work 5\n[build_id:unknown] main;libc.so.6+0x10 1\n"
	if b.String() != want {
		t.Fatalf("two builds:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestFunctionsSelfAndCum(t *testing.T) {
	p := prof(
		st("b", 10, "main;f;f;g"), // recursion: f counted once in cum
		st("b", 5, "main;f"),
		st("b", 3, "main;h"),
	)
	fns := p.Functions()
	got := map[string][2]int64{}
	for _, f := range fns {
		got[f.Name] = [2]int64{f.Self, f.Cum}
	}
	want := map[string][2]int64{"main": {0, 18}, "f": {5, 15}, "g": {10, 10}, "h": {3, 3}}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: self/cum %v want %v", k, got[k], v)
		}
	}
	if fns[0].Name != "g" || fns[0].SelfShare < 0.55 || fns[0].SelfShare > 0.56 {
		t.Fatalf("first %+v", fns[0])
	}
	SortByCum(fns)
	if fns[0].Name != "main" || fns[1].Name != "f" {
		t.Fatalf("by cum: %v %v", fns[0].Name, fns[1].Name)
	}
}

func TestDiffNormalizesToShare(t *testing.T) {
	// The baseline served half the traffic; shares are equal except b->c.
	a := prof(st("x", 50, "main;a"), st("x", 50, "main;b"))
	b := prof(st("y", 100, "main;a"), st("y", 60, "main;b"), st("y", 40, "main;c"))
	var buf bytes.Buffer
	if err := WriteDiff(&buf, Diff(a, b)); err != nil {
		t.Fatal(err)
	}
	want := "main;a 100 100\nmain;b 100 60\nmain;c 0 40\n"
	if buf.String() != want {
		t.Fatalf("diff:\n%s\nwant:\n%s", buf.String(), want)
	}
}

// gateProfile spreads n samples over functions by share (percent).
func gateProfile(build string, n int64, shares map[string]float64) *Profile {
	p := prof()
	for fn, pct := range shares {
		p.Stacks = append(p.Stacks, st(build, int64(float64(n)*pct/100), "main;serve;"+fn))
	}
	return p
}

func TestGate(t *testing.T) {
	base := gateProfile("old", 20000, map[string]float64{"json.Unmarshal": 30, "db.Query": 40, "gzip.Write": 30})
	same := gateProfile("old", 18000, map[string]float64{"json.Unmarshal": 29.5, "db.Query": 40.5, "gzip.Write": 30})
	regressed := gateProfile("new", 18000, map[string]float64{"json.Unmarshal": 45, "db.Query": 30, "gzip.Write": 25})
	newHot := gateProfile("new", 18000, map[string]float64{"json.Unmarshal": 27, "db.Query": 38, "gzip.Write": 28, "regexp.Compile": 7})

	if r := Gate(base, same, DefaultGateOptions); r.Verdict != Pass {
		t.Fatalf("same build: %s %s %+v", r.Verdict, r.Reason, r.Failures)
	}
	r := Gate(base, regressed, DefaultGateOptions)
	if r.Verdict != Fail || len(r.Failures) != 1 || r.Failures[0].Function != "json.Unmarshal" || r.Failures[0].Kind != "regression" {
		t.Fatalf("regression: %s %+v", r.Verdict, r.Failures)
	}
	if d := r.Failures[0].DeltaPP; d < 14.9 || d > 15.1 {
		t.Fatalf("delta %v", d)
	}
	// 7% of CPU in a function the baseline never ran: above 5pp, so the
	// share rule names it first; with a 10pp threshold the top-N rule does.
	r = Gate(base, newHot, DefaultGateOptions)
	if r.Verdict != Fail || r.Failures[0].Function != "regexp.Compile" || r.Failures[0].Kind != "regression" {
		t.Fatalf("new hot: %+v", r.Failures)
	}
	opt := DefaultGateOptions
	opt.MaxIncrease = 10
	r = Gate(base, newHot, opt)
	if r.Verdict != Fail || r.Failures[0].Kind != "new in top 10" {
		t.Fatalf("new in top: %+v", r.Failures)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf, "build old", "build new", Palette{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "hotpath gate: FAIL") || !strings.Contains(buf.String(), "regexp.Compile  [new in top 10]") || strings.Contains(buf.String(), "\x1b[") {
		t.Fatalf("report:\n%s", buf.String())
	}
}

func TestGateNoiseGuards(t *testing.T) {
	// 40 vs 60 samples: +20pp, but 100 samples cannot tell.
	small := gateProfile("a", 100, map[string]float64{"f": 40, "g": 60})
	smallB := gateProfile("b", 100, map[string]float64{"f": 60, "g": 40})
	opt := DefaultGateOptions
	if r := Gate(small, smallB, opt); r.Verdict != Inconclusive {
		t.Fatalf("min samples: %s", r.Verdict)
	}
	opt.MinSamples = 50
	// z for 40% vs 60% at n=100 each is 2.83 > 2.33: significant, fails.
	if r := Gate(small, smallB, opt); r.Verdict != Fail {
		t.Fatalf("n=100: %s", r.Verdict)
	}
	// z for 40% vs 55% at n=60 each is 1.65: noise, passes.
	tiny := gateProfile("a", 60, map[string]float64{"f": 40, "g": 60})
	tinyB := gateProfile("b", 60, map[string]float64{"f": 55, "g": 45})
	if r := Gate(tiny, tinyB, opt); r.Verdict != Pass {
		t.Fatalf("+15pp on 60 samples must not be significant: %+v", r.Failures)
	}
	if z := zForAlpha(0.01); z < 2.326 || z > 2.327 {
		t.Fatalf("z(0.01) = %v", z)
	}
}

func TestPprofIsValid(t *testing.T) {
	p := prof(st("aaaa1111bbbb2222", 10, "main;work;app+0x1a2b"), st("ccc", 4, "main;work"))
	pp, err := p.Pprof()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := pp.Write(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Sample) != 2 || back.Sample[0].Value[0] != 10 || back.Sample[0].Label["build_id"][0] != "aaaa1111bbbb2222" {
		t.Fatalf("samples: %v", back.Sample)
	}
	leaf := back.Sample[0].Location[0].Line[0].Function.Name
	if leaf != "[build_id:aaaa1111bbbb] 0x1a2b" || back.Sample[0].Location[0].Mapping.BuildID != "aaaa1111bbbb2222" {
		t.Fatalf("leaf %q", leaf)
	}
}

// An error message names the ten busiest services and counts the rest: a
// gateway with hundreds of services must not print them all on one line.
func TestListServicesNamesTheBusiestTen(t *testing.T) {
	var svcs []ServiceSummary
	for i := range 25 {
		svcs = append(svcs, ServiceSummary{Service: fmt.Sprintf("svc-%02d", i), Samples: int64(100 - i)})
	}
	got := ListServices(svcs)
	if !strings.HasPrefix(got, "svc-00 (100 samples), svc-01 (99 samples), ") ||
		!strings.HasSuffix(got, "svc-09 (91 samples), and 15 more with 1245 samples in all") || strings.Contains(got, "svc-10") {
		t.Fatalf("25 services: %q", got)
	}
	if got := ListServices(svcs[:10]); strings.Contains(got, "more") || !strings.HasSuffix(got, "svc-09 (91 samples)") {
		t.Fatalf("10 services: %q", got)
	}
	if got := ListServices(svcs[:1]); got != "svc-00 (100 samples)" {
		t.Fatalf("1 service: %q", got)
	}
}
