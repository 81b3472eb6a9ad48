package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/debuginfod/debuginfodtest"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// fileOffsetOf returns the file offset of code at fn+8 in this test binary,
// the form raw frames store ("file+0xOFF"). The test binary has no ELF
// symbol table; the running function's PC is its ELF address, as Go test
// binaries are not position independent here (checked).
func fileOffsetOf(t *testing.T, path string, fn any) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Fatalf("%s is %v, not a fixed-address executable: runtime PCs are not ELF addresses", path, f.Type)
	}
	addr := uint64(reflect.ValueOf(fn).Pointer()) + 8 // inside the function, not at its entry
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("%#x in no PT_LOAD segment of %s", addr, path)
	return 0
}

// TestSymbolizeRewritesOneBuild stores raw addresses of this test binary
// for two builds, symbolizes one with the binary itself as the symbol file,
// and checks the rewrite: that build's stacks name the function, the other
// build's identical raw frame is untouched, and frame counts stay exact.
func TestSymbolizeRewritesOneBuild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildid.Read(exe)
	if err != nil {
		t.Fatal(err)
	}
	build := info.Canonical()
	// In a test binary package main has its import path as name.
	fnA := runtime.FuncForPC(reflect.ValueOf(rewriteFrames).Pointer()).Name()
	fnB := runtime.FuncForPC(reflect.ValueOf(symbolizeBuild).Pointer()).Name()
	offA := fileOffsetOf(t, exe, rewriteFrames)
	offB := fileOffsetOf(t, exe, symbolizeBuild)
	now := time.Now()
	path := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", path, "", []batch{
		{at: now.Add(-5 * time.Minute), service: "api", build: build, exe: exe, stacks: map[string]int64{
			fmt.Sprintf("main.main;raw:0x%x;raw:0x%x", offB, offA): 30,
			fmt.Sprintf("main.main;raw:0x%x", offB):                5,
			"main.main;raw:0x1":                                    2, // before any code: stays raw
		}},
		{at: now.Add(-4 * time.Minute), service: "api", build: "0ther0build0", exe: exe, stacks: map[string]int64{
			fmt.Sprintf("main.main;raw:0x%x", offA): 11,
		}},
	})
	before, _, code := runCLI(t, "profile", "--db", path, "--service", "api", "--build-id", build)
	short := build[:12]
	if code != 0 || !strings.Contains(before, fmt.Sprintf("main.main;[build_id:%s] 0x%x;[build_id:%s] 0x%x 30", short, offB, short, offA)) {
		t.Fatalf("before: %d\n%s", code, before)
	}

	out, stderr, code := runCLI(t, "symbolize", "--db", path, "--build-id", build, "--symbols", exe, "--dry-run")
	if code != 0 || !strings.Contains(out, "would rename 2 of 3 raw frames") {
		t.Fatalf("dry run: %d %s %s", code, out, stderr)
	}
	out, stderr, code = runCLI(t, "symbolize", "--db", path, "--build-id", build, "--symbols", exe)
	if code != 0 || !strings.Contains(out, "renamed 2 of 3 raw frames (1 did not resolve)") {
		t.Fatalf("symbolize: %d %s %s", code, out, stderr)
	}
	after, _, _ := runCLI(t, "profile", "--db", path, "--service", "api", "--since", "1h")
	for _, want := range []string{
		"[build_id:" + short + "] main.main;" + fnB + ";" + fnA + " 30",
		"[build_id:" + short + "] main.main;" + fnB + " 5",
		"[build_id:" + short + "] main.main;[build_id:" + short + "] 0x1 2",
		fmt.Sprintf("[build_id:0ther0build0] main.main;[build_id:0ther0build0] 0x%x 11", offA),
	} {
		if !strings.Contains(after, want+"\n") {
			t.Errorf("missing %q in:\n%s", want, after)
		}
	}
	// The writer's invariant (schema.CheckIntegrity): every referenced
	// frame exists; raw frames no stack uses any more are gone.
	db, closeDB, err := sqlquery.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	var missing, stale int
	err = db.QueryRow(`WITH refs AS (
    SELECT DISTINCT unnest(stack_frame_ids) AS id FROM cpu_profile_samples_local)
SELECT count(*) FILTER (WHERE f.frame_id IS NULL),
       count(*) FILTER (WHERE r.id IS NULL)
FROM refs r FULL OUTER JOIN profile_frame_dictionary_local f ON f.frame_id = r.id`).Scan(&missing, &stale)
	if err != nil || missing+stale != 0 {
		t.Fatalf("integrity: err %v, %d missing, %d unreferenced", err, missing, stale)
	}
	var debug bool
	if err := db.QueryRow("SELECT has_debug_info FROM binary_metadata_local WHERE build_id = ?", build).Scan(&debug); err != nil || !debug {
		t.Fatalf("has_debug_info: %v %v", debug, err)
	}
	closeDB()

	// Another build's symbols are refused.
	_, stderr, code = runCLI(t, "symbolize", "--db", path, "--build-id", "0ther", "--symbols", exe)
	if code != 1 || !strings.Contains(stderr, "it is another build") {
		t.Fatalf("wrong build: %d %s", code, stderr)
	}
	_, stderr, code = runCLI(t, "symbolize", "--db", path, "--build-id", "0ther", "--symbols", "/nonexistent")
	if code != 1 || !strings.Contains(stderr, "open symbol table") {
		t.Fatalf("missing symbols: %d %s", code, stderr)
	}
}

// TestSymbolizeRefusesHeldFile: with a collector holding the file (a child
// process, as in production), symbolize says to stop it.
func TestSymbolizeRefusesHeldFile(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "held.duckdb")
	holdInChild(t, path)
	_, stderr, code := runCLI(t, "symbolize", "--db", path, "--build-id", "abc", "--symbols", exe)
	if code != 1 || !strings.Contains(stderr, "a collector holds") || !strings.Contains(stderr, "stop it first") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "profile", "--db", path, "--service", "api")
	if code != 1 || !strings.Contains(stderr, "a collector holds the file") {
		t.Fatalf("profile on held file: %d %q", code, stderr)
	}
}

// cProgram builds a C program whose two static functions a stripped copy
// does not name, splits its debug file off (as distributions do) and
// returns the stripped executable, the debug file, its GNU build ID and
// the file offsets of the functions.
func cProgram(t *testing.T, dir, name string) (stripped, debug, build string, offsets map[string]uint64) {
	t.Helper()
	src := filepath.Join(dir, name+".c")
	code := `static int __attribute__((noinline)) parse_` + name + `(int n){int s=0;for(int i=0;i<n;i++)s+=i*i;return s;}
static int __attribute__((noinline)) sort_` + name + `(int n){return parse_` + name + `(n)*3;}
int main(int c,char**v){(void)v;return sort_` + name + `(c) & 1;}
`
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	full := filepath.Join(dir, name+".full")
	stripped = filepath.Join(dir, "bin", name)
	debug = filepath.Join(dir, "srv", name+".debug")
	for _, c := range [][]string{
		{"mkdir", "-p", filepath.Dir(stripped), filepath.Dir(debug)},
		{"gcc", "-O1", "-g", "-Wl,--build-id", "-o", full, src},
		{"objcopy", "--only-keep-debug", full, debug},
		{"strip", "-o", stripped, full},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	info, err := buildid.Read(stripped)
	if err != nil || info.GNU == "" {
		t.Fatalf("build ID of %s: %+v %v", stripped, info, err)
	}
	f, err := elf.Open(full)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	offsets = map[string]uint64{}
	for _, s := range syms {
		if !strings.HasSuffix(s.Name, "_"+name) {
			continue
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD && s.Value >= p.Vaddr && s.Value < p.Vaddr+p.Filesz {
				offsets[s.Name] = s.Value - p.Vaddr + p.Off
			}
		}
	}
	if len(offsets) != 2 {
		t.Fatalf("functions of %s at %v", name, offsets)
	}
	return stripped, debug, info.GNU, offsets
}

// TestSymbolizeFromDebuginfod names a stripped C program's stored frames
// with the debug file a real debuginfod server (elfutils') serves, for
// every stored build at once: the served build is renamed, a build no
// server has and a Go build are left as they are. A second run with the
// server gone works from the cache, and says which build it could not
// fetch.
func TestSymbolizeFromDebuginfod(t *testing.T) {
	dir := t.TempDir()
	app, _, appBuild, appOff := cProgram(t, dir, "app")
	other, otherDebug, otherBuild, otherOff := cProgram(t, dir, "other")
	// app's debug file and stripped executable are served (as a
	// distribution's server has both); neither of other's is.
	if err := os.Remove(otherDebug); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(app, filepath.Join(dir, "srv", "app")); err != nil {
		t.Fatal(err)
	}
	url, stopServer := debuginfodtest.Serve(t, filepath.Join(dir, "srv"), appBuild)
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "cache"))
	t.Setenv("DEBUGINFOD_URLS", "")

	now := time.Now()
	path := filepath.Join(t.TempDir(), "gateway.duckdb")
	writeDB(t, "summary", path, "", []batch{
		// Sampled on another machine: the binary is not here.
		{at: now.Add(-5 * time.Minute), service: "app", build: appBuild, exe: "/srv/elsewhere/app", stacks: map[string]int64{
			fmt.Sprintf("raw:0x%x;raw:0x%x", appOff["sort_app"], appOff["parse_app"]): 40,
			"raw:0x1": 2, // before any function: stays raw
		}},
		{at: now.Add(-5 * time.Minute), service: "other", build: otherBuild, exe: other, stacks: map[string]int64{
			fmt.Sprintf("raw:0x%x", otherOff["parse_other"]): 9,
		}},
		{at: now.Add(-5 * time.Minute), service: "gosvc", build: "go0build0id", stacks: map[string]int64{"main.main;runtime.goexit": 3}},
		// Named in full when sampled: nothing to fetch.
		{at: now.Add(-5 * time.Minute), service: "named", build: "aabbccddeeff00112233445566778899aabbccdd", exe: "/usr/bin/named", stacks: map[string]int64{"main;serve": 5}},
	})

	_, stderr, code := runCLI(t, "symbolize", "--db", path)
	if code != 2 || !strings.Contains(stderr, "give --symbols FILE or --debuginfod") {
		t.Fatalf("no source: %d %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "symbolize", "--db", path, "--debuginfod")
	if code != 1 || !strings.Contains(stderr, "set DEBUGINFOD_URLS") {
		t.Fatalf("no servers: %d %q", code, stderr)
	}

	out, stderr, code := runCLI(t, "symbolize", "--db", path, "--debuginfod-urls", url, "--dry-run")
	if code != 0 || !strings.Contains(out, "build "+appBuild+": would rename 2 of 3 raw frames") ||
		!strings.Contains(out, "3 builds with a GNU build ID: 1 symbolized, 0 whose symbols named none of their raw frames, 1 without raw frames, 1 on no debuginfod server, 0 failed") {
		t.Fatalf("dry run: %d\n%s\n%s", code, out, stderr)
	}
	for _, kind := range []string{"debuginfo", "executable"} {
		if _, err := os.Stat(filepath.Join(dir, "cache", appBuild, kind)); err != nil {
			t.Fatalf("the %s is not in the cache: %v", kind, err)
		}
	}
	_, stderr, code = runCLI(t, "symbolize", "--db", path, "--build-id", otherBuild[:12], "--debuginfod-urls", url)
	if code != 1 || !strings.Contains(stderr, "no debuginfod server has it") {
		t.Fatalf("one build no server has: %d %q", code, stderr)
	}

	// The server is gone: app comes from the cache; other cannot be asked.
	stopServer()
	t.Setenv("DEBUGINFOD_URLS", url)
	out, stderr, code = runCLI(t, "symbolize", "--db", path, "--debuginfod")
	if code != 1 || !strings.Contains(out, "build "+appBuild+": renamed 2 of 3 raw frames (1 did not resolve)") ||
		!strings.Contains(out, "1 symbolized, 0 whose symbols named none of their raw frames, 1 without raw frames, 0 on no debuginfod server, 1 failed") ||
		!strings.Contains(stderr, "debuginfo of build "+otherBuild+": Get \""+url+"/buildid/"+otherBuild+"/debuginfo\"") || !strings.Contains(stderr, "connection refused") {
		t.Fatalf("from the cache, server down: %d\n%s\n%s", code, out, stderr)
	}
	short := func(b string) string { return "[build_id:" + b[:12] + "]" }
	for service, wants := range map[string][]string{
		"app":   {"sort_app;parse_app 40", short(appBuild) + " 0x1 2"},
		"other": {fmt.Sprintf("%s 0x%x 9", short(otherBuild), otherOff["parse_other"])},
		"gosvc": {"main.main;runtime.goexit 3"},
	} {
		after, stderr, _ := runCLI(t, "profile", "--db", path, "--service", service, "--since", "1h")
		for _, want := range wants {
			if !strings.Contains(after, want+"\n") {
				t.Errorf("missing %q in:\n%s%s", want, after, stderr)
			}
		}
	}
	// The gateway tier records where the symbols came from.
	db, closeDB, err := sqlquery.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	var debugInfo bool
	var storage string
	if err := db.QueryRow("SELECT has_debug_info, symbol_storage FROM binary_metadata_registry WHERE build_id = ?", appBuild).Scan(&debugInfo, &storage); err != nil ||
		!debugInfo || storage != filepath.Join(dir, "cache", appBuild, "debuginfo") {
		t.Fatalf("binary metadata: %v %q %v", debugInfo, storage, err)
	}
	closeDB()

	// app's raw frame before any function is tried again (from the cache);
	// other still cannot be fetched.
	out, stderr, _ = runCLI(t, "symbolize", "--db", path, "--debuginfod")
	if !strings.Contains(out, "3 builds with a GNU build ID: 0 symbolized, 1 whose symbols named none of their raw frames, 1 without raw frames, 0 on no debuginfod server, 1 failed") {
		t.Fatalf("second run:\n%s\n%s", out, stderr)
	}

	// Run where the binary is (the agent's file, on its node): its program
	// headers place the frames, and only the debug file is fetched.
	url, _ = debuginfodtest.Serve(t, filepath.Join(dir, "srv"), appBuild)
	t.Setenv("DEBUGINFOD_CACHE_PATH", filepath.Join(dir, "cache2"))
	local := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", local, "", []batch{{at: now.Add(-5 * time.Minute), service: "app", build: appBuild, exe: app, stacks: map[string]int64{
		fmt.Sprintf("raw:0x%x", appOff["parse_app"]): 7,
	}}})
	out, stderr, code = runCLI(t, "symbolize", "--db", local, "--build-id", appBuild, "--debuginfod-urls", url)
	if code != 0 || !strings.Contains(out, "renamed 1 of 1 raw frames") {
		t.Fatalf("on the node: %d\n%s\n%s", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache2", appBuild, "executable")); !os.IsNotExist(err) {
		t.Fatalf("the executable was fetched though the binary is here: %v", err)
	}
}

// TestSymbolizeWithSeparateDebugFile: a distribution's debug file (objcopy
// --only-keep-debug) keeps the binary's addresses but not its file layout,
// so the stored file offsets are placed with the binary's own program
// headers: the recorded binary when it is there and is the build, else
// --executable.
func TestSymbolizeWithSeparateDebugFile(t *testing.T) {
	dir := t.TempDir()
	app, debug, build, off := cProgram(t, dir, "app")
	other, _, _, _ := cProgram(t, t.TempDir(), "other")
	stacks := map[string]int64{fmt.Sprintf("raw:0x%x;raw:0x%x", off["sort_app"], off["parse_app"]): 40, "raw:0x1": 2}
	at := time.Now().Add(-5 * time.Minute)

	// Sampled at the path the binary is still at: --symbols alone.
	here := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", here, "", []batch{{at: at, service: "app", build: build, exe: app, stacks: stacks}})
	// top says what is unnamed and what names it.
	hint := "of samples pass through frames of build " + build[:12] + " that had no symbols when sampled"
	if got, _, _ := runCLI(t, "top", "--db", here, "--service", "app", "--since", "1h"); !strings.Contains(got, "100.0% "+hint) || !strings.Contains(got, "hotpath symbolize --debuginfod") {
		t.Fatalf("top before:\n%s", got)
	}
	out, stderr, code := runCLI(t, "symbolize", "--db", here, "--symbols", debug)
	if code != 0 || !strings.Contains(out, "build "+build+": renamed 2 of 3 raw frames (1 did not resolve)") {
		t.Fatalf("recorded binary: %d\n%s\n%s", code, out, stderr)
	}
	if got, _, _ := runCLI(t, "profile", "--db", here, "--service", "app", "--since", "1h"); !strings.Contains(got, "sort_app;parse_app 40\n") {
		t.Fatalf("after:\n%s", got)
	}
	// Left: the 2 samples in raw:0x1, before any function.
	if got, _, _ := runCLI(t, "top", "--db", here, "--service", "app", "--since", "1h"); !strings.Contains(got, "4.8% "+hint) {
		t.Fatalf("top after:\n%s", got)
	}

	// Sampled on another machine: the binary is named with --executable.
	away := filepath.Join(t.TempDir(), "agent.duckdb")
	writeDB(t, "local", away, "", []batch{{at: at, service: "app", build: build, exe: "/srv/elsewhere/app", stacks: stacks}})
	_, stderr, code = runCLI(t, "symbolize", "--db", away, "--symbols", debug)
	if code != 1 || !strings.Contains(stderr, "is a separate debug file") || !strings.Contains(stderr, "--executable") {
		t.Fatalf("no binary: %d %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "symbolize", "--db", away, "--symbols", debug, "--executable", other)
	if code != 1 || !strings.Contains(stderr, "--executable "+other+" is not build "+build) {
		t.Fatalf("another build's binary: %d %q", code, stderr)
	}
	out, stderr, code = runCLI(t, "symbolize", "--db", away, "--symbols", debug, "--executable", app)
	if code != 0 || !strings.Contains(out, "renamed 2 of 3 raw frames") {
		t.Fatalf("--executable: %d\n%s\n%s", code, out, stderr)
	}
}
