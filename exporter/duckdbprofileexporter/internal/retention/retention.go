// Package retention deletes what a hotpath file no longer keeps: rows past
// their age (trace-tagged rows sooner), binary metadata not seen for a
// while, stacks and series no row references and frames no stack references
// any more. Deletes run
// in bounded chunks, each its own short transaction, so a large cleanup never
// holds up ingestion for more than one chunk.
package retention

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
)

// Policy says how long each kind of row is kept. A zero duration keeps rows
// forever.
type Policy struct {
	Stacks       time.Duration // the samples (flame-graph rows)
	TraceStacks  time.Duration // trace-tagged rows (0 or longer: as Stacks)
	Hourly       time.Duration // summary tier: the hourly roll-up
	Daily        time.Duration // summary tier: the daily roll-up
	Binaries     time.Duration // binary metadata, by last_seen
	BatchIDs     time.Duration // ids of stored batches (dedup of resends), by stored_at
	ChunkRows    int           // rows per delete transaction
	ChunkTimeout time.Duration // upper bound of one chunk (0: none)
}

// Result counts what one Apply removed.
type Result struct {
	Stacks   int64 // rows
	StackIDs int64 // stack dictionary entries
	Series   int64 // series dictionary entries
	Frames   int64
	Binaries int64
	// Swept: the run looked for stacks, series and frames nothing
	// references any more (and removed StackIDs, Series and Frames).
	Swept bool
}

// Apply enforces p on w's file as of now. It looks for stacks and series
// no row references any more, and frames no stack names, only when it
// deleted rows: without a delete no row has let go of any, and the search
// reads every row the file holds, with the writer held (2.2 s for a
// gateway's 30 days just after the file is opened, on the 2-vCPU VM
// docs/performance-history.md measures; see unreferenced). It ran at every start
// and every daily run of a gateway younger than its retention.
func Apply(ctx context.Context, w *writer.Writer, p Policy, now time.Time) (Result, error) {
	return apply(ctx, w, p, now, false)
}

// apply is Apply, which also sweeps with nothing deleted when owed (an
// earlier run deleted rows and did not finish its sweep).
func apply(ctx context.Context, w *writer.Writer, p Policy, now time.Time, owed bool) (Result, error) {
	var res Result
	tb := schema.TablesFor(w.Tier())
	if p.ChunkRows <= 0 {
		p.ChunkRows = 50_000
	}
	type rule struct {
		table string
		age   time.Duration
	}
	traceAge := p.TraceStacks
	if traceAge <= 0 || (p.Stacks > 0 && traceAge > p.Stacks) {
		traceAge = p.Stacks
	}
	rules := []rule{{tb.Samples, p.Stacks}, {tb.Traces, traceAge}}
	// A finer tier's rows are kept until the next roll-up holds them (its
	// catch-up may still be running after an upgrade or a long stop):
	// deleting them first would lose them from the long ranges.
	kept := map[string]time.Time{}
	if tb.Hourly != "" {
		rules = append(rules, rule{tb.Hourly, p.Hourly}, rule{tb.Daily, p.Daily})
		kept[tb.Samples], kept[tb.Hourly] = w.RolledUp()
	}
	for _, r := range rules {
		if r.age <= 0 {
			continue
		}
		cutoff := now.Add(-r.age).UTC()
		if until, ok := kept[r.table]; ok && until.Before(cutoff) {
			cutoff = until // zero: nothing rolled up yet, nothing deleted
		}
		for {
			n, err := deleteChunk(ctx, w, r.table, tb.TimeCol, cutoff, p)
			if err != nil {
				return res, err
			}
			res.Stacks += n
			if n == 0 {
				break
			}
		}
	}
	if res.Stacks > 0 || owed {
		if err := sweep(ctx, w, tb, &res); err != nil {
			return res, err
		}
	}
	var err error
	if p.BatchIDs > 0 {
		err = w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(writer.Dicts), error) {
			if _, err := conn.ExecContext(ctx, "DELETE FROM "+schema.IngestedBatches+" WHERE stored_at < ?", now.Add(-p.BatchIDs).UTC()); err != nil {
				return nil, fmt.Errorf("delete old batch ids: %w", err)
			}
			return nil, nil
		})
		if err != nil {
			return res, err
		}
	}
	if p.Binaries > 0 {
		err = w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(writer.Dicts), error) {
			r, err := conn.ExecContext(ctx, "DELETE FROM "+tb.Binaries+" WHERE last_seen < ?", now.Add(-p.Binaries).UTC())
			if err != nil {
				return nil, fmt.Errorf("delete old binary metadata: %w", err)
			}
			res.Binaries, _ = r.RowsAffected()
			return nil, nil
		})
	}
	return res, err
}

// sweep deletes the stacks and series no row references any more, and then
// the frames no stack names (found by reading the stack dictionary: the
// writer keeps no reference counts, which cost every batch with new stacks
// an UPDATE), in one transaction, and counts them in res.
func sweep(ctx context.Context, w *writer.Writer, tb schema.Tables, res *Result) error {
	err := w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(writer.Dicts), error) {
		stacks, err := column[int32](ctx, conn, "DELETE FROM "+tb.StackDict+" AS d WHERE "+unreferenced(tb, "stack_id")+" RETURNING stack_id")
		if err != nil {
			return nil, fmt.Errorf("delete unreferenced stacks: %w", err)
		}
		names, err := column[string](ctx, conn, "DELETE FROM "+tb.Frames+" WHERE frame_id NOT IN (SELECT DISTINCT unnest(stack_frame_ids) FROM "+tb.StackDict+") RETURNING frame_name")
		if err != nil {
			return nil, fmt.Errorf("delete unreferenced frames: %w", err)
		}
		series, err := column[int32](ctx, conn, "DELETE FROM "+tb.Series+" AS d WHERE "+unreferenced(tb, "series_id")+" RETURNING series_id")
		if err != nil {
			return nil, fmt.Errorf("delete unreferenced series: %w", err)
		}
		res.StackIDs, res.Frames, res.Series = int64(len(stacks)), int64(len(names)), int64(len(series))
		return func(d writer.Dicts) {
			d.Stacks.Forget(stacks)
			d.Frames.Forget(names)
			d.Series.Forget(series)
		}, nil
	})
	if err != nil {
		return err
	}
	res.Swept = true
	return nil
}

// unreferenced is the condition that no row of tb's row tables has the
// value of column d.<column>: one NOT EXISTS per table, which DuckDB runs
// as anti-joins. NOT IN a UNION of the tables' columns first deduplicated
// every row's value: on the storage bench's 30-day gateway file (92 M
// minute rows) the whole search took 3.0 s the first time after the file
// was opened and 1.4-1.5 s after that, against 2.2-2.3 s and 1.25-1.35 s
// now (three runs each, in turn).
func unreferenced(tb schema.Tables, column string) string {
	var conds []string
	for _, t := range tb.RowTables() {
		conds = append(conds, "NOT EXISTS (SELECT 1 FROM "+t+" AS r WHERE r."+column+" = d."+column+")")
	}
	return strings.Join(conds, " AND ")
}

// column runs q and reads its one column.
func column[T any](ctx context.Context, conn *sql.Conn, q string) ([]T, error) {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// deleteChunk removes up to about p.ChunkRows of the oldest rows of table
// before cutoff. The chunk is a time range [oldest, boundary]: rows sharing
// the boundary timestamp go together, so a chunk may be slightly larger
// than asked.
func deleteChunk(ctx context.Context, w *writer.Writer, table, timeCol string, cutoff time.Time, p Policy) (int64, error) {
	var deleted int64
	if p.ChunkTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.ChunkTimeout)
		defer cancel()
	}
	err := w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(writer.Dicts), error) {
		var boundary sql.NullTime
		err := conn.QueryRowContext(ctx, "SELECT max("+timeCol+") FROM (SELECT "+timeCol+" FROM "+table+" WHERE "+timeCol+" < $1"+
			" ORDER BY "+timeCol+" LIMIT $2)", cutoff, p.ChunkRows).Scan(&boundary)
		if err != nil {
			return nil, fmt.Errorf("find expired rows in %s: %w", table, err)
		}
		if !boundary.Valid {
			return nil, nil
		}
		r, err := conn.ExecContext(ctx, "DELETE FROM "+table+" WHERE "+timeCol+" < $1 AND "+timeCol+" <= $2", cutoff, boundary.Time)
		if err != nil {
			return nil, fmt.Errorf("delete expired rows from %s: %w", table, err)
		}
		deleted, _ = r.RowsAffected()
		return nil, nil
	})
	return deleted, err
}

// Runner applies a policy now and then every interval until stopped.
type Runner struct {
	stop chan struct{}
	done chan struct{}
}

// Start runs Apply immediately (a collector restarted after a long pause
// should not wait an interval to clean up) and then every interval. onResult
// reports each run's outcome. A run that deleted rows and failed before
// its sweep was done has the next run sweep, whatever that one deletes.
func Start(w *writer.Writer, p Policy, interval time.Duration, now func() time.Time, onResult func(Result, error)) *Runner {
	r := &Runner{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-r.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		t := time.NewTicker(interval)
		defer t.Stop()
		owed := false // a run deleted rows and did not finish its sweep
		for {
			res, err := apply(ctx, w, p, now(), owed)
			if ctx.Err() != nil {
				return
			}
			owed = (owed || res.Stacks > 0) && !res.Swept
			onResult(res, err)
			select {
			case <-t.C:
			case <-r.stop:
				return
			}
		}
	}()
	return r
}

// Stop ends the runner, interrupting a cleanup in progress, and waits for it.
func (r *Runner) Stop() {
	close(r.stop)
	<-r.done
}
