package main

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
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
