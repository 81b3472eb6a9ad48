package storebench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
)

// Part is what a table, or a subset of its columns, costs on disk.
type Part struct {
	Columns     string  `json:"columns"`
	Bytes       int64   `json:"bytes"`
	BytesPerRow float64 `json:"bytes_per_row"`
}

// breakdown copies column subsets of table into fresh DuckDB files and
// measures each after CHECKPOINT: where a tier's bytes go (stacks, trace
// context, the rest), measured rather than estimated.
func breakdown(ctx context.Context, dir, path, table string, subsets []string) ([]Part, error) {
	// An in-memory database attaches the source read-only and each part
	// file read-write; one connection, since ATTACH is per connection.
	db, err := sql.Open("duckdb", "")
	if err != nil {
		return nil, fmt.Errorf("open in-memory database: %w", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("ATTACH '%s' AS src (READ_ONLY)", path)); err != nil {
		return nil, fmt.Errorf("attach %s: %w", path, err)
	}
	table = "src." + table
	var rows int64
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&rows); err != nil {
		return nil, fmt.Errorf("count %s: %w", table, err)
	}
	var parts []Part
	for i, cols := range subsets {
		out := filepath.Join(dir, fmt.Sprintf("breakdown-%d.duckdb", i))
		_ = os.Remove(out)
		steps := []string{
			fmt.Sprintf("ATTACH '%s' AS part", out),
			fmt.Sprintf("CREATE TABLE part.t AS SELECT %s FROM %s", cols, table),
			"CHECKPOINT part",
			"DETACH part",
		}
		for _, q := range steps {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return nil, fmt.Errorf("breakdown of %s (%s): %s: %w", table, cols, q, err)
			}
		}
		st, err := os.Stat(out)
		if err != nil {
			return nil, err
		}
		p := Part{Columns: table[len("src."):] + ": " + cols, Bytes: st.Size()}
		if rows > 0 {
			p.BytesPerRow = float64(p.Bytes) / float64(rows)
		}
		parts = append(parts, p)
		_ = os.Remove(out)
	}
	return parts, nil
}
