// Package dbcopy copies a DuckDB database into a fresh file in one go
// (COPY FROM DATABASE: every table, view and macro), the layout DuckDB
// gives data written at once, without what batch-by-batch writing and
// frequent checkpoints leave behind. `hotpath compact` replaces a file with
// such a copy; the storage bench measures one beside each file it writes.
package dbcopy

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// Stats is what a copy holds.
type Stats struct {
	Tables int
	Rows   int64
	// SourceBlockSize and BlockSize are the block sizes, in bytes, of the
	// source and of the copy.
	SourceBlockSize, BlockSize int
}

// The block sizes DuckDB can create a file with (powers of two between
// them): a file's block size is fixed when it is created.
const (
	MinBlockSize = 16 << 10
	MaxBlockSize = 256 << 10 // DuckDB's default
)

// ValidBlockSize says whether DuckDB can create a file in blocks of n bytes.
func ValidBlockSize(n int) bool {
	return n >= MinBlockSize && n <= MaxBlockSize && n&(n-1) == 0
}

// Copy copies the database attached as src on conn into a new file at dst,
// in blocks of blockSize bytes (0: src's), checks that every table of the
// copy holds as many rows as in src, checkpoints the copy and detaches it.
// On an error the copy at dst may be partial: the caller removes it.
func Copy(ctx context.Context, conn *sql.Conn, src, dst string, blockSize int) (Stats, error) {
	var st Stats
	if blockSize != 0 && !ValidBlockSize(blockSize) {
		return st, fmt.Errorf("block size %d: want a power of two from %d to %d bytes", blockSize, MinBlockSize, MaxBlockSize)
	}
	tables, err := tableNames(ctx, conn, src)
	if err != nil {
		return st, fmt.Errorf("list the tables of %s: %w", src, err)
	}
	if err := conn.QueryRowContext(ctx, "SELECT block_size FROM pragma_database_size() WHERE database_name = ?", src).Scan(&st.SourceBlockSize); err != nil {
		return st, fmt.Errorf("block size of %s: %w", src, err)
	}
	// By default the copy keeps the file's block size: an agent's file,
	// created in 64 KiB blocks, is a third larger copied into DuckDB's
	// default 256.
	if blockSize == 0 {
		blockSize = st.SourceBlockSize
	}
	st.BlockSize = blockSize
	const alias = "hotpath_copy"
	for _, stmt := range []string{
		fmt.Sprintf("ATTACH %s AS %s (BLOCK_SIZE %d)", sqlquery.Quote(dst), alias, blockSize),
		"COPY FROM DATABASE " + ident(src) + " TO " + alias,
	} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return st, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	detached := false
	defer func() {
		if !detached {
			_, _ = conn.ExecContext(ctx, "DETACH "+alias)
		}
	}()
	for _, t := range tables {
		var in, out int64
		q := fmt.Sprintf("SELECT (SELECT count(*) FROM %s.main.%s), (SELECT count(*) FROM %s.main.%s)", ident(src), ident(t), alias, ident(t))
		if err := conn.QueryRowContext(ctx, q).Scan(&in, &out); err != nil {
			return st, fmt.Errorf("count the rows of %s: %w", t, err)
		}
		if in != out {
			return st, fmt.Errorf("the copy of %s holds %d rows, the original %d", t, out, in)
		}
		st.Rows += in
	}
	st.Tables = len(tables)
	for _, stmt := range []string{"CHECKPOINT " + alias, "DETACH " + alias} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return st, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	detached = true
	return st, nil
}

// FileBytes is the size of a DuckDB file and its write-ahead log.
func FileBytes(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if wal, err := os.Stat(path + ".wal"); err == nil {
		size += wal.Size()
	}
	return size, nil
}

func tableNames(ctx context.Context, conn *sql.Conn, db string) ([]string, error) {
	rows, err := conn.QueryContext(ctx, "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' ORDER BY table_name", db)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
