package duckdbprofileexporter

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// fixtureEnd is the end of the data in testdata/v2-*.duckdb.gz: fixed, so the
// files (and what tests expect of them) never change.
var fixtureEnd = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

// fixtureMinutes is how much data the fixture files hold, ending at fixtureEnd:
// three closed hours and a partial one, so roll-ups have whole hours to build.
const fixtureMinutes = 200

// populateFixture pushes deterministic data ending at fixtureEnd: "api" on
// two pods deploying a second build halfway, with trace-tagged samples of
// several traces and spans; "db" without a build ID; "worker" with a deep
// recursive stack and a kernel leaf. The agent tier gets 15 s intervals, the
// gateway one push per minute.
func populateFixture(t *testing.T, e *profilesExporter) {
	t.Helper()
	serve := []string{"main.handle", "net/http.(*Server).Serve", "main.main"} // leaf first
	with := func(leaf ...string) []string { return append(append([]string{}, leaf...), serve...) }
	step := time.Minute
	if e.cfg.Tier == "local" {
		step = 15 * time.Second
	}
	start := fixtureEnd.Add(-fixtureMinutes * time.Minute)
	i := 0
	for at := start; at.Before(fixtureEnd); at = at.Add(step) {
		i++
		build, hashing := buildV1, int64(1+i%3)
		if at.Sub(start) >= fixtureMinutes*time.Minute/2 {
			build, hashing = buildV2, int64(4+i%5)
		}
		b := newProfileBuilder()
		for p, pod := range []string{"api-1", "api-2"} {
			b.process(at, map[string]any{
				profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: pod,
				profileschema.AttrBuildID: build, profileschema.AttrProcessExePath: "/usr/local/bin/api",
				profileschema.AttrBinaryHasDebugInfo: build == buildV1,
			})
			b.sample(int64(3+(i+p)%4), with("encoding/json.Unmarshal"), nil, nil)
			b.sample(int64(1+i%2), with("runtime.mallocgc", "encoding/json.Unmarshal"), nil, nil)
			b.sample(hashing, with("crypto/sha256.block", "main.hash"), nil, nil)
			b.sample(1, with("copy_user_generic_[k]", "do_syscall_64_[k]", "syscall.Syscall"), nil, nil)
			// A trace per interval and pod, two spans; one trace recurs
			// through the whole range.
			trace := []byte(fmt.Sprintf("trace-%04d-%d----", i, p))[:16]
			b.sample(2, with("encoding/json.Unmarshal"), trace, []byte("span-one"))
			b.sample(1, with("crypto/sha256.block", "main.hash"), trace, []byte("span-two"))
			b.sample(1, with("encoding/json.Unmarshal"), traceA, spanA)
		}
		b.process(at, map[string]any{profileschema.AttrServiceName: "db", profileschema.AttrHostName: "db-host"})
		b.sample(int64(2+i%3), []string{"btree.search", "db.query", "main.main"}, nil, nil)
		b.sample(1, []string{"fsync_[k]", "wal.flush", "db.query", "main.main"}, nil, nil)
		b.process(at, map[string]any{profileschema.AttrServiceName: "worker", profileschema.AttrBuildID: "c0ffee"})
		deep := []string{"fib"}
		for d := 0; d < 8+i%4; d++ {
			deep = append(deep, "fib")
		}
		b.sample(3, append(deep, "worker.run", "main.main"), nil, nil)
		b.sample(1, []string{"worker+0x1a2b", "worker.run", "main.main"}, nil, nil)
		if err := e.push(context.Background(), b.pd); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWriteV2Fixture writes testdata/v2-{local,summary}.duckdb.gz with the
// schema version 2 code; run once with HOTPATH_WRITE_V2_FIXTURE=1 (the
// migration tests read the files it left).
func TestWriteV2Fixture(t *testing.T) {
	if os.Getenv("HOTPATH_WRITE_V2_FIXTURE") != "1" {
		t.Skip("writes testdata; set HOTPATH_WRITE_V2_FIXTURE=1")
	}
	for _, tier := range []string{"local", "summary"} {
		cfg := testConfig(t, tier)
		cfg.Retention.Stacks = 100 * 365 * 24 * time.Hour
		cfg.Retention.TraceStacks = 100 * 365 * 24 * time.Hour
		cfg.Retention.Metadata = 100 * 365 * 24 * time.Hour
		e := startExporter(t, cfg)
		populateFixture(t, e)
		if _, err := e.w.DB().Exec("CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		if err := e.shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.cleaner, e.server, e.w = nil, nil, nil // shut down; the cleanup must not repeat it
		data, err := os.ReadFile(cfg.Path)
		if err != nil {
			t.Fatal(err)
		}
		// Compressed: a DuckDB file is mostly empty blocks.
		var zipped bytes.Buffer
		zw := gzip.NewWriter(&zipped)
		if _, err := zw.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "v2-"+tier+".duckdb.gz"), zipped.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
