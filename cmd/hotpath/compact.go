package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	duckdb "github.com/duckdb/duckdb-go/v2"
	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/dbcopy"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

const compactExamples = `  # stop the collector first: compact rewrites the file and needs the only handle on it
  hotpath compact                       # the gateway's file
  hotpath compact --local               # the agent's file
  hotpath compact --db /var/lib/hotpath/gateway.duckdb
  hotpath compact --local --block-size 65536   # an agent file created before 64 KiB blocks were its default
`

// newCompactCommand rewrites a hotpath file into a fresh one holding the
// same rows. The exporter writes batch by batch and DuckDB checkpoints every
// 16 MB of write-ahead log, which leaves more used blocks than the data
// needs, and free ones it only reuses, never returns: about a quarter of the
// file in the storage bench (docs/performance-history.md, "Ninth pass").
func newCompactCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "compact [--db FILE] [--local] [--block-size BYTES]",
		Short:   "rewrite a stopped collector's file without the space batch-by-batch writing left",
		Example: compactExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	db := fs.String("db", os.Getenv("HOTPATH_DB"), "DuckDB file to compact (default: the gateway's file, or the agent's with --local; see hotpath profile --help)")
	local := fs.Bool("local", false, "the agent's file instead of the gateway's")
	blockSize := fs.Int("block-size", 0, "block size of the rewritten file in bytes, a power of two from 16384 to 262144 (default: the file's own); a file's block size is fixed when it is created")
	_ = cmd.MarkFlagFilename("db", "duckdb")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		path := *db
		if path == "" {
			path = profilequery.DefaultFile(*local, "")
		}
		if profilequery.IsEndpoint(path) {
			return fmt.Errorf("--db %s is an endpoint: compact rewrites the file, so it needs the file path, with no collector running", path)
		}
		if *blockSize != 0 && !dbcopy.ValidBlockSize(*blockSize) {
			return fmt.Errorf("--block-size %d: want a power of two from %d to %d bytes (65536 is the agent's default, 131072 the gateway's)", *blockSize, dbcopy.MinBlockSize, dbcopy.MaxBlockSize)
		}
		stop := startProgress(cmd.ErrOrStderr(), "compacting "+path, 0)
		res, err := compactFile(cmd.Context(), path, *blockSize)
		stop()
		if err != nil {
			return err
		}
		blocks := ""
		if res.blockBefore != res.blockAfter {
			blocks = fmt.Sprintf(", blocks of %d -> %d bytes", res.blockBefore, res.blockAfter)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s: %.1f MB -> %.1f MB (%d tables, %d rows, every table's row count checked%s)\n",
			path, float64(res.before)/1e6, float64(res.after)/1e6, res.tables, res.rows, blocks)
		return nil
	})
	return cmd
}

type compactResult struct {
	before, after           int64 // bytes, write-ahead log included
	blockBefore, blockAfter int   // block sizes, bytes
	tables                  int
	rows                    int64
}

// compactFile copies every table, view and macro of the file at path into
// path+".compact" in one go (dbcopy: COPY FROM DATABASE, each table's row
// count checked; in blocks of blockSize bytes, 0: the file's), and renames
// the copy over the file. The file is only
// replaced by the rename, after the copy is complete and synced: an
// interrupted run leaves the original as it was (and a stale copy, which the
// next run removes).
//
// The file is first opened for writing, to checkpoint its write-ahead log
// into it, then read-only for the copy. The read-only handle is held until
// after the rename: its shared lock keeps a collector from opening the old
// file and writing rows the rename would drop, and a read-only database
// never writes a log that could be replayed onto the copy.
func compactFile(ctx context.Context, path string, blockSize int) (*compactResult, error) {
	before, err := dbcopy.FileBytes(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	tmp := path + ".compact"
	// removeCopy removes a copy this run or an interrupted one left.
	removeCopy := func() error {
		for _, f := range []string{tmp, tmp + ".wal"} {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		return nil
	}
	if err := removeCopy(); err != nil {
		return nil, fmt.Errorf("remove the copy an earlier run left: %w", err)
	}
	// The copy holds the data without the slack: at most the file's size.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &fs); err == nil {
		if free := int64(fs.Bavail) * fs.Bsize; free < before {
			return nil, fmt.Errorf("not enough free space in %s: compact writes a copy of up to %.1f MB beside the file, %.1f MB are free", filepath.Dir(path), float64(before)/1e6, float64(free)/1e6)
		}
	}

	// A DuckDB of its own: the query endpoint's settings turn ATTACH off.
	connector, err := duckdb.NewConnector("", nil)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	defer func() { _ = db.Close(); _ = connector.Close() }()
	conn, err := db.Conn(ctx) // ATTACH is per connection
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	attach := func(mode string) error {
		if _, err := conn.ExecContext(ctx, "ATTACH "+sqlquery.Quote(path)+" AS hotpath_src"+mode); err != nil {
			if strings.Contains(err.Error(), "lock") {
				return fmt.Errorf("%w\n(a collector holds %s: stop it first; compact rewrites the file and needs the only handle on it)", err, path)
			}
			return fmt.Errorf("open %s: %w", path, err)
		}
		return nil
	}
	if err := attach(""); err != nil {
		return nil, err
	}
	var tier string
	if err := conn.QueryRowContext(ctx, "SELECT tier FROM hotpath_src.schema_version").Scan(&tier); err != nil {
		_, _ = conn.ExecContext(ctx, "DETACH hotpath_src")
		return nil, fmt.Errorf("read schema_version of %s (is it a hotpath file?): %w", path, err)
	}
	// Its write-ahead log into the file, so that the copy has every row.
	for _, stmt := range []string{"CHECKPOINT hotpath_src", "DETACH hotpath_src"} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("%s (%s): %w", stmt, path, err)
		}
	}
	if fi, err := os.Stat(path + ".wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("%s.wal still holds %d bytes after the checkpoint: %s left as it was", path, fi.Size(), path)
	}
	if err := attach(" (READ_ONLY)"); err != nil {
		return nil, err
	}
	defer func() { _, _ = conn.ExecContext(ctx, "DETACH hotpath_src") }()
	st, err := dbcopy.Copy(ctx, conn, "hotpath_src", tmp, blockSize)
	if err != nil {
		_ = removeCopy()
		return nil, fmt.Errorf("%w: %s left as it was", err, path)
	}
	if fi, err := os.Stat(tmp + ".wal"); err == nil && fi.Size() > 0 {
		_ = removeCopy()
		return nil, fmt.Errorf("the copy's log %s.wal holds %d bytes after its checkpoint: %s left as it was", tmp, fi.Size(), path)
	}
	if err := syncFile(tmp); err != nil {
		_ = removeCopy()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = removeCopy()
		return nil, fmt.Errorf("replace %s with its copy: %w", path, err)
	}
	if err := syncFile(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("compacted, but the rename may not be on disk yet: %w", err)
	}
	after, err := dbcopy.FileBytes(path)
	if err != nil {
		return nil, err
	}
	return &compactResult{before: before, after: after, blockBefore: st.SourceBlockSize, blockAfter: st.BlockSize, tables: st.Tables, rows: st.Rows}, nil
}

// syncFile flushes a file or a directory (a rename in it) to disk.
func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
