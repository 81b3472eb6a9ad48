package schema

import (
	"compress/gzip"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver
)

// openV2 copies testdata/v2-<tier>.duckdb.gz, a file written by the schema
// version 2 exporter (exporter/duckdbprofileexporter/v2fixture_test.go at
// commit 70ce0a8), to a new path.
func openV2(t *testing.T, tier Tier) string {
	t.Helper()
	in, err := os.Open(filepath.Join("..", "..", "testdata", "v2-"+string(tier)+".duckdb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), string(tier)+".duckdb")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// openAt is a copy of the version 2 fixture of tier migrated to version v.
func openAt(t *testing.T, tier Tier, v int) *sql.DB {
	t.Helper()
	db := openDB(t, openV2(t, tier))
	if err := ensure(context.Background(), db, tier, v); err != nil {
		t.Fatal(err)
	}
	return db
}

func openDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// totals reads a grouped query into "key columns... → last column" lines,
// sorted, for comparison.
func totals(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
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
		out = append(out, fmt.Sprint(vals...))
	}
	sort.Strings(out)
	return out
}

// perMinute is the samples per service, stack (frame names) and minute, and
// perTrace the samples per trace, span and service, as the RFD tables answer
// them (tables before version 4, views after).
func perMinute(tb Tables) string {
	return `WITH dict AS (` + namesSQL(tb) + `)
SELECT service_id, time_bucket(INTERVAL 1 MINUTE, ` + tb.TimeCol + `) AS minute, array_to_string(` + decodeSQL("stack_frame_ids") + `, ';'), sum(sample_count)
FROM ` + tb.Stacks + `, dict GROUP BY ALL`
}

func perTrace(tb Tables) string {
	return `SELECT trace_id, span_id, service_id, sum(sample_count) FROM ` + tb.Stacks + ` WHERE trace_id IS NOT NULL GROUP BY ALL`
}

func version(t *testing.T, db *sql.DB) int {
	t.Helper()
	var v int
	if err := db.QueryRow("SELECT version FROM schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func same(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("%s: no rows to compare", what)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s differ: %d rows after, %d before\nafter (first 5): %v\nbefore (first 5): %v", what, len(got), len(want), got[:min(5, len(got))], want[:min(5, len(want))])
	}
}

// TestMigrateV2FilesKeepsEveryTotal upgrades the version 2 files of both
// tiers in place: the same samples per service, stack and minute and per
// trace and span, through the RFD names and through the new tables.
func TestMigrateV2FilesKeepsEveryTotal(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			path := openV2(t, tier)
			db := openDB(t, path)
			if v := version(t, db); v != 2 {
				t.Fatalf("fixture has version %d, want 2", v)
			}
			minutes, traces := totals(t, db, perMinute(tb)), totals(t, db, perTrace(tb))
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			if v := version(t, db); v != Version {
				t.Fatalf("version %d after migration, want %d", v, Version)
			}
			same(t, "samples per service, stack and minute (RFD view)", totals(t, db, perMinute(tb)), minutes)
			same(t, "samples per trace, span and service (RFD view)", totals(t, db, perTrace(tb)), traces)
			// The row tables through their views: Samples holds every
			// sample, Traces the trace-tagged ones with binary IDs.
			same(t, "samples per service, stack and minute (Samples)", totals(t, db, `WITH dict AS (`+namesSQL(tb)+`)
SELECT service_id, time_bucket(INTERVAL 1 MINUTE, `+tb.TimeCol+`) AS minute, array_to_string(`+decodeSQL("s.stack_frame_ids")+`, ';'), sum(sample_count)
FROM `+tb.SamplesView+` JOIN `+tb.StackDict+` s USING (stack_id), dict GROUP BY ALL`), minutes)
			same(t, "samples per trace (Traces)", totals(t, db, `SELECT `+TraceHex("trace_id")+`, `+SpanHex("span_id")+`, service_id, sum(sample_count) FROM `+tb.TracesView+` GROUP BY ALL`), traces)
			if err := CheckIntegrity(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			// Opening again changes nothing.
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			same(t, "samples after reopening", totals(t, db, perMinute(tb)), minutes)
		})
	}
}

const childEnv = "HOTPATH_SCHEMA_CHILD"

// TestMigrationChild is the body of the crashing child process (it does
// nothing in a normal run): it migrates a file and exits without any
// cleanup in the middle of the version 3 → 4 step, after the new tables
// are filled.
func TestMigrationChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		return
	}
	tier, path, _ := strings.Cut(v, ":")
	db, err := sql.Open("duckdb", path)
	if err != nil {
		os.Exit(3)
	}
	n := 0
	migrationFault = func(v int) error {
		if v == 3 {
			if n++; n == 6 {
				os.Exit(7) // a crash: no rollback, no close
			}
		}
		return nil
	}
	err = Ensure(context.Background(), db, Tier(tier))
	fmt.Println("migration finished:", err)
	os.Exit(0)
}

// TestMigrationInterruptedLeavesOldFile fails the migration midway, once
// with an error (rolled back) and once by killing the process, and checks
// the file opens as version 2 with its data, then migrates.
func TestMigrationInterruptedLeavesOldFile(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)

			// An error halfway through the version 3 → 4 step.
			path := openV2(t, tier)
			db := openDB(t, path)
			minutes := totals(t, db, perMinute(tb))
			injected := errors.New("injected failure")
			n := 0
			migrationFault = func(v int) error {
				if v == 3 {
					if n++; n == 6 {
						return injected
					}
				}
				return nil
			}
			err := Ensure(ctx, db, tier)
			migrationFault = nil
			if !errors.Is(err, injected) {
				t.Fatalf("Ensure with a failing step: %v", err)
			}
			if v := version(t, db); v != 2 {
				t.Fatalf("version %d after a failed migration, want 2", v)
			}
			same(t, "samples after a failed migration", totals(t, db, perMinute(tb)), minutes)
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			same(t, "samples after migrating again", totals(t, db, perMinute(tb)), minutes)

			// A crash (the process exits) at the same point.
			path = openV2(t, tier)
			cmd := exec.Command(os.Args[0], "-test.run=^TestMigrationChild$")
			cmd.Env = append(os.Environ(), childEnv+"="+string(tier)+":"+path)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 7 {
				t.Fatalf("child did not crash mid-migration: %v\n%s", err, out)
			}
			db = openDB(t, path)
			if v := version(t, db); v != 2 {
				t.Fatalf("version %d after a crash mid-migration, want 2", v)
			}
			same(t, "samples after a crash", totals(t, db, perMinute(tb)), minutes)
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			same(t, "samples after migrating the crashed file", totals(t, db, perMinute(tb)), minutes)
			if err := CheckIntegrity(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMigrateV2FilesTypesFramesBySuffix: frames stored before frame types
// (names only) get the type their suffix says, the rest stay unknown, and
// no frame is added or lost (counts: TestMigrateV2FilesKeepsEveryTotal).
func TestMigrateV2FilesTypesFramesBySuffix(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openDB(t, openV2(t, tier))
			// The fixture's frames plus one of each suffix (unreferenced:
			// frame_count 0).
			for _, name := range []string{"migrate_test_jit_[j]", "migrate_test_kernel_[k]"} {
				if _, err := db.Exec(`INSERT INTO ` + tb.Frames + ` SELECT max(frame_id) + 1, '` + name + `', 0 FROM ` + tb.Frames); err != nil {
					t.Fatal(err)
				}
			}
			before := totals(t, db, `SELECT frame_id, frame_name FROM `+tb.Frames)
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			same(t, "frames", totals(t, db, `SELECT frame_id, frame_name FROM `+tb.Frames), before)
			got := totals(t, db, `SELECT concat_ws('|', coalesce(frame_type, 'NULL'), count(file_name), count(line_number)) FROM `+tb.Frames+`
WHERE frame_type IS DISTINCT FROM CASE WHEN suffix(frame_name, '_[j]') THEN 'jit' WHEN suffix(frame_name, '_[k]') THEN 'kernel' END
   OR file_name IS NOT NULL OR line_number IS NOT NULL GROUP BY frame_type`)
			if len(got) != 0 {
				t.Fatalf("frames typed otherwise than by their suffix, or with a file or line: %v", got)
			}
			got = totals(t, db, `SELECT frame_type || ' ' || count(*) FROM `+tb.Frames+` WHERE frame_name LIKE 'migrate_test_%' GROUP BY frame_type`)
			if strings.Join(got, ",") != "jit 1,kernel 1" {
				t.Fatalf("test frames' types: %v", got)
			}
		})
	}
}

// TestMigrateV6AddsWorkloadColumns opens a file of version 6 (the v2 file
// migrated to version 6, with the version 7 columns taken out again): every
// old row's series gets container_id and k8s_pod_uid ”, and every total
// stays.
func TestMigrateV6AddsWorkloadColumns(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openAt(t, tier, 6)
			var tables []string
			for _, rv := range tb.rowViews() {
				tables = append(tables, rv[1]) // the tables' names before version 8
			}
			for _, table := range tables {
				for _, col := range strings.Split(WorkloadColumns, ", ") {
					if _, err := db.Exec(`ALTER TABLE ` + table + ` DROP COLUMN ` + col); err != nil {
						t.Fatalf("make a version 6 file: %v", err)
					}
				}
			}
			minutes := totals(t, db, `SELECT service_id, `+tb.TimeCol+`, stack_id, sum(sample_count) FROM `+tb.SamplesView+` GROUP BY ALL`)
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			if v := version(t, db); v != Version {
				t.Fatalf("version %d after migration, want %d", v, Version)
			}
			same(t, "samples per service, minute and stack", totals(t, db, `SELECT service_id, `+tb.TimeCol+`, stack_id, sum(sample_count) FROM `+tb.SamplesView+` GROUP BY ALL`), minutes)
			for _, table := range tables {
				var rows, blank int
				if err := db.QueryRow(`SELECT count(*), count(*) FILTER (WHERE container_id = '' AND k8s_pod_uid = '') FROM `+table).Scan(&rows, &blank); err != nil {
					t.Fatal(err)
				}
				if rows != blank {
					t.Errorf("%s: %d of %d old rows have a container or pod", table, rows-blank, rows)
				}
			}
			// samples_in answers with the new columns.
			if _, err := db.Exec(`SELECT container_id, k8s_pod_uid FROM samples_in('x', TIMESTAMP '2000-01-01', TIMESTAMP '2100-01-01')`); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMigrateV7MovesRowsToSeriesDictionary opens a file of version 7 whose
// rows differ in every series column (the v2 file migrated to version 7,
// with rows copied to other containers, pods and builds, and the roll-ups
// filled): afterwards each distinct series is one series_id, the views
// under the old table names answer every total per series, stack and
// bucket as the tables did, the RFD views and samples_in too, and the
// file passes CheckIntegrity.
func TestMigrateV7MovesRowsToSeriesDictionary(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openAt(t, tier, 7)
			pod := podCol(tier, "")
			// Copies of every row in another container, pod UID and build
			// (and pod: the summary tier), and roll-ups of all of it.
			podCopy := ""
			if tier == Summary {
				podCopy = "pod_name || '-b' AS pod_name, "
			}
			for _, table := range []string{tb.SamplesView, tb.TracesView} {
				if _, err := db.Exec(`INSERT INTO ` + table + ` SELECT * REPLACE (` + strings.TrimSuffix(podCopy, ", ") + sep(podCopy) + `build_id || '-b' AS build_id, 'ctr-' || service_id AS container_id, 'uid-1' AS k8s_pod_uid) FROM ` + table); err != nil {
					t.Fatal(err)
				}
			}
			if tier == Summary {
				for _, r := range [][3]string{{tb.HourlyView, tb.SamplesView, "hour"}, {tb.DailyView, tb.HourlyView, "day"}} {
					if _, err := db.Exec(`INSERT INTO ` + r[0] + ` SELECT date_trunc('` + r[2] + `', bucket_time), service_id, pod_name, build_id, stack_id, sum(sample_count), sample_period_ns, container_id, k8s_pod_uid FROM ` + r[1] + ` GROUP BY ALL`); err != nil {
						t.Fatal(err)
					}
				}
			}
			key := tb.TimeCol + ", service_id, " + pod + "build_id, container_id, k8s_pod_uid, stack_id, sample_period_ns"
			before := map[string][]string{}
			for _, rv := range tb.rowViews() {
				before[rv[1]] = totals(t, db, `SELECT `+key+`, sum(sample_count) FROM `+rv[1]+` GROUP BY ALL`)
			}
			traces := totals(t, db, `SELECT `+key+`, hex(trace_id), hex(span_id), sum(sample_count) FROM `+tb.TracesView+` GROUP BY ALL`)
			distinct := totals(t, db, `SELECT DISTINCT service_id, `+pod+`build_id, container_id, k8s_pod_uid FROM `+tb.SamplesView)
			// perMinute's figures, from the table (there is no RFD view
			// before version 8's views are made).
			byName := `WITH dict AS (` + namesSQL(tb) + `)
SELECT service_id, time_bucket(INTERVAL 1 MINUTE, ` + tb.TimeCol + `) AS minute, array_to_string(` + decodeSQL("s.stack_frame_ids") + `, ';'), sum(sample_count)
FROM ` + tb.SamplesView + ` JOIN ` + tb.StackDict + ` s USING (stack_id), dict GROUP BY ALL`
			minutes := totals(t, db, byName)

			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			if v := version(t, db); v != Version {
				t.Fatalf("version %d after migration, want %d", v, Version)
			}
			for _, rv := range tb.rowViews() {
				same(t, rv[1]+" per series, stack and bucket", totals(t, db, `SELECT `+key+`, sum(sample_count) FROM `+rv[1]+` GROUP BY ALL`), before[rv[1]])
			}
			same(t, "trace rows", totals(t, db, `SELECT `+key+`, upper(`+TraceHex("trace_id")+`), upper(`+SpanHex("span_id")+`), sum(sample_count) FROM `+tb.TracesView+` GROUP BY ALL`), traces)
			same(t, "series", totals(t, db, `SELECT `+SeriesColumns(tier)+` FROM `+tb.Series), distinct)
			same(t, "samples per service, stack and minute", totals(t, db, byName), minutes)
			same(t, "samples per service, stack and minute (RFD view)", totals(t, db, perMinute(tb)), minutes)
			var ids, series int
			if err := db.QueryRow(`SELECT count(DISTINCT series_id), count(*) FROM `+tb.Series).Scan(&ids, &series); err != nil {
				t.Fatal(err)
			}
			if ids != series || series != len(distinct) || series < 2 {
				t.Fatalf("%d series IDs for %d series, want %d distinct (at least 2)", ids, series, len(distinct))
			}
			if err := CheckIntegrity(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// sep is ", " after a non-empty REPLACE item.
func sep(item string) string {
	if item == "" {
		return ""
	}
	return ", "
}

// The step to version 9 drops frame_count and keeps every frame as it was:
// ID, name, type, file and line, and CheckIntegrity holds after it.
func TestMigrateV8DropsFrameCounts(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openAt(t, tier, 8)
			// A frame with every column set, as version 8 wrote them.
			if _, err := db.Exec(`INSERT INTO ` + tb.Frames + ` (frame_id, frame_name, frame_count, frame_type, file_name, line_number)
SELECT max(frame_id) + 1, 'migrate_test_typed', 0, 'python', '/srv/app.py', 42 FROM ` + tb.Frames); err != nil {
				t.Fatal(err)
			}
			const cols = "frame_id, frame_name, frame_type, file_name, line_number"
			before := totals(t, db, `SELECT `+cols+` FROM `+tb.Frames)
			if len(before) < 3 {
				t.Fatalf("%d frames in the fixture", len(before))
			}
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			if v := version(t, db); v != Version {
				t.Fatalf("version %d after migration, want %d", v, Version)
			}
			same(t, "frames", totals(t, db, `SELECT `+cols+` FROM `+tb.Frames), before)
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM duckdb_columns() WHERE table_name = ? AND column_name = 'frame_count'`, tb.Frames).Scan(&n); err != nil || n != 0 {
				t.Fatalf("frame_count columns after migration: %d (%v)", n, err)
			}
			if err := CheckIntegrity(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The step to version 10 rewrites Traces with UUID trace and UBIGINT span
// IDs: every row keeps its time, series, stack, count, period and the
// bytes of both IDs (a span ID with its high bit set and a row without
// span included), the RFD view gives the same hex, and a trace is found by
// its hex ID.
func TestMigrateV9StoresTraceIDsAsIntegers(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openAt(t, tier, 9)
			// Two more traces on one key of the fixture, and their samples
			// in Samples (every trace-tagged sample is also there).
			key := `SELECT ` + tb.TimeCol + `, series_id, stack_id, sample_period_ns FROM ` + tb.Traces + ` ORDER BY ALL LIMIT 1`
			for _, q := range []string{
				`INSERT INTO ` + tb.Traces + ` SELECT ` + tb.TimeCol + `, series_id, stack_id, unhex('ffeeddccbbaa99887766554433221100'), unhex('8000000000000001'), 7, sample_period_ns FROM (` + key + `)`,
				`INSERT INTO ` + tb.Traces + ` SELECT ` + tb.TimeCol + `, series_id, stack_id, unhex('00000000000000000000000000000001'), NULL, 3, sample_period_ns FROM (` + key + `)`,
				`INSERT INTO ` + tb.Samples + ` SELECT ` + tb.TimeCol + `, series_id, stack_id, 10, sample_period_ns FROM (` + key + `)`,
			} {
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			const cols = "series_id, stack_id, sample_count, sample_period_ns"
			before := totals(t, db, `SELECT `+tb.TimeCol+`, `+cols+`, lower(hex(trace_id)), lower(hex(span_id)) FROM `+tb.Traces)
			// perTrace's figures, from the table (views are made for
			// Version only).
			rfd := totals(t, db, `SELECT lower(hex(trace_id)), lower(hex(span_id)), s.service_id, sum(sample_count) FROM `+tb.Traces+` r JOIN `+tb.Series+` s USING (series_id) GROUP BY ALL`)
			if len(before) < 3 {
				t.Fatalf("%d trace rows in the fixture", len(before))
			}
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			if v := version(t, db); v != Version {
				t.Fatalf("version %d after migration, want %d", v, Version)
			}
			same(t, "trace rows", totals(t, db, `SELECT `+tb.TimeCol+`, `+cols+`, `+TraceHex("trace_id")+`, `+SpanHex("span_id")+` FROM `+tb.Traces), before)
			same(t, "samples per trace, span and service (RFD view)", totals(t, db, perTrace(tb)), rfd)
			types := totals(t, db, `SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = '`+tb.Traces+`' AND column_name IN ('trace_id', 'span_id')`)
			same(t, "ID column types", types, []string{"span_idUBIGINT", "trace_idUUID"})
			var n int64
			if err := db.QueryRow(`SELECT sum(sample_count) FROM ` + tb.Traces + ` WHERE trace_id = CAST('ffeeddccbbaa99887766554433221100' AS UUID) AND span_id = CAST('0x8000000000000001' AS UBIGINT)`).Scan(&n); err != nil || n != 7 {
				t.Fatalf("samples of the added trace: %d (%v), want 7", n, err)
			}
			if err := CheckIntegrity(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A step to version 10 that fails after the old trace table is dropped
// (before the new one takes its name) leaves version 9 with every trace
// row; the next open migrates it.
func TestMigrateV9FailedAfterDropKeepsTraceRows(t *testing.T) {
	ctx := context.Background()
	for _, tier := range []Tier{Local, Summary} {
		t.Run(string(tier), func(t *testing.T) {
			tb := TablesFor(tier)
			db := openAt(t, tier, 9)
			const rows = "SELECT series_id, stack_id, sample_count, lower(hex(trace_id)), lower(hex(span_id)) FROM "
			before := totals(t, db, rows+tb.Traces)
			injected := errors.New("injected failure")
			n := 0
			migrationFault = func(v int) error {
				// Statements of the step: create, insert, drop, rename.
				if v == 9 {
					if n++; n == 4 {
						return injected
					}
				}
				return nil
			}
			err := Ensure(ctx, db, tier)
			migrationFault = nil
			if !errors.Is(err, injected) || n != 4 {
				t.Fatalf("Ensure with a failing step: %v (%d statements)", err, n)
			}
			if v := version(t, db); v != 9 {
				t.Fatalf("version %d after a failed migration, want 9", v)
			}
			same(t, "trace rows after a failed migration", totals(t, db, rows+tb.Traces), before)
			if err := Ensure(ctx, db, tier); err != nil {
				t.Fatal(err)
			}
			same(t, "trace rows after migrating again", totals(t, db, "SELECT series_id, stack_id, sample_count, "+TraceHex("trace_id")+", "+SpanHex("span_id")+" FROM "+tb.Traces), before)
		})
	}
}
