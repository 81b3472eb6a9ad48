package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/testport"
)

// localDB writes the deploy fixture into a local-tier file.
func localDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", path, "", deployFixture(time.Now()))
	return path
}

func TestProfileFoldedAnnotatesBuilds(t *testing.T) {
	db := localDB(t)
	out, stderr, code := runCLI(t, "profile", "--db", db, "--service", "api", "--since", "1h")
	if code != 0 {
		t.Fatalf("code %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Two builds in the hour: every line is annotated; the old build's
	// unresolved frame reads [build_id:...] 0x1a2b (RFD 072).
	want := map[string]bool{
		"[build_id:1f0e9d8c7b6a] main.main;main.serve;db.Query 6400":                        true,
		"[build_id:2a3b4c5d6e7f] main.main;main.serve;json.Unmarshal 4800":                  true,
		"[build_id:1f0e9d8c7b6a] main.main;[build_id:1f0e9d8c7b6a] 0x1a2b 56":               true,
		"[build_id:1f0e9d8c7b6a] main.main;main.serve;db.Query;syscall.Syscall;read_[k] 80": true,
	}
	for _, l := range lines {
		delete(want, l)
	}
	if len(want) > 0 {
		t.Fatalf("missing %v in:\n%s", want, out)
	}
	if !strings.HasPrefix(lines[0], "[build_id:1f0e9d8c7b6a] main.main;main.serve;db.Query 6400") {
		t.Fatalf("not sorted by count: %s", lines[0])
	}

	// One build: plain flamegraph.pl lines.
	out, _, code = runCLI(t, "profile", "--db", db, "--service", "api", "--since", "1h", "--build-id", "2a3b")
	if code != 0 || out != "main.main;main.serve;json.Unmarshal 4800\nmain.main;main.serve;db.Query 3160\nmain.main;main.serve;gzip.Write 2400\n" {
		t.Fatalf("one build: %d\n%s", code, out)
	}
	// --until and absolute times in another zone: only the first window
	// (50..46 minutes ago). Written in Tokyo time, which has no DST.
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	since := time.Now().Add(-55 * time.Minute).In(tokyo).Format("2006-01-02 15:04:05")
	until := time.Now().Add(-40 * time.Minute).In(tokyo).Format("2006-01-02 15:04:05")
	out, stderr, code = runCLI(t, "profile", "--db", db, "--service", "api", "--since", since, "--until", until, "--tz", "Asia/Tokyo", "--format", "json")
	if code != 0 {
		t.Fatalf("json: %d %s", code, stderr)
	}
	var doc struct {
		Samples  int64    `json:"total_samples"`
		BuildIDs []string `json:"build_ids"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Samples != 4*(600+800+590+10+7) || len(doc.BuildIDs) != 1 || doc.BuildIDs[0] != oldBuild {
		t.Fatalf("window: %+v", doc)
	}
}

// TestProfileNamesFramesTheDictionaryLacks: the CLI names frames from the
// IDs its query returns with the frames they use (profilequery's
// readStacks). A frame ID the dictionary does not hold reads [missing], as
// the SQL views show it, and stacks that then read the same are one line.
func TestProfileNamesFramesTheDictionaryLacks(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tier+".duckdb")
			writeDB(t, tier, path, "", []batch{{at: time.Now().Add(-5 * time.Minute), service: "api", stacks: map[string]int64{
				"main.main;alpha.A;leaf.X": 10, "main.main;beta.B;leaf.X": 5, "main.main;gamma.C;leaf.X": 1,
			}}})
			db, err := sql.Open("duckdb", path)
			if err != nil {
				t.Fatal(err)
			}
			frames := map[string]string{"local": "profile_frame_dictionary_local", "summary": "profile_frame_dictionary"}[tier]
			res, err := db.Exec("DELETE FROM " + frames + " WHERE frame_name IN ('alpha.A', 'beta.B')")
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 2 {
				t.Fatalf("deleted %d frames, want 2", n)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			args := []string{"profile", "--db", path, "--service", "api", "--since", "1h"}
			if tier == "local" {
				args = append(args, "--local")
			}
			out, stderr, code := runCLI(t, args...)
			if want := "main.main;[missing];leaf.X 15\nmain.main;gamma.C;leaf.X 1\n"; code != 0 || out != want {
				t.Fatalf("code %d: %s\ngot:\n%swant:\n%s", code, stderr, out, want)
			}
		})
	}
}

// writeCounter counts the writes made to it.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// TestProfileOutputIsBuffered: the folded lines reach standard output in
// buffer-sized writes, not one write (a system call on a terminal, pipe or
// file) per line.
func TestProfileOutputIsBuffered(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.duckdb")
	stacks := map[string]int64{}
	for i := range 2000 {
		stacks[fmt.Sprintf("main.main;pkg.handler%d;leaf.work%d", i%40, i)] = int64(1 + i%7)
	}
	writeDB(t, "local", path, "", []batch{{at: time.Now().Add(-5 * time.Minute), service: "api", stacks: stacks}})
	var out writeCounter
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"profile", "--db", path, "--local", "--service", "api", "--since", "1h"}, &out, &errOut); code != 0 {
		t.Fatalf("code %d: %s", code, errOut.String())
	}
	lines := strings.Count(out.String(), "\n")
	if lines != 2000 {
		t.Fatalf("%d lines, want 2000", lines)
	}
	if most := out.Len()/4096 + 1; out.writes > most {
		t.Fatalf("%d writes for %d lines (%d bytes), want at most %d", out.writes, lines, out.Len(), most)
	}
}

// A command that loads profiles first gives the process's Go heap huge
// pages (loadInHugePages): after one has run, the whole range was advised
// (internal/hugepages' test checks that the heap allocates from it).
func TestProfileLoadsInHugePages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", path, "", []batch{{at: time.Now().Add(-5 * time.Minute), service: "api", stacks: map[string]int64{"main.main;leaf": 3}}})
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"profile", "--db", path, "--local", "--service", "api", "--since", "1h"}, &out, &errOut); code != 0 {
		t.Fatalf("code %d: %s", code, errOut.String())
	}
	if hugeHeapErr != nil {
		t.Fatalf("no huge pages for the Go heap: %v", hugeHeapErr)
	}
	if got := hugeHeapRange.Len(); got < hugeHeapSize {
		t.Fatalf("advised %d bytes of the Go heap, want %d", got, hugeHeapSize)
	}
	if out.String() != "main.main;leaf 3\n" {
		t.Fatalf("output %q", out.String())
	}
}

func TestProfileErrorsHelp(t *testing.T) {
	db := localDB(t)
	_, stderr, code := runCLI(t, "profile", "--db", db, "--service", "apii")
	if code != 1 || !strings.Contains(stderr, `no samples for service "apii"`) || !strings.Contains(stderr, "stored services (any time): api (") {
		t.Fatalf("misspelt service: %d %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "profile", "--db", db)
	if code != 1 || !strings.Contains(stderr, "--service is required; services with samples") || !strings.Contains(stderr, "worker (200 samples)") {
		t.Fatalf("no service: %d %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "profile", "--db", db, "--service", "api", "--since", "yesterday")
	if code != 1 || !strings.Contains(stderr, `since: time "yesterday"`) {
		t.Fatalf("bad time: %d %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "profile", "--db", db, "--service", "api", "--pod", "api-1")
	// The agent tier knows pods by UID only: a name selects nothing, and
	// the error says what was selected.
	if code != 1 || !strings.Contains(stderr, `no samples for service "api"`) || !strings.Contains(stderr, `in pod "api-1"`) {
		t.Fatalf("pod name on local: %d %s", code, stderr)
	}
	out, stderr, code := runCLI(t, "profile", "--help")
	if code != 0 || stderr != "" || !strings.Contains(out, "Examples:") || !strings.Contains(out, "--compare-with") {
		t.Fatalf("help: %d %s%s", code, out, stderr)
	}
	_, stderr, code = runCLI(t, "profile", "--db", filepath.Join(t.TempDir(), "nope.duckdb"), "--service", "api")
	if code != 1 || !strings.Contains(stderr, "no such file") {
		t.Fatalf("missing file: %d %s", code, stderr)
	}
}

// goTool returns the go command (PATH, else the Makefile's location).
func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Fatal("no go command on PATH or at /usr/local/go/bin/go: go tool pprof is needed")
	}
	return "/usr/local/go/bin/go"
}

// TestTopAgreesWithGoToolPprof: the pprof file we write, read by the real
// `go tool pprof -top`, ranks the same functions with the same flat and cum
// counts as `hotpath top`.
func TestTopAgreesWithGoToolPprof(t *testing.T) {
	db := localDB(t)
	pb := filepath.Join(t.TempDir(), "cpu.pb.gz")
	if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "api", "--since", "1h", "--format", "pprof", "-o", pb); code != 0 {
		t.Fatalf("pprof: %s", stderr)
	}
	cmd := exec.Command(goTool(t), "tool", "pprof", "-top", "-nodecount=100", pb)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	// "      flat  flat%   sum%        cum   cum%" then rows.
	row := regexp.MustCompile(`(?m)^\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+?)\s*$`)
	var pprofRows [][3]string
	for _, m := range row.FindAllStringSubmatch(string(out), -1) {
		pprofRows = append(pprofRows, [3]string{m[3], m[1], m[2]})
	}
	if len(pprofRows) < 5 {
		t.Fatalf("pprof -top output:\n%s", out)
	}
	csvOut, stderr, code := runCLI(t, "top", "--db", db, "--service", "api", "--since", "1h", "--format", "csv", "-n", "0")
	if code != 0 {
		t.Fatalf("top: %s", stderr)
	}
	var ours [][3]string
	for _, l := range strings.Split(strings.TrimSpace(csvOut), "\n")[1:] {
		f := strings.Split(l, ",")
		ours = append(ours, [3]string{strings.Trim(f[0], `"`), f[1], f[3]})
	}
	t.Logf("pprof top: %v\nhotpath top: %v", pprofRows[:3], ours[:3])
	if pprofRows[0] != ours[0] || ours[0][0] != "json.Unmarshal" {
		t.Fatalf("top function: pprof %v, hotpath %v", pprofRows[0], ours[0])
	}
	// Every function pprof lists has the same flat and cum in ours.
	byName := map[string][3]string{}
	for _, o := range ours {
		byName[o[0]] = o
	}
	for _, p := range pprofRows {
		if byName[p[0]] != p {
			t.Errorf("pprof %v, hotpath %v", p, byName[p[0]])
		}
	}
	// The table on a non-terminal has no colour codes.
	table, _, _ := runCLI(t, "top", "--db", db, "--service", "api", "--since", "1h", "-n", "3")
	if strings.Contains(table, "\x1b[") || !strings.Contains(table, "json.Unmarshal") {
		t.Fatalf("table:\n%s", table)
	}
}

func TestCompareWith(t *testing.T) {
	db := localDB(t)
	// Current: the new build (last 12 minutes); baseline: the old build's
	// second window. Old build 590/800/600 shares -> new 1200/800/600.
	out, stderr, code := runCLI(t, "profile", "--db", db, "--service", "api", "--since", "12m", "--compare-with", "35m to 20m")
	if code != 0 {
		t.Fatalf("%d %s", code, stderr)
	}
	lines := map[string][2]int64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		a, _ := strconv.ParseInt(f[len(f)-2], 10, 64)
		b, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		lines[strings.Join(f[:len(f)-2], " ")] = [2]int64{a, b}
	}
	j := lines["main.main;main.serve;json.Unmarshal"]
	// Baseline json: 600+595+590+585 = 2370 of 8028 samples, scaled to the
	// current 10360: 3058.4. Current: 4800.
	if j != [2]int64{3058, 4800} {
		t.Fatalf("json.Unmarshal line %v in:\n%s", j, out)
	}
	if l := lines["main.main;[build_id:1f0e9d8c7b6a] 0x1a2b"]; l[1] != 0 || l[0] == 0 {
		t.Fatalf("frame gone in the current range: %v", l)
	}
	var sumA, sumB int64
	for _, v := range lines {
		sumA += v[0]
		sumB += v[1]
	}
	if sumB != 10360 || sumA < 10355 || sumA > 10365 {
		t.Fatalf("not normalized: baseline %d current %d", sumA, sumB)
	}
	svg := filepath.Join(t.TempDir(), "diff.svg")
	if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "api", "--since", "12m", "--compare-with", "35m to 20m", "--format", "svg", "-o", svg); code != 0 {
		t.Fatal(stderr)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	// json.Unmarshal grew the most: full red. db.Query shrank: blue.
	if !regexp.MustCompile(`data-n="json.Unmarshal"><title>[^<]*\+\d+\.\d+ pp\)</title><rect [^>]*fill="rgb\(255,45,45\)"`).Match(b) ||
		!regexp.MustCompile(`data-n="db.Query"><title>[^<]*</title><rect [^>]*fill="rgb\(\d+,\d+,255\)"`).Match(b) {
		t.Fatalf("diff colours wrong:\n%.3000s", b)
	}
}

func TestGateCommand(t *testing.T) {
	db := localDB(t)
	// Two ranges of the old build: pass.
	out, stderr, code := runCLI(t, "gate", "--db", db, "--service", "api", "--baseline", "55m to 40m", "--candidate", "35m to 20m")
	if code != 0 || !strings.Contains(out, "hotpath gate: PASS") {
		t.Fatalf("same build: %d\n%s%s", code, out, stderr)
	}
	// Old build vs the regressed one, by build ID prefix: fail with exit 3.
	html := filepath.Join(t.TempDir(), "gate.html")
	out, stderr, code = runCLI(t, "gate", "--db", db, "--service", "api", "--baseline", "1f0e9d8c7b6a", "--candidate", "2a3b4c5d6e7f", "--max-increase", "5pp", "--html", html)
	if code != exitGateFailed || !strings.Contains(out, "hotpath gate: FAIL") || !regexp.MustCompile(`\+\s*1[56]\.\d+ pp .*json\.Unmarshal  \[regression\]`).MatchString(out) {
		t.Fatalf("regression: %d\n%s%s", code, out, stderr)
	}
	t.Logf("gate report:\n%s", out)
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), `data-n="json.Unmarshal"`) || !strings.Contains(string(b), "<!DOCTYPE html>") {
		t.Fatalf("--html: %v", err)
	}
	// A 20pp threshold lets it through.
	if _, _, code = runCLI(t, "gate", "--db", db, "--service", "api", "--baseline", oldBuild, "--candidate", newBuild, "--max-increase", "20"); code != 0 {
		t.Fatalf("20pp: exit %d", code)
	}
	// Too little data: inconclusive, exit 4.
	out, _, code = runCLI(t, "gate", "--db", db, "--service", "api", "--baseline", oldBuild, "--candidate", newBuild, "--min-samples", "1000000", "--format", "json")
	var rep struct{ Verdict string }
	if code != exitInconclusive || json.Unmarshal([]byte(out), &rep) != nil || rep.Verdict != "INCONCLUSIVE" {
		t.Fatalf("inconclusive: %d %s", code, out)
	}
	_, stderr, code = runCLI(t, "gate", "--db", db, "--service", "api", "--baseline", "ffffffffff", "--candidate", newBuild)
	if code != 1 || !strings.Contains(stderr, `with build ID "ffffffffff"`) {
		t.Fatalf("unknown build: %d %s", code, stderr)
	}
	if _, _, code = runCLI(t, "gate", "--db", db, "--service", "api"); code != exitUsage {
		t.Fatalf("missing flags: %d", code)
	}
}

// TestGatewayEndpoint reads the summary tier through a running exporter's
// query endpoint (the file is locked by it), with --pod.
func TestGatewayEndpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.duckdb")
	ep := testport.Addr(t)
	writeDB(t, "summary", path, ep, deployFixture(time.Now()))
	out, stderr, code := runCLI(t, "profile", "--db", ep, "--service", "api", "--since", "1h", "--pod", "api-2")
	if code != 0 || out != "main.main;main.serve;json.Unmarshal 4800\nmain.main;main.serve;db.Query 3160\nmain.main;main.serve;gzip.Write 2400\n" {
		t.Fatalf("%d %s\n%s", code, stderr, out)
	}
	_, stderr, code = runCLI(t, "profile", "--db", ep, "--local", "--service", "api")
	if code != 1 || !strings.Contains(stderr, "holds the summary tier") {
		t.Fatalf("--local on gateway: %d %s", code, stderr)
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWebServesPprofUI runs the real pprof web UI and reads its top and
// flame graph pages.
func TestWebServesPprofUI(t *testing.T) {
	db := localDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"web", "--db", db, "--service", "api", "--since", "1h"}, &out, &errOut)
	}()
	urlRE := regexp.MustCompile(`http://127\.0\.0\.1:\d+/ui/`)
	var base string
	for i := 0; i < 600 && base == ""; i++ {
		select {
		case code := <-done:
			t.Fatalf("web exited %d: %s", code, errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		base = urlRE.FindString(out.String())
	}
	if base == "" {
		t.Fatalf("no URL printed: %q %q", out.String(), errOut.String())
	}
	get := func(path string) string {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %s", path, resp.Status)
		}
		return string(b)
	}
	if top := get("top"); !strings.Contains(top, "json.Unmarshal") {
		t.Fatalf("top page lacks the hot function:\n%.2000s", top)
	}
	if fg := get("flamegraph"); !strings.Contains(fg, "json.Unmarshal") {
		t.Fatal("flame graph page lacks the hot function")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("web exit %d: %s", code, errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("web did not stop")
	}
	_, stderr, code := runCLI(t, "web", "--db", db, "--service", "api", "--http", "0.0.0.0:0")
	if code != 1 || !strings.Contains(stderr, "loopback") {
		t.Fatalf("non-loopback: %d %s", code, stderr)
	}
}

// TestProfileManyStacksAtTwoFrequencies reads more stacks than one row of
// profilequery's result carries (it sends them as text, a few thousand to
// a row), each stored twice (at 19 and at 99 Hz, rows the CLI merges),
// from the file and through a collector's endpoint: every line and the
// CPU time are what the samples written make.
func TestProfileManyStacksAtTwoFrequencies(t *testing.T) {
	const stacks = 9000
	at := time.Now().Add(-10 * time.Minute).Truncate(time.Minute)
	slow := batch{at: at, service: "big", build: "b1", hz: 19, stacks: map[string]int64{}}
	fast := batch{at: at, service: "big", build: "b1", hz: 99, stacks: map[string]int64{}}
	want := map[string]int64{}
	var cpu time.Duration
	for i := range stacks {
		line := fmt.Sprintf("main.main;pkga.f%d;pkgb.g%d;leaf%d", i%7, i%13, i)
		slow.stacks[line] = int64(1 + i%5)
		fast.stacks[line] = 2
		want[line] = int64(1+i%5) + 2
		cpu += time.Duration(1+i%5)*(time.Second/19) + 2*(time.Second/99)
	}
	wantLines := make([]string, 0, stacks)
	for line, n := range want {
		wantLines = append(wantLines, fmt.Sprintf("%s %d", line, n))
	}
	// Most samples first, ties by line (the folded lines' order).
	sort.Slice(wantLines, func(i, j int) bool {
		a, b := wantLines[i], wantLines[j]
		na, nb := want[a[:strings.LastIndexByte(a, ' ')]], want[b[:strings.LastIndexByte(b, ' ')]]
		if na != nb {
			return na > nb
		}
		return a < b
	})

	file := filepath.Join(t.TempDir(), "gateway.duckdb")
	writeDB(t, "summary", file, "", []batch{slow, fast})
	served := filepath.Join(t.TempDir(), "served.duckdb")
	ep := testport.Addr(t)
	writeDB(t, "summary", served, ep, []batch{slow, fast})
	for _, db := range []string{file, ep} {
		out, stderr, code := runCLI(t, "profile", "--db", db, "--service", "big", "--since", "1h")
		if code != 0 {
			t.Fatalf("%s: code %d: %s", db, code, stderr)
		}
		if got := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); !slices.Equal(got, wantLines) {
			t.Fatalf("%s: %d lines, want %d; first %q, want %q", db, len(got), len(wantLines), got[:min(3, len(got))], wantLines[:3])
		}
		pprofFile := filepath.Join(t.TempDir(), "cpu.pb.gz")
		if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "big", "--since", "1h", "--format", "pprof", "-o", pprofFile); code != 0 {
			t.Fatalf("%s: pprof: code %d: %s", db, code, stderr)
		}
		pp := readPprof(t, pprofFile)
		// One sample a stack: its rows at the two periods merged.
		var got time.Duration
		for _, s := range pp.Sample {
			got += time.Duration(s.Value[1])
		}
		if len(pp.Sample) != stacks || got != cpu {
			t.Fatalf("%s: %d stacks and %v of CPU, want %d and %v", db, len(pp.Sample), got, stacks, cpu)
		}
	}
}
