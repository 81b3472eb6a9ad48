package writer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func open(t testing.TB, path string, tier schema.Tier) *Writer {
	t.Helper()
	w, err := Open(context.Background(), path, tier)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return w
}

func queryStrings(t testing.TB, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		parts := make([]string, len(vals))
		for i, v := range vals {
			parts[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(parts, "|"))
	}
	return out
}

func TestWriteLocalStoresRootFirstAndNamesFramesOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.duckdb")
	w := open(t, path, schema.Local)
	b := &Batch{
		Rows: []StackRow{
			{Time: t0, ServiceID: "api", BuildID: "b1", Frames: []string{"main", "serve", "parse"}, Count: 5, TraceID: "0102030405060708090a0b0c0d0e0f10", SpanID: "0102030405060708"},
			{Time: t0, ServiceID: "api", BuildID: "", Frames: []string{"main", "main", "idle"}, Count: 2},
		},
		Binaries: []Binary{{BuildID: "b1", ServiceID: "api", Path: "/bin/api", HasDebugInfo: true, Seen: t0}},
	}
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	got := queryStrings(t, w.DB(), `SELECT folded, build_id, sample_count, coalesce(trace_id, 'NULL'), coalesce(span_id, 'NULL') FROM cpu_profile_samples_local_decoded ORDER BY sample_count`)
	want := []string{"main;main;idle||2|NULL|NULL", "main;serve;parse|b1|5|0102030405060708090a0b0c0d0e0f10|0102030405060708"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("decoded rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// main occurs 3 times across stored stacks, and is one frame.
	got = queryStrings(t, w.DB(), `SELECT frame_id, frame_name FROM profile_frame_dictionary_local ORDER BY frame_id`)
	if strings.Join(got, ",") != "1|main,2|serve,3|parse,4|idle" {
		t.Fatalf("frame dictionary: %v", got)
	}
	// A second batch adds only its new frame.
	if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0.Add(time.Second), ServiceID: "api", Frames: []string{"main", "gc"}, Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	got = queryStrings(t, w.DB(), `SELECT frame_id, frame_name FROM profile_frame_dictionary_local ORDER BY frame_id`)
	if strings.Join(got, ",") != "1|main,2|serve,3|parse,4|idle,5|gc" {
		t.Fatalf("frame dictionary after second batch: %v", got)
	}
	got = queryStrings(t, w.DB(), `SELECT build_id, service_id, binary_path, has_debug_info FROM binary_metadata_local`)
	if strings.Join(got, ",") != "b1|api|/bin/api|true" {
		t.Fatalf("binary metadata: %v", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// IDs survive a restart: the known frame keeps its ID, a new one follows.
	w = open(t, path, schema.Local)
	defer w.Close()
	if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0.Add(2 * time.Second), ServiceID: "api", Frames: []string{"main", "new"}, Count: 1}},
		Binaries: []Binary{{BuildID: "b1", ServiceID: "api", Path: "/bin/api", Seen: t0.Add(time.Hour)}}}); err != nil {
		t.Fatal(err)
	}
	got = queryStrings(t, w.DB(), `SELECT frame_id, frame_name FROM profile_frame_dictionary_local WHERE frame_name IN ('main', 'new') ORDER BY frame_id`)
	if strings.Join(got, ",") != "1|main,6|new" {
		t.Fatalf("IDs after restart: %v", got)
	}
	got = queryStrings(t, w.DB(), `SELECT first_seen, last_seen, has_debug_info FROM binary_metadata_local`)
	if len(got) != 1 || !strings.Contains(got[0], "00:00:00") || !strings.Contains(got[0], "01:00:00") || !strings.HasSuffix(got[0], "false") {
		t.Fatalf("upserted metadata: %v", got)
	}
}

func TestSummaryPercentagesSpanBatches(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "summary.duckdb"), schema.Summary)
	defer w.Close()
	row := func(svc string, frames []string, n int64) StackRow {
		return StackRow{Time: t0, ServiceID: svc, PodName: "pod-1", BuildID: "b", Frames: frames, Count: n}
	}
	if err := w.Write(ctx, &Batch{Rows: []StackRow{row("api", []string{"a"}, 1), row("api", []string{"b"}, 3), row("db", []string{"c"}, 7)}}); err != nil {
		t.Fatal(err)
	}
	got := queryStrings(t, w.DB(), `SELECT service_id, folded, round(sample_percentage, 2) FROM cpu_profile_summaries_decoded ORDER BY ALL`)
	if strings.Join(got, ",") != "api|a|25,api|b|75,db|c|100" {
		t.Fatalf("first batch: %v", got)
	}
	// A later batch for the same bucket: all shares of that bucket change.
	if err := w.Write(ctx, &Batch{Rows: []StackRow{row("api", []string{"d"}, 4)}}); err != nil {
		t.Fatal(err)
	}
	got = queryStrings(t, w.DB(), `SELECT service_id, folded, round(sample_percentage, 2) FROM cpu_profile_summaries_decoded ORDER BY ALL`)
	if strings.Join(got, ",") != "api|a|12.5,api|b|37.5,api|d|50,db|c|100" {
		t.Fatalf("second batch: %v", got)
	}
}

func TestFailedBatchLeavesNothingAndDictionaryInStep(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "f.duckdb"), schema.Local)
	defer w.Close()
	// A canceled context fails the batch mid-way.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Write(cctx, &Batch{Rows: []StackRow{{Time: t0, ServiceID: "s", Frames: []string{"x"}, Count: 1}}}); err == nil {
		t.Fatal("write with canceled context succeeded")
	}
	if w.FrameCount() != 0 {
		t.Fatalf("dictionary kept %d frames of a failed batch", w.FrameCount())
	}
	if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0, ServiceID: "s", Frames: []string{"x"}, Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	got := queryStrings(t, w.DB(), `SELECT folded FROM cpu_profile_samples_local_decoded`)
	if strings.Join(got, ",") != "x" {
		t.Fatalf("rows: %v", got)
	}
}

// A batch that fails after its new frames, its new stack and a frame's type
// went into its transaction (a malformed trace ID fails it once those are
// flushed, before its samples are appended)
// leaves the dictionaries as the file has them: the new frame is unknown,
// the filled frame untyped, and the next batch stores both.
func TestBatchFailingLateLeavesDictionariesAsTheFile(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "f.duckdb"), schema.Local)
	defer w.Close()
	py := FrameMeta{Type: "python", File: "/srv/app.py", Line: 7}
	if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0, ServiceID: "s", Frames: []string{"main", "handle"}, Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	bad := &Batch{Rows: []StackRow{{Time: t0, ServiceID: "s", Frames: []string{"main", "handle", "parse"}, Meta: []FrameMeta{{}, py, py}, Count: 1, TraceID: "not a trace id"}}}
	if err := w.Write(ctx, bad); err == nil || !strings.Contains(err.Error(), "trace ID") {
		t.Fatalf("batch with a malformed trace ID: %v", err)
	}
	if n := w.FrameCount(); n != 2 {
		t.Fatalf("%d frames known after the failed batch, want the file's 2", n)
	}
	if n := w.StackCount(); n != 1 {
		t.Fatalf("%d stacks known after the failed batch, want the file's 1", n)
	}
	good := bad.Rows[0]
	good.TraceID = ""
	if err := w.Write(ctx, &Batch{Rows: []StackRow{good}}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(queryStrings(t, w.DB(), `SELECT frame_name, coalesce(frame_type, 'NULL') FROM profile_frame_dictionary_local ORDER BY frame_id`), ",")
	if want := "main|NULL,handle|python,parse|python"; got != want {
		t.Fatalf("frames: %s, want %s", got, want)
	}
	if got := strings.Join(queryStrings(t, w.DB(), `SELECT folded FROM cpu_profile_samples_local_decoded ORDER BY folded`), ","); got != "main;handle,main;handle;parse" {
		t.Fatalf("rows: %s", got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}

func TestSamePathTwiceInProcessIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.duckdb")
	w := open(t, path, schema.Local)
	defer w.Close()
	_, err := Open(context.Background(), path, schema.Local)
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second open: %v, want ErrInUse", err)
	}
}

func rawExec(t *testing.T, path string, stmts ...string) {
	t.Helper()
	c, err := duckdb.NewConnector(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(c)
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	db.Close()
	c.Close()
}

func TestSchemaMigratesV1AndRefusesForeignFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	v1 := filepath.Join(dir, "v1.duckdb")
	rawExec(t, v1, append(schema.LegacyV1(schema.Local),
		`INSERT INTO profile_frame_dictionary_local VALUES (1, 'main', 1)`,
		`INSERT INTO cpu_profile_samples_local VALUES ('2026-01-01', 'api', 'b', [1], 9)`)...)
	w := open(t, v1, schema.Local)
	got := queryStrings(t, w.DB(), `SELECT folded, sample_count, coalesce(trace_id, 'NULL') FROM cpu_profile_samples_local_decoded`)
	if strings.Join(got, ",") != "main|9|NULL" {
		t.Fatalf("migrated rows: %v", got)
	}
	got = queryStrings(t, w.DB(), `SELECT version FROM schema_version`)
	if got[0] != fmt.Sprint(schema.Version) {
		t.Fatalf("version after migration: %v", got)
	}
	w.Close()

	foreign := filepath.Join(dir, "foreign.duckdb")
	rawExec(t, foreign, `CREATE TABLE t (x INTEGER)`, `INSERT INTO t VALUES (42)`)
	if _, err := Open(ctx, foreign, schema.Local); !errors.Is(err, schema.ErrForeignFile) {
		t.Fatalf("foreign file: %v", err)
	}
	newer := filepath.Join(dir, "newer.duckdb")
	rawExec(t, newer, `CREATE TABLE schema_version (version INTEGER, tier VARCHAR, updated_at TIMESTAMP)`,
		`INSERT INTO schema_version VALUES (99, 'local', now()::TIMESTAMP)`)
	if _, err := Open(ctx, newer, schema.Local); err == nil || !strings.Contains(err.Error(), "newer than this hotpath") {
		t.Fatalf("newer file: %v", err)
	}
	// Tier mismatch: a local file opened as summary.
	local := filepath.Join(dir, "local.duckdb")
	open(t, local, schema.Local).Close()
	if _, err := Open(ctx, local, schema.Summary); err == nil || !strings.Contains(err.Error(), `holds the "local" tier`) {
		t.Fatalf("tier mismatch: %v", err)
	}
	// Refused files are left as they were.
	rawCheck := queryOnce(t, foreign, `SELECT count(*) FROM duckdb_tables()`)
	if rawCheck != "1" {
		t.Fatalf("foreign file was modified: %s tables", rawCheck)
	}
}

func queryOnce(t *testing.T, path, q string) string {
	t.Helper()
	c, err := duckdb.NewConnector(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db := sql.OpenDB(c)
	defer db.Close()
	var s string
	if err := db.QueryRow(q).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The agent bounds DuckDB's memory and threads; the settings hold on every
// connection of the database.
func TestResourcesBoundDuckDB(t *testing.T) {
	spill := filepath.Join(t.TempDir(), "it's spill") // a quote must survive SET
	w, err := Open(context.Background(), filepath.Join(t.TempDir(), "r.duckdb"), schema.Local,
		WithResources(Resources{MemoryLimit: "48MB", Threads: 1, TempDirectory: spill}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	got := queryStrings(t, w.DB(), "SELECT current_setting('memory_limit') || ' ' || current_setting('threads')")
	// DuckDB reports the limit in its own units (48MB is 45.7 MiB).
	if len(got) != 1 || !strings.HasSuffix(got[0], " 1") || !strings.HasPrefix(got[0], "45.7 MiB") {
		t.Errorf("settings = %v, want 45.7 MiB and 1 thread", got)
	}
	if got := queryStrings(t, w.DB(), "SELECT current_setting('temp_directory')"); strings.Join(got, "") != spill {
		t.Errorf("temp_directory = %v, want %s", got, spill)
	}
	// External access goes off after the spill directory is set.
	if _, err := w.DB().Exec("SELECT * FROM read_csv('/etc/passwd')"); err == nil || !strings.Contains(err.Error(), "disabled by configuration") {
		t.Errorf("a query read another file: %v", err)
	}
	// A sort larger than the limit spills there instead of failing.
	if got := queryStrings(t, w.DB(), "SELECT count(*) FROM (SELECT i, repeat('y', 100) AS pad FROM range(2000000) t(i) ORDER BY random())"); strings.Join(got, "") != "2000000" {
		t.Errorf("spilling sort: %v", got)
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "bad.duckdb"), schema.Local,
		WithResources(Resources{MemoryLimit: "lots"})); err == nil {
		t.Error("a memory_limit DuckDB cannot parse was accepted")
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "bad2.duckdb"), schema.Local,
		WithResources(Resources{CheckpointThreshold: "lots"})); err == nil || !strings.Contains(err.Error(), "checkpoint_threshold") {
		t.Errorf("a checkpoint_threshold DuckDB cannot parse: %v", err)
	}
}

// The block size applies to a file Open creates; a file created before
// keeps its own, and both take batches.
func TestBlockSizeAppliesToNewFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	blockSize := func(w *Writer) string {
		t.Helper()
		return strings.Join(queryStrings(t, w.DB(), "SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()"), "")
	}
	write := func(w *Writer, frame string) {
		t.Helper()
		if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0, ServiceID: "s", Frames: []string{frame}, Count: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	small := Resources{BlockSize: 64 << 10}
	fresh, err := Open(ctx, filepath.Join(dir, "new.duckdb"), schema.Local, WithResources(small))
	if err != nil {
		t.Fatal(err)
	}
	write(fresh, "a")
	if got := blockSize(fresh); got != "65536" {
		t.Errorf("a new file with block_size 65536 has blocks of %s bytes", got)
	}
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}

	oldPath := filepath.Join(dir, "old.duckdb")
	old := open(t, oldPath, schema.Local)
	write(old, "a")
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	old, err = Open(ctx, oldPath, schema.Local, WithResources(small))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	write(old, "b")
	if got := blockSize(old); got != "262144" {
		t.Errorf("a file created with DuckDB's default blocks has blocks of %s bytes after a reopen with block_size 65536", got)
	}
	if got := queryStrings(t, old.DB(), "SELECT folded FROM cpu_profile_samples_local_decoded ORDER BY folded"); strings.Join(got, ",") != "a,b" {
		t.Errorf("rows of the reopened file: %v", got)
	}
}

// TestCheckpointThresholdBoundsTheLog: with checkpoint_threshold set, the
// write-ahead log beside the file stays near it however much is written
// (DuckDB's default, 16 MiB, let an agent's log outgrow its file), and every
// row stays readable.
func TestCheckpointThresholdBoundsTheLog(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "c.duckdb")
	w, err := Open(ctx, path, schema.Local, WithResources(Resources{CheckpointThreshold: "1MB"}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if got := strings.Join(queryStrings(t, w.DB(), "SELECT current_setting('checkpoint_threshold')"), ""); got != "976.5 KiB" {
		t.Errorf("checkpoint_threshold = %q, want 976.5 KiB", got)
	}
	// logged: what the batches added to the log, in all (DuckDB removes
	// the log at a checkpoint).
	var peak, last, logged, rows int64
	// New stacks of known frames, as an agent's batches mostly bring.
	for i := range 150 {
		var b Batch
		for j := range 500 {
			b.Rows = append(b.Rows, StackRow{Time: t0.Add(time.Duration(i) * time.Second), ServiceID: "s",
				Frames: []string{"main", fmt.Sprintf("handler%d", j%50), fmt.Sprintf("f%d", (i*7+j)%200), fmt.Sprintf("leaf%d", (i*13+j*3)%200)}, Count: 1})
		}
		if err := w.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
		rows += int64(len(b.Rows))
		var size int64
		if fi, err := os.Stat(path + ".wal"); err == nil {
			size = fi.Size()
		}
		if size > last {
			logged += size - last
		} else {
			logged += size // a checkpoint emptied the log, this batch began a new one
		}
		peak, last = max(peak, size), size
	}
	var stored int64
	if err := w.DB().QueryRow("SELECT sum(sample_count) FROM stack_samples_local").Scan(&stored); err != nil || stored != rows {
		t.Fatalf("%d samples stored (%v), want %d", stored, err, rows)
	}
	if logged < 2<<20 {
		t.Fatalf("the batches logged %d bytes: too few to pass the threshold several times", logged)
	}
	if peak == 0 || peak > 1536<<10 {
		t.Errorf("the log reached %d bytes with a 1MB threshold (%d logged in all)", peak, logged)
	}
}

// A batch sent twice (a retry after a lost answer, or a window replayed from
// the stackaggregator's log after a crash) is stored once, in both tiers and
// across a reopen of the file.
func TestBatchWithStoredIDIsNotWrittenAgain(t *testing.T) {
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "f.duckdb")
			batch := func(id string) *Batch {
				return &Batch{ID: id, Rows: []StackRow{{Time: t0, ServiceID: "api", Frames: []string{"main", "work"}, Count: 7}}}
			}
			total := func(w *Writer) string {
				tb := schema.TablesFor(tier)
				return strings.Join(queryStrings(t, w.DB(), "SELECT sum(sample_count) FROM "+tb.Stacks), "")
			}
			w := open(t, path, tier)
			if err := w.Write(ctx, batch("a-1")); err != nil {
				t.Fatal(err)
			}
			if err := w.Write(ctx, batch("a-1")); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("second write of batch a-1: got %v, want ErrDuplicate", err)
			}
			if err := w.Write(ctx, batch("a-2")); err != nil {
				t.Fatal(err)
			}
			if got := total(w); got != "14" {
				t.Fatalf("after a-1, a-1 again, a-2: %s samples, want 14", got)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = open(t, path, tier)
			defer w.Close()
			if err := w.Write(ctx, batch("a-2")); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("batch a-2 after reopen: got %v, want ErrDuplicate", err)
			}
			// Batches without an id are never taken for repeats.
			if err := w.Write(ctx, batch("")); err != nil {
				t.Fatal(err)
			}
			if err := w.Write(ctx, batch("")); err != nil {
				t.Fatal(err)
			}
			if got := total(w); got != "28" {
				t.Fatalf("after reopen: %s samples, want 28", got)
			}
		})
	}
}

// WriteConverted begins the transaction while the batch is being made:
// a batch that comes out empty, or a conversion that panics, leaves
// nothing behind (not even its ID, so a resend is stored) and the file
// free for the next write; a stored ID is still refused.
func TestWriteConvertedWhileTransactionBegins(t *testing.T) {
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := context.Background()
			w := open(t, filepath.Join(t.TempDir(), "f.duckdb"), tier)
			defer w.Close()
			batch := func(id string, count int64) func(*StackFeed) *Batch {
				return func(*StackFeed) *Batch {
					return &Batch{ID: id, Rows: []StackRow{{Time: t0, ServiceID: "api", Frames: []string{"main", "work"}, Count: count}}}
				}
			}
			total := func() string {
				return strings.Join(queryStrings(t, w.DB(), "SELECT coalesce(sum(sample_count), 0) FROM "+schema.TablesFor(tier).Stacks), "")
			}
			ids := func() string {
				return strings.Join(queryStrings(t, w.DB(), "SELECT batch_id FROM "+schema.IngestedBatches+" WHERE batch_id LIKE 'c-%' ORDER BY 1"), ",")
			}

			if err := w.WriteConverted(ctx, "c-1", 0, func(*StackFeed) *Batch { return &Batch{ID: "c-1"} }); err != nil {
				t.Fatalf("empty batch: %v", err)
			}
			if err := w.WriteConverted(ctx, "c-1", 0, func(*StackFeed) *Batch { return nil }); err != nil {
				t.Fatalf("nil batch: %v", err)
			}
			func() {
				defer func() {
					if r := recover(); r != "conversion failed" {
						t.Fatalf("recovered %v, want the conversion's panic", r)
					}
				}()
				_ = w.WriteConverted(ctx, "c-1", 0, func(*StackFeed) *Batch { panic("conversion failed") })
			}()
			if got := ids() + "/" + total(); got != "/0" {
				t.Fatalf("after an empty, a nil and a panicking conversion: ids %q, total %q; want none", ids(), total())
			}

			if err := w.WriteConverted(ctx, "c-1", 0, batch("c-1", 5)); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteConverted(ctx, "c-1", 0, batch("c-1", 7)); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("c-1 again: got %v, want ErrDuplicate", err)
			}
			if got := ids() + "/" + total(); got != "c-1/5" {
				t.Fatalf("ids %q, total %q; want c-1 and 5 samples", ids(), total())
			}
		})
	}
}

// A writer connection left inside an aborted transaction (what a ROLLBACK
// that fails, e.g. out of memory, leaves behind) refuses every statement:
// the batch that meets it fails, and the next one runs on a fresh
// connection instead of failing forever.
func TestStuckWriterConnectionIsReplaced(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "stuck.duckdb"), schema.Local)
	defer w.Close()
	row := func(svc string) *Batch {
		return &Batch{Rows: []StackRow{{Time: t0, ServiceID: svc, Frames: []string{"main", "work"}, Count: 3}}}
	}
	if err := w.Write(ctx, row("before")); err != nil {
		t.Fatal(err)
	}
	// Leave the writer's connection in an aborted transaction.
	if _, err := w.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.conn.ExecContext(ctx, "SELECT error('poison')"); err == nil {
		t.Fatal("error() did not fail")
	}
	if _, err := w.conn.ExecContext(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Fatalf("the connection is not stuck: %v", err)
	}
	if err := w.Write(ctx, row("lost")); err == nil {
		t.Fatal("a write on a stuck connection succeeded")
	}
	for _, svc := range []string{"after-1", "after-2"} {
		if err := w.Write(ctx, row(svc)); err != nil {
			t.Fatalf("write after the stuck connection: %v", err)
		}
	}
	got := queryStrings(t, w.DB(), "SELECT service_id, sample_count FROM cpu_profile_samples_local ORDER BY service_id")
	if strings.Join(got, ",") != "after-1|3,after-2|3,before|3" {
		t.Fatalf("rows: %v", got)
	}
	// One stack, its frames once each: the failed write left nothing
	// behind, and the writer's dictionaries agree with the file.
	got = queryStrings(t, w.DB(), "SELECT frame_name FROM profile_frame_dictionary_local ORDER BY frame_name")
	if strings.Join(got, ",") != "main,work" {
		t.Fatalf("frames: %v", got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}

// Frames keep the type, file and line of the first stack that said them;
// a frame stored without (before schema version 6, or by a sender that did
// not say) is filled by the first stack that does, also after a restart,
// and never overwritten.
func TestFrameTypesFirstSeenAndFilled(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.duckdb")
	w := open(t, path, schema.Local)
	py := FrameMeta{Type: "python", File: "/srv/app.py", Line: 12}
	write := func(w *Writer, frames []string, meta []FrameMeta) {
		t.Helper()
		if err := w.Write(ctx, &Batch{Rows: []StackRow{{Time: t0, ServiceID: "api", Frames: frames, Meta: meta, Count: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	frames := func(w *Writer) string {
		return strings.Join(queryStrings(t, w.DB(), `SELECT frame_name, coalesce(frame_type, 'NULL'), coalesce(file_name, 'NULL'), coalesce(line_number, 0) FROM profile_frame_dictionary_local ORDER BY frame_id`), ",")
	}
	write(w, []string{"main", "handle"}, nil)
	if got := frames(w); got != "main|NULL|NULL|0,handle|NULL|NULL|0" {
		t.Fatalf("untyped: %s", got)
	}
	// A new stack types handle; main stays unknown (zero meta).
	write(w, []string{"main", "handle", "parse"}, []FrameMeta{{}, py, {Type: "python", File: "/srv/parse.py"}})
	want := "main|NULL|NULL|0,handle|python|/srv/app.py|12,parse|python|/srv/parse.py|0"
	if got := frames(w); got != want {
		t.Fatalf("after typed stack: %s\nwant %s", got, want)
	}
	// Another file or line for handle later does not overwrite the first.
	write(w, []string{"handle", "x"}, []FrameMeta{{Type: "python", File: "/srv/other.py", Line: 99}, {}})
	if got := frames(w); got != want+",x|NULL|NULL|0" {
		t.Fatalf("first seen overwritten: %s", got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart the dictionary knows which frames are untyped.
	w = open(t, path, schema.Local)
	defer w.Close()
	write(w, []string{"main", "y"}, []FrameMeta{{Type: "native"}, {Type: "kernel"}})
	want = "main|native|NULL|0,handle|python|/srv/app.py|12,parse|python|/srv/parse.py|0,x|NULL|NULL|0,y|kernel|NULL|0"
	if got := frames(w); got != want {
		t.Fatalf("after restart: %s\nwant %s", got, want)
	}
}

// A binary named by every batch is rewritten when last_seen moves by more
// than binarySeenStep or anything else about it changes, and its row says
// what the batches said, to that step.
func TestBinaryRowsFollowBatchesToTheMinute(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "local.duckdb"), schema.Local)
	defer func() { _ = w.Close() }() // the writer reopened below
	write := func(seen time.Duration, path string, debug bool) {
		t.Helper()
		b := &Batch{Rows: []StackRow{{Time: t0.Add(seen), ServiceID: "api", BuildID: "b1", Frames: []string{"main"}, Count: 1}},
			Binaries: []Binary{{BuildID: "b1", ServiceID: "api", Path: path, HasDebugInfo: debug, Seen: t0.Add(seen)}}}
		if err := w.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	row := func() string {
		t.Helper()
		got := queryStrings(t, w.DB(), `SELECT strftime(first_seen, '%H:%M:%S'), strftime(last_seen, '%H:%M:%S'), binary_path, has_debug_info FROM binary_metadata_local`)
		if len(got) != 1 {
			t.Fatalf("binary rows: %v", got)
		}
		return got[0]
	}
	write(0, "/bin/api", false)
	write(30*time.Second, "/bin/api", false)
	if got := row(); got != "00:00:00|00:00:00|/bin/api|false" {
		t.Fatalf("seen again within a minute: %s", got)
	}
	write(40*time.Second, "/srv/api", false) // moved: written at once
	if got := row(); got != "00:00:00|00:00:40|/srv/api|false" {
		t.Fatalf("path changed: %s", got)
	}
	write(50*time.Second, "", true) // debug info found, path unknown
	if got := row(); got != "00:00:00|00:00:50|/srv/api|true" {
		t.Fatalf("debug info found: %s", got)
	}
	write(2*time.Minute, "/srv/api", true)
	if got := row(); got != "00:00:00|00:02:00|/srv/api|true" {
		t.Fatalf("seen after more than a minute: %s", got)
	}
	write(-time.Hour, "/srv/api", true) // a late batch moves first_seen
	if got := row(); got != "23:00:00|00:02:00|/srv/api|true" {
		t.Fatalf("late batch: %s", got)
	}
	// A reopened writer knows nothing: it writes the binary once.
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = open(t, filepath.Join(filepath.Dir(w.path), "local.duckdb"), schema.Local)
	write(2*time.Minute+10*time.Second, "/srv/api", true)
	if got := row(); got != "23:00:00|00:02:10|/srv/api|true" {
		t.Fatalf("after reopen: %s", got)
	}
}

// A batch's rows are stored by time, then by stack ID, in alternate
// directions from batch to batch (rowOrder); its trace-tagged rows by time,
// series, trace, span and stack (traceOrder).
func TestRowsStoredInAlternatingStackOrder(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "local.duckdb"), schema.Local)
	defer w.Close()
	// The stacks get IDs 1..4 in this order in the first batch.
	stacks := [][]string{{"a"}, {"b"}, {"c"}, {"d"}}
	batch := func(at time.Time, order []int) *Batch {
		b := &Batch{}
		for _, i := range order {
			b.Rows = append(b.Rows, StackRow{Time: at, ServiceID: "api", Frames: stacks[i], Count: 1},
				StackRow{Time: at, ServiceID: "api", Frames: stacks[i], Count: 1, TraceID: fmt.Sprintf("%032x", i+1)})
		}
		return b
	}
	for i, order := range [][]int{{0, 1, 2, 3}, {2, 0, 3, 1}, {3, 1, 0, 2}} {
		if err := w.Write(ctx, batch(t0.Add(time.Duration(i)*time.Second), order)); err != nil {
			t.Fatal(err)
		}
	}
	tb := schema.TablesFor(schema.Local)
	got := strings.Join(queryStrings(t, w.DB(), "SELECT stack_id FROM "+tb.Samples+" ORDER BY rowid"), ",")
	if want := "1,2,3,4,4,3,2,1,1,2,3,4"; got != want {
		t.Errorf("%s: stack IDs in storage order %s, want %s", tb.Samples, got, want)
	}
	// Stack i+1 carries trace i+1: every batch's trace rows in trace order.
	got = strings.Join(queryStrings(t, w.DB(), "SELECT stack_id FROM "+tb.Traces+" ORDER BY rowid"), ",")
	if want := "1,2,3,4,1,2,3,4,1,2,3,4"; got != want {
		t.Errorf("%s: stack IDs in storage order %s, want %s", tb.Traces, got, want)
	}
	// Within a batch, time comes first.
	b := &Batch{Rows: []StackRow{
		{Time: t0.Add(5 * time.Second), ServiceID: "api", Frames: stacks[0], Count: 1},
		{Time: t0.Add(4 * time.Second), ServiceID: "api", Frames: stacks[3], Count: 1},
		{Time: t0.Add(4 * time.Second), ServiceID: "api", Frames: stacks[1], Count: 1},
	}}
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	got = strings.Join(queryStrings(t, w.DB(), "SELECT stack_id FROM "+tb.Samples+" ORDER BY rowid OFFSET 12"), ",")
	if want := "4,2,1"; got != want {
		t.Errorf("fourth batch (descending): %s, want %s", got, want)
	}
}

// Trace-tagged rows are stored by time, series, trace, span (none first)
// and stack, whatever order the batch had, with both IDs' bytes kept.
func TestTraceRowsStoredInTraceOrder(t *testing.T) {
	ctx := context.Background()
	w := open(t, filepath.Join(t.TempDir(), "local.duckdb"), schema.Local)
	defer w.Close()
	const hi = "ff000000000000000000000000000001"
	row := func(svc string, stack, trace, span string) StackRow {
		return StackRow{Time: t0, ServiceID: svc, Frames: []string{stack}, Count: 1, TraceID: trace, SpanID: span}
	}
	// Stacks a, b, c get IDs 1, 2, 3 in the order the batch names them.
	b := &Batch{Rows: []StackRow{
		row("api", "a", hi, "8000000000000000"),
		row("api", "b", hi, ""),
		row("api", "c", fmt.Sprintf("%032x", 2), "0000000000000001"),
		row("web", "a", fmt.Sprintf("%032x", 1), ""),
		row("api", "a", fmt.Sprintf("%032x", 2), "0000000000000001"),
		row("api", "b", hi, "8000000000000000"),
	}}
	if err := w.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	tb := schema.TablesFor(schema.Local)
	got := queryStrings(t, w.DB(), "SELECT s.service_id || ' ' || "+schema.TraceHex("r.trace_id")+" || ' ' || coalesce("+schema.SpanHex("r.span_id")+", '-') || ' ' || r.stack_id FROM "+tb.Traces+" r JOIN "+tb.Series+" s USING (series_id) ORDER BY r.rowid")
	want := []string{
		"api 00000000000000000000000000000002 0000000000000001 1",
		"api 00000000000000000000000000000002 0000000000000001 3",
		"api " + hi + " - 2",
		"api " + hi + " 8000000000000000 1",
		"api " + hi + " 8000000000000000 2",
		"web 00000000000000000000000000000001 - 1",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("trace rows in storage order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// Each distinct service, pod, build, container and pod UID is one row of
// the series dictionary, whichever batch or writer meets it first; rows
// read back through the views with their own strings.
func TestSeriesDictionaryOneRowPerSeries(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), string(tier)+".duckdb")
			w := open(t, path, tier)
			tb := schema.TablesFor(tier)
			row := func(svc, pod, build, ctr, uid string) StackRow {
				return StackRow{Time: t0, ServiceID: svc, PodName: pod, BuildID: build, ContainerID: ctr, PodUID: uid, Frames: []string{"main"}, Count: 1}
			}
			first := []StackRow{
				row("api", "p1", "b1", "", ""), row("api", "p1", "b1", "", ""),
				row("api", "p1", "b2", "", ""), row("api", "p1", "b1", "c1", ""),
				row("api", "p1", "b1", "", "u1"), row("web", "p1", "b1", "", ""),
				row("api", "p2", "b1", "", ""), // a pod of its own on the summary tier only
			}
			if err := w.Write(ctx, &Batch{Rows: first}); err != nil {
				t.Fatal(err)
			}
			want := 5
			if tier == schema.Summary {
				want = 6
			}
			count := func() string {
				return strings.Join(queryStrings(t, w.DB(), "SELECT count(*) || '/' || count(DISTINCT ("+schema.SeriesColumns(tier)+")) FROM "+tb.Series), "")
			}
			if got := count(); got != fmt.Sprintf("%d/%d", want, want) {
				t.Fatalf("series after the first batch: %s, want %d distinct", got, want)
			}
			// Known series again, from this writer and from a reopened one.
			if err := w.Write(ctx, &Batch{Rows: first[:3]}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = open(t, path, tier)
			defer w.Close()
			if err := w.Write(ctx, &Batch{Rows: append(first[3:], row("db", "p1", "b1", "", ""))}); err != nil {
				t.Fatal(err)
			}
			if got := count(); got != fmt.Sprintf("%d/%d", want+1, want+1) {
				t.Fatalf("series after reopening: %s, want %d distinct", got, want+1)
			}
			pod := ""
			if tier == schema.Summary {
				pod = "pod_name || '|' || "
			}
			got := strings.Join(queryStrings(t, w.DB(), "SELECT k || '=' || sum(sample_count) FROM (SELECT service_id || '|' || "+pod+"build_id || '|' || container_id || '|' || k8s_pod_uid AS k, sample_count FROM "+tb.SamplesView+") GROUP BY k ORDER BY 1"), ",")
			wantRows := "api|b1|c1|=2,api|b1||=6,api|b1||u1=2,api|b2||=2,db|b1||=1,web|b1||=2"
			if tier == schema.Summary {
				wantRows = "api|p1|b1|c1|=2,api|p1|b1||=4,api|p1|b1||u1=2,api|p1|b2||=2,api|p2|b1||=2,db|p1|b1||=1,web|p1|b1||=2"
			}
			if got != wantRows {
				t.Fatalf("rows by series:\n got %s\nwant %s", got, wantRows)
			}
			if err := schema.CheckIntegrity(ctx, w.DB(), tier); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Open returns while the dictionaries are still loading (a file's stacks
// take seconds to read on a large gateway; the collector's receivers start
// after its exporters), and the first write waits for them: a stack stored
// before the reopen keeps its ID instead of being stored again.
func TestOpenDoesNotWaitForTheDictionaries(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.duckdb")
	batch := func(id string) *Batch {
		return &Batch{ID: id, Rows: []StackRow{{Time: t0, ServiceID: "api", Frames: []string{"main", "serve"}, Count: 3}}}
	}
	w := open(t, path, schema.Local)
	if err := w.Write(ctx, batch("first")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	started, release := make(chan struct{}), make(chan struct{})
	loadDictsFunc = func(ctx context.Context, db *sql.DB, tier schema.Tier) (Dicts, error) {
		close(started)
		<-release
		return loadDicts(ctx, db, tier)
	}
	defer func() { loadDictsFunc = loadDicts }()
	opened := make(chan *Writer, 1)
	go func() {
		w, err := Open(ctx, path, schema.Local)
		if err != nil {
			t.Error(err)
		}
		opened <- w
	}()
	var w2 *Writer
	select {
	case w2 = <-opened:
	case <-time.After(time.Minute):
		close(release)
		t.Fatal("Open waited for the dictionaries")
	}
	if w2 == nil {
		t.FailNow()
	}
	defer w2.Close()
	<-started
	written := make(chan error, 1)
	go func() { written <- w2.Write(ctx, batch("second")) }()
	close(release)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if got := queryStrings(t, w2.DB(), "SELECT count(*) FROM profile_stack_dictionary_local"); got[0] != "1" {
		t.Fatalf("%s stacks stored, want 1: the write did not use the loaded dictionary", got[0])
	}
	if got := queryStrings(t, w2.DB(), "SELECT sum(sample_count) FROM stack_samples_local"); got[0] != "6" {
		t.Fatalf("%s samples stored, want 6", got[0])
	}
}

// A load that fails fails the write that waited for it, and the next
// write reopens the file and loads again: nothing is lost or doubled.
func TestDictionaryLoadFailureIsRetried(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.duckdb")
	loads := 0
	loadDictsFunc = func(ctx context.Context, db *sql.DB, tier schema.Tier) (Dicts, error) {
		loads++
		if loads == 1 {
			return Dicts{}, errors.New("disk went away")
		}
		return loadDicts(ctx, db, tier)
	}
	defer func() { loadDictsFunc = loadDicts }()
	w := open(t, path, schema.Local)
	defer w.Close()
	b := &Batch{ID: "b", Rows: []StackRow{{Time: t0, ServiceID: "api", Frames: []string{"main"}, Count: 2}}}
	err := w.Write(ctx, b)
	if err == nil || !strings.Contains(err.Error(), "load the dictionaries") || !strings.Contains(err.Error(), "disk went away") {
		t.Fatalf("first write: %v, want the load's error", err)
	}
	if err := w.Write(ctx, b); err != nil {
		t.Fatalf("write after the failed load: %v", err)
	}
	if loads != 2 {
		t.Fatalf("%d loads, want 2", loads)
	}
	if got := queryStrings(t, w.DB(), "SELECT sum(sample_count) FROM stack_samples_local"); got[0] != "2" {
		t.Fatalf("%s samples stored, want 2", got[0])
	}
}

// TestSpaceCountsFreeBlocks: the first row group deleted and checkpointed
// away leaves free blocks in the file, and Space counts them within the
// file's blocks.
func TestSpaceCountsFreeBlocks(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.duckdb")
	w := open(t, path, schema.Local)
	defer w.Close()
	// Three row groups of rows (122,880 each), checkpointed as they come,
	// so that the first one's blocks lie before the others'.
	for i := 0; i < 60; i++ {
		if i%20 == 0 {
			if _, err := w.DB().ExecContext(ctx, "CHECKPOINT"); err != nil {
				t.Fatal(err)
			}
		}
		var rows []StackRow
		for j := 0; j < 5000; j++ {
			rows = append(rows, StackRow{Time: t0.Add(time.Duration(i) * time.Minute), ServiceID: "api", BuildID: "b",
				Frames: []string{"main", fmt.Sprintf("f%d", j%700), fmt.Sprintf("g%d", (i*5000+j)%3000)}, Count: int64(1 + j%7)})
		}
		if err := w.Write(ctx, &Batch{Rows: rows}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.DB().ExecContext(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	before, err := w.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = w.InTx(ctx, func(ctx context.Context, c *sql.Conn) (func(Dicts), error) {
		_, err := c.ExecContext(ctx, "DELETE FROM stack_sample_rows_local WHERE timestamp < ?", t0.Add(30*time.Minute))
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.DB().ExecContext(ctx, "CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	after, err := w.Space(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("space before the delete %+v, after %+v, file %d bytes", before, after, fi.Size())
	if after.FreeBytes <= before.FreeBytes || after.FreeBytes > after.FileBytes || after.FileBytes > fi.Size() {
		t.Fatalf("space before the delete %+v, after %+v, file %d bytes", before, after, fi.Size())
	}
}

// feedBatch is a batch of rows sent the way the exporter's converter sends
// them (Key and Stack, frames named by Resolve), over stacks: stack i's
// frames are stacks[i], and row i holds stack i%len(stacks).
func feedBatch(id string, stacks [][]string, rows int, count int64) *Batch {
	resolve := func(sx int32) ([]string, []FrameMeta) {
		frames := stacks[sx]
		metas := make([]FrameMeta, len(frames))
		for j, f := range frames {
			metas[j] = FrameMeta{Type: "go", File: f + ".go", Line: int64(10 + j)}
		}
		return frames, metas
	}
	b := &Batch{ID: id, Resolve: resolve}
	for i := range rows {
		sx := int32(i % len(stacks))
		b.Rows = append(b.Rows, StackRow{Time: t0.Add(time.Duration(i/len(stacks)) * time.Second), ServiceID: "api",
			Stack: sx, Key: framedict.KeyOf(stacks[sx]), Count: count})
	}
	return b
}

// storedStacks is what a file holds, decoded: each stack's frames with
// its samples, and each frame's type, file and line.
func storedStacks(t *testing.T, w *Writer, tier schema.Tier) string {
	t.Helper()
	tb := schema.TablesFor(tier)
	return strings.Join(queryStrings(t, w.DB(), "SELECT folded, sum(sample_count) FROM "+tb.Decoded+" GROUP BY ALL ORDER BY ALL"), "\n") + "\n" +
		strings.Join(queryStrings(t, w.DB(), "SELECT frame_name, frame_type, file_name, line_number FROM "+tb.Frames+" ORDER BY ALL"), "\n")
}

// Stacks handed over through the feed while the batch is converted are
// stored as the same rows sent without a feed: some stacks fed (others
// not, as past a full feed), some new to the file and some stored before,
// and a stack fed twice.
func TestFedStacksAreStoredAsUnfedOnes(t *testing.T) {
	var stacks [][]string
	for i := range 700 {
		stacks = append(stacks, []string{"main", fmt.Sprintf("handler%d", i%40), fmt.Sprintf("leaf%d", i)})
	}
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			plain, fed := open(t, filepath.Join(dir, "plain.duckdb"), tier), open(t, filepath.Join(dir, "fed.duckdb"), tier)
			defer plain.Close()
			defer fed.Close()
			// The first batch stores the first 300 stacks in both files.
			for _, w := range []*Writer{plain, fed} {
				if err := w.Write(ctx, feedBatch("b-1", stacks[:300], 300, 2)); err != nil {
					t.Fatal(err)
				}
			}
			if err := plain.Write(ctx, feedBatch("b-2", stacks, 1400, 3)); err != nil {
				t.Fatal(err)
			}
			err := fed.WriteConverted(ctx, "b-2", len(stacks), func(feed *StackFeed) *Batch {
				b := feedBatch("b-2", stacks, 1400, 3)
				feed.Resolve = b.Resolve
				// Every other stack, some twice, out of order: the rest
				// come with their rows only.
				for sx := len(stacks) - 1; sx >= 0; sx -= 2 {
					feed.Add(int32(sx), b.Rows[sx].Key)
				}
				feed.Add(5, b.Rows[5].Key)
				return b
			})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := storedStacks(t, fed, tier), storedStacks(t, plain, tier); got != want {
				t.Fatalf("stored with a feed:\n%s\nwithout:\n%s", got, want)
			}
			if got := fed.StackCount(); got != len(stacks) {
				t.Fatalf("%d stacks in the dictionary, want %d", got, len(stacks))
			}
		})
	}
}

// A conversion that hands over stacks new to the file and then panics
// stores nothing, and the stacks it handed over are stored in full by the
// next batch that holds them: the IDs they were given are not taken for
// stored ones.
func TestFedStacksOfAFailedConversionAreNotTakenAsStored(t *testing.T) {
	stacks := [][]string{{"main", "serve", "parse"}, {"main", "serve", "write"}, {"main", "gc"}}
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := context.Background()
			w := open(t, filepath.Join(t.TempDir(), "f.duckdb"), tier)
			defer w.Close()
			func() {
				defer func() {
					if r := recover(); r != "conversion failed" {
						t.Fatalf("recovered %v, want the conversion's panic", r)
					}
				}()
				_ = w.WriteConverted(ctx, "p-1", len(stacks), func(feed *StackFeed) *Batch {
					b := feedBatch("p-1", stacks, 3, 1)
					feed.Resolve = b.Resolve
					for sx := range stacks {
						feed.Add(int32(sx), b.Rows[sx].Key)
					}
					panic("conversion failed")
				})
			}()
			if err := w.Write(ctx, feedBatch("p-1", stacks, 3, 4)); err != nil {
				t.Fatal(err)
			}
			want := "main;gc|4\nmain;serve;parse|4\nmain;serve;write|4\n" +
				"gc|go|gc.go|11\nmain|go|main.go|10\nparse|go|parse.go|12\nserve|go|serve.go|11\nwrite|go|write.go|12"
			if got := storedStacks(t, w, tier); got != want {
				t.Fatalf("stored:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
