package dbcopy

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// TestCopyKeepsTablesViewsAndMacros copies a file written in many
// transactions and reads every object back from the copy, which has the
// file's block size (not DuckDB's default) or the one asked for.
func TestCopyKeepsTablesViewsAndMacros(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src.duckdb"), filepath.Join(dir, "dst.duckdb")
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(stmts ...string) {
		t.Helper()
		for _, s := range stmts {
			if _, err := conn.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	exec("ATTACH "+sqlquery.Quote(src)+" AS src (BLOCK_SIZE 65536)",
		"CREATE TABLE src.rows (id INTEGER PRIMARY KEY, stack INTEGER[], n BIGINT)",
		"CREATE TABLE src.empty (x VARCHAR)",
		"CREATE VIEW src.totals AS SELECT sum(n) AS n FROM src.rows",
		"CREATE MACRO src.twice(x) AS 2 * x")
	for i := 0; i < 50; i++ {
		exec("INSERT INTO src.rows SELECT i, [i, i + 1], i * 10 FROM range(" + strconv.Itoa(i*100) + ", " + strconv.Itoa(i*100+100) + ") t(i)")
	}
	// The copy keeps the file's block size, or takes the one asked for.
	for _, c := range []struct {
		ask, want int64
	}{{0, 65536}, {16384, 16384}} {
		dst := fmt.Sprintf("%s-%d", dst, c.ask)
		st, err := Copy(ctx, conn, "src", dst, int(c.ask))
		if err != nil {
			t.Fatal(err)
		}
		if st.Tables != 2 || st.Rows != 5000 {
			t.Fatalf("copied %d tables, %d rows; want 2 and 5000", st.Tables, st.Rows)
		}
		exec("ATTACH "+sqlquery.Quote(dst)+" AS dst", "USE dst")
		var n, total, twice, blockSize int64
		if err := conn.QueryRowContext(ctx, "SELECT (SELECT count(*) FROM rows), (SELECT n FROM totals), twice(21)").Scan(&n, &total, &twice); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRowContext(ctx, "SELECT block_size FROM pragma_database_size() WHERE database_name = 'dst'").Scan(&blockSize); err != nil || blockSize != c.want {
			t.Fatalf("copy with block size %d: the copy's block size is %d (%v), want %d", c.ask, blockSize, err, c.want)
		}
		if n != 5000 || total != 10*4999*5000/2 || twice != 42 {
			t.Fatalf("the copy reads %d rows, total %d, twice(21) = %d", n, total, twice)
		}
		// The key came along: a duplicate is refused.
		if _, err := conn.ExecContext(ctx, "INSERT INTO rows VALUES (7, [], 0)"); err == nil || !strings.Contains(err.Error(), "Duplicate key") {
			t.Fatalf("a duplicate key in the copy: %v", err)
		}
		exec("USE memory", "DETACH dst")
	}
}

// TestCopyFailsCleanly: a destination that cannot be a database file is an
// error that names the statement, and the connection is left usable.
func TestCopyFailsCleanly(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "ATTACH "+sqlquery.Quote(filepath.Join(dir, "src.duckdb"))+" AS src"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(ctx, "CREATE TABLE src.t AS SELECT 1 AS x"); err != nil {
		t.Fatal(err)
	}
	_, err = Copy(ctx, conn, "src", dir, 0) // a directory
	if err == nil || !strings.Contains(err.Error(), "ATTACH") {
		t.Fatalf("copy into a directory: %v", err)
	}
	_, err = Copy(ctx, conn, "src", filepath.Join(dir, "odd.duckdb"), 100000)
	if err == nil || !strings.Contains(err.Error(), "block size 100000: want a power of two") {
		t.Fatalf("copy in blocks of 100000 bytes: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "odd.duckdb")); !os.IsNotExist(err) {
		t.Fatalf("a refused block size left a file: %v", err)
	}
	if _, err := Copy(ctx, conn, "src", filepath.Join(dir, "ok.duckdb"), 0); err != nil {
		t.Fatalf("the next copy on the same connection: %v", err)
	}
}
