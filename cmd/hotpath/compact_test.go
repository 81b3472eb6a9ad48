package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/internal/dbcopy"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// fileContents is every table's row count and every stored flame graph of
// a hotpath file: what compacting must not change.
type fileContents struct {
	counts map[string]int64
	folded map[string][]string // per service, "stack samples" lines
}

func readContents(t *testing.T, path string, since, until time.Time) fileContents {
	t.Helper()
	db, closeDB, err := sqlquery.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB() //nolint:errcheck
	c := fileContents{counts: map[string]int64{}, folded: map[string][]string{}}
	for _, table := range strings1Must(t, db, "SELECT table_name FROM duckdb_tables() WHERE NOT internal ORDER BY 1") {
		var n int64
		if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		c.counts[table] = n
	}
	for _, svc := range []string{"api", "worker"} {
		c.folded[svc] = strings1Must(t, db, fmt.Sprintf("SELECT folded || ' ' || samples FROM folded_stacks('%s', TIMESTAMP '%s', TIMESTAMP '%s')",
			svc, since.UTC().Format("2006-01-02 15:04:05"), until.UTC().Format("2006-01-02 15:04:05")))
	}
	return c
}

func strings1Must(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	out, err := strings1(context.Background(), db, q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

func copyFileT(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactKeepsEveryRow writes a file the way a collector does (a
// transaction per batch, the file closed and opened again between
// batches), compacts it, and checks that every table holds the same rows and
// every flame graph reads the same. Then the exporter writes to the
// compacted file and to an uncompacted twin: both must still read the same,
// so the compacted file works as the original did (dictionaries, keys,
// roll-ups).
func TestCompactKeepsEveryRow(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			dir := t.TempDir()
			path, twin := filepath.Join(dir, "hotpath.duckdb"), filepath.Join(dir, "twin.duckdb")
			now := time.Now().UTC().Truncate(time.Minute)
			for _, b := range deployFixture(now) {
				writeDB(t, tier, path, "", []batch{b})
			}
			copyFileT(t, path, twin)
			// A copy an interrupted run left is replaced.
			if err := os.WriteFile(path+".compact", []byte("left by a crash"), 0o644); err != nil {
				t.Fatal(err)
			}
			since, until := now.Add(-2*time.Hour), now.Add(time.Hour)
			before := readContents(t, path, since, until)
			sizeBefore, _ := dbcopy.FileBytes(path)

			out, stderr, code := runCLI(t, "compact", "--db", path)
			if code != 0 {
				t.Fatalf("compact: code %d, stderr %q", code, stderr)
			}
			if !strings.Contains(out, path+": ") || !strings.Contains(out, "row count checked") {
				t.Fatalf("compact printed %q", out)
			}
			for _, f := range []string{path + ".compact", path + ".wal"} {
				if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s is left after compacting (%v)", f, err)
				}
			}
			after := readContents(t, path, since, until)
			if !reflect.DeepEqual(before, after) {
				t.Fatalf("compacting changed the file:\nbefore %v\nafter  %v", before, after)
			}
			if sizeAfter, _ := dbcopy.FileBytes(path); sizeAfter > sizeBefore {
				t.Fatalf("the compacted file is %d bytes, the original %d", sizeAfter, sizeBefore)
			}
			// Once more into 32 KiB blocks: a file's block size is fixed
			// when it is created, and compact is how an existing one changes.
			blocksWere := blockSizeOf(t, path)
			out, stderr, code = runCLI(t, "compact", "--db", path, "--block-size", "32768")
			if code != 0 {
				t.Fatalf("compact --block-size 32768: code %d, stderr %q", code, stderr)
			}
			if want := fmt.Sprintf("blocks of %d -> 32768 bytes", blocksWere); !strings.Contains(out, want) {
				t.Fatalf("compact --block-size printed %q, want it to say %q", out, want)
			}
			if got := blockSizeOf(t, path); got != 32768 {
				t.Fatalf("after compact --block-size 32768 the file's blocks are %d bytes", got)
			}
			if again := readContents(t, path, since, until); !reflect.DeepEqual(before, again) {
				t.Fatalf("compacting into other blocks changed the file:\nbefore %v\nafter  %v", before, again)
			}
			more := deployFixture(now.Add(5 * time.Minute))
			for _, p := range []string{path, twin} {
				writeDB(t, tier, p, "", more)
			}
			if got, want := readContents(t, path, since, until), readContents(t, twin, since, until); !reflect.DeepEqual(got, want) {
				t.Fatalf("after more writes the compacted file reads\n%v\nand the original\n%v", got, want)
			}
		})
	}
}

func blockSizeOf(t *testing.T, path string) int {
	t.Helper()
	db, closeDB, err := sqlquery.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB() //nolint:errcheck
	var n int
	if err := db.QueryRow("SELECT block_size FROM pragma_database_size()").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestCompactCheckpointsTheLog: rows that are only in the write-ahead log
// (a collector killed before its checkpoint) are in the compacted file, and
// no log is left to be replayed onto it.
func TestCompactCheckpointsTheLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hotpath.duckdb")
	writeDB(t, "local", path, "", deployFixture(time.Now().UTC()))
	db, err := sql.Open("duckdb", path)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	for _, s := range []string{
		"PRAGMA disable_checkpoint_on_shutdown",
		"SET checkpoint_threshold = '1GB'",
		"INSERT INTO ingested_batches VALUES ('only-in-the-log', now())",
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path + ".wal"); err != nil || fi.Size() == 0 {
		t.Fatalf("the test needs a write-ahead log: %v", err)
	}
	if _, stderr, code := runCLI(t, "compact", "--db", path); code != 0 {
		t.Fatalf("compact: code %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(path + ".wal"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a write-ahead log is left beside the compacted file (%v)", err)
	}
	rdb, closeDB, err := sqlquery.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB() //nolint:errcheck
	var n int
	if err := rdb.QueryRow("SELECT count(*) FROM ingested_batches WHERE batch_id = 'only-in-the-log'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the row only the log held: %d (%v)", n, err)
	}
}

// TestCompactRefuses: a file a collector holds, a file that is not
// hotpath's, a block size DuckDB cannot create and an endpoint are refused with a message saying why, and the
// file is left as it was.
func TestCompactRefuses(t *testing.T) {
	dir := t.TempDir()
	held := filepath.Join(dir, "held.duckdb")
	holdInChild(t, held)
	_, stderr, code := runCLI(t, "compact", "--db", held)
	if code != 1 || !strings.Contains(stderr, "a collector holds") || !strings.Contains(stderr, "stop it first") {
		t.Fatalf("held file: code %d, stderr %q", code, stderr)
	}

	other := filepath.Join(dir, "other.duckdb")
	db, err := sql.Open("duckdb", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE t AS SELECT 42 AS answer"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	sum := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%x", b)
	}
	was := sum(other)
	_, stderr, code = runCLI(t, "compact", "--db", other)
	if code != 1 || !strings.Contains(stderr, "is it a hotpath file?") {
		t.Fatalf("not a hotpath file: code %d, stderr %q", code, stderr)
	}
	if sum(other) != was {
		t.Fatal("a refused compact changed the file")
	}
	if _, err := os.Stat(other + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused compact left its copy (%v)", err)
	}

	_, stderr, code = runCLI(t, "compact", "--db", other, "--block-size", "100000")
	if code != 1 || !strings.Contains(stderr, "--block-size 100000: want a power of two from 16384 to 262144 bytes") {
		t.Fatalf("--block-size 100000: code %d, stderr %q", code, stderr)
	}
	if sum(other) != was {
		t.Fatal("a refused compact changed the file")
	}

	_, stderr, code = runCLI(t, "compact", "--db", "127.0.0.1:7072")
	if code != 1 || !strings.Contains(stderr, "is an endpoint") {
		t.Fatalf("endpoint: code %d, stderr %q", code, stderr)
	}
}
