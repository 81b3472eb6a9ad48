// Package retention deletes what a hotpath file no longer keeps: stack rows
// past their age (trace-tagged summary rows sooner), binary metadata not seen
// for a while, and frames no stored stack references any more. Deletes run
// in bounded chunks, each its own short transaction, so a large cleanup never
// holds up ingestion for more than one chunk.
package retention

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
)

// Policy says how long each kind of row is kept. A zero duration keeps rows
// forever.
type Policy struct {
	Stacks       time.Duration // all stack rows
	TraceStacks  time.Duration // stack rows with a trace_id (0: as Stacks)
	Binaries     time.Duration // binary metadata, by last_seen
	BatchIDs     time.Duration // ids of stored batches (dedup of resends), by stored_at
	ChunkRows    int           // rows per delete transaction
	ChunkTimeout time.Duration // upper bound of one chunk (0: none)
}

// Result counts what one Apply removed.
type Result struct {
	Stacks   int64
	Frames   int64
	Binaries int64
}

// Apply enforces p on w's file as of now.
func Apply(ctx context.Context, w *writer.Writer, p Policy, now time.Time) (Result, error) {
	var res Result
	tb := schema.TablesFor(w.Tier())
	if p.ChunkRows <= 0 {
		p.ChunkRows = 50_000
	}
	type rule struct {
		age   time.Duration
		extra string
	}
	rules := []rule{{age: p.Stacks}}
	if p.TraceStacks > 0 && (p.Stacks == 0 || p.TraceStacks < p.Stacks) {
		rules = append(rules, rule{age: p.TraceStacks, extra: " AND trace_id IS NOT NULL"})
	}
	for _, r := range rules {
		if r.age <= 0 {
			continue
		}
		cutoff := now.Add(-r.age).UTC()
		for {
			n, err := deleteChunk(ctx, w, tb, cutoff, r.extra, p)
			if err != nil {
				return res, err
			}
			res.Stacks += n
			if n == 0 {
				break
			}
		}
	}
	// Frames whose references all expired.
	err := w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(*framedict.FrameDict), error) {
		rows, err := conn.QueryContext(ctx, "DELETE FROM "+tb.Frames+" WHERE frame_count <= 0 RETURNING frame_name")
		if err != nil {
			return nil, fmt.Errorf("delete unreferenced frames: %w", err)
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return nil, fmt.Errorf("delete unreferenced frames: %w", err)
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("delete unreferenced frames: %w", err)
		}
		res.Frames = int64(len(names))
		return func(d *framedict.FrameDict) { d.Forget(names) }, nil
	})
	if err != nil {
		return res, err
	}
	if p.BatchIDs > 0 {
		err = w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(*framedict.FrameDict), error) {
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
		err = w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(*framedict.FrameDict), error) {
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

// deleteChunk removes up to about p.ChunkRows of the oldest expired rows and
// takes their frame references off the dictionary in the same transaction.
// The chunk is a time range [oldest, boundary]: rows sharing the boundary
// timestamp go together, so a chunk may be slightly larger than asked.
func deleteChunk(ctx context.Context, w *writer.Writer, tb schema.Tables, cutoff time.Time, extra string, p Policy) (int64, error) {
	var deleted int64
	if p.ChunkTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.ChunkTimeout)
		defer cancel()
	}
	err := w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(*framedict.FrameDict), error) {
		where := tb.TimeCol + " < $1" + extra
		var boundary sql.NullTime
		err := conn.QueryRowContext(ctx, "SELECT max("+tb.TimeCol+") FROM (SELECT "+tb.TimeCol+" FROM "+tb.Stacks+" WHERE "+where+
			" ORDER BY "+tb.TimeCol+" LIMIT $2)", cutoff, p.ChunkRows).Scan(&boundary)
		if err != nil {
			return nil, fmt.Errorf("find expired rows in %s: %w", tb.Stacks, err)
		}
		if !boundary.Valid {
			return nil, nil
		}
		chunk := where + " AND " + tb.TimeCol + " <= $2"
		_, err = conn.ExecContext(ctx, "UPDATE "+tb.Frames+" AS f SET frame_count = f.frame_count - d.n FROM ("+
			"SELECT id, count(*) AS n FROM (SELECT unnest(stack_frame_ids) AS id FROM "+tb.Stacks+" WHERE "+chunk+") GROUP BY id"+
			") AS d WHERE f.frame_id = d.id", cutoff, boundary.Time)
		if err != nil {
			return nil, fmt.Errorf("release frame references: %w", err)
		}
		r, err := conn.ExecContext(ctx, "DELETE FROM "+tb.Stacks+" WHERE "+chunk, cutoff, boundary.Time)
		if err != nil {
			return nil, fmt.Errorf("delete expired rows from %s: %w", tb.Stacks, err)
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
// reports each run's outcome.
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
		for {
			res, err := Apply(ctx, w, p, now())
			if ctx.Err() != nil {
				return
			}
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
