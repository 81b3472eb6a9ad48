// Package writer owns a hotpath DuckDB file while the exporter runs: it opens
// it (one connector; a pool for DDL and readers; one dedicated connection for
// the Appender), keeps the frame dictionary in step with it, and writes each
// batch of stacks in one transaction.
package writer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/sqlquery"
)

// StackRow is one stack with its count, frames named and root first.
type StackRow struct {
	Time      time.Time // sample time (local) or bucket start (summary)
	ServiceID string
	PodName   string // summary tier only
	BuildID   string // "" when unknown
	Frames    []string
	Count     int64
	TraceID   string // 32 hex chars, "" = no trace (stored as NULL)
	SpanID    string // 16 hex chars, "" = no span (stored as NULL)
	// PeriodNanos is the CPU time one sample stands for (1e9 / sampling
	// frequency); 0 = unknown (stored as NULL).
	PeriodNanos int64
}

// Binary is one row of binary metadata seen in a batch.
type Binary struct {
	BuildID      string
	ServiceID    string
	Path         string
	HasDebugInfo bool
	Seen         time.Time
}

// Batch is what one export call writes, atomically.
type Batch struct {
	Rows     []StackRow
	Binaries []Binary
}

// openPaths guards against two exporters of one process opening the same
// file: DuckDB's lock is per process, so it would not stop them, and the
// driver's instance cache would make the second open wait forever.
var (
	openMu    sync.Mutex
	openPaths = map[string]bool{}
)

// Writer writes batches to one file. Methods are safe for concurrent use;
// writes and retention steps are serialised.
type Writer struct {
	path string
	tier schema.Tier
	tb   schema.Tables
	res  Resources

	mu        sync.Mutex // serialises everything that writes
	connector *duckdb.Connector
	db        *sql.DB
	readers   atomic.Pointer[sql.DB] // db, for readers that must not wait for a batch
	conn      *sql.Conn              // dedicated to writing (the Appender is not goroutine-safe)
	dict      *framedict.FrameDict
	broken    error // set when DuckDB invalidated the instance; reopen on next write
}

// ErrInUse means another exporter of this process already has the file open.
var ErrInUse = errors.New("file is already open in this process")

// Open opens (creating if needed) the file at path for tier t and loads its
// frame dictionary.
// Resources bounds what DuckDB may use in this process: an agent must stay
// small, while DuckDB's defaults take 80% of RAM and every core.
type Resources struct {
	MemoryLimit string // DuckDB size, e.g. "64MB"; "" keeps DuckDB's default
	Threads     int    // 0 keeps DuckDB's default
}

// Option configures Open.
type Option func(*Writer)

// WithResources applies r to the database when it is opened.
func WithResources(r Resources) Option { return func(w *Writer) { w.res = r } }

func Open(ctx context.Context, path string, t schema.Tier, opts ...Option) (*Writer, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("resolve path %q: %w", path, err)
	}
	openMu.Lock()
	if openPaths[abs] {
		openMu.Unlock()
		return nil, fmt.Errorf("open %s: %w (two duckdbprofile exporters with the same path?)", abs, ErrInUse)
	}
	openPaths[abs] = true
	openMu.Unlock()

	w := &Writer{path: abs, tier: t, tb: schema.TablesFor(t)}
	for _, o := range opts {
		o(w)
	}
	if err := w.open(ctx); err != nil {
		openMu.Lock()
		delete(openPaths, abs)
		openMu.Unlock()
		return nil, err
	}
	return w, nil
}

// WrapOpenError turns DuckDB's lock error into a sentence that says what to do.
func WrapOpenError(path string, err error) error {
	if strings.Contains(err.Error(), "Could not set lock") || strings.Contains(err.Error(), "Conflicting lock") {
		return fmt.Errorf("open %s: another process holds the file; DuckDB allows one process per file (is a second collector using this path?): %w", path, err)
	}
	return fmt.Errorf("open %s: %w", path, err)
}

func (w *Writer) open(ctx context.Context) error {
	c, err := duckdb.NewConnector(sqlquery.DSN(w.path, false), nil)
	if err != nil {
		return WrapOpenError(w.path, err)
	}
	db := sql.OpenDB(c)
	cleanup := func() { db.Close(); c.Close() }
	if err := w.res.apply(ctx, db); err != nil {
		cleanup()
		return fmt.Errorf("configure %s: %w", w.path, err)
	}
	if err := schema.Ensure(ctx, db, w.tier); err != nil {
		cleanup()
		return fmt.Errorf("prepare schema in %s: %w", w.path, err)
	}
	dict, err := framedict.Load(ctx, db, w.tb.Frames)
	if err != nil {
		cleanup()
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		cleanup()
		return fmt.Errorf("open writer connection: %w", err)
	}
	w.connector, w.db, w.conn, w.dict, w.broken = c, db, conn, dict, nil
	w.readers.Store(db)
	return nil
}

func (w *Writer) closeLocked() error {
	var errs []error
	if w.conn != nil {
		errs = append(errs, w.conn.Close())
	}
	if w.db != nil {
		errs = append(errs, w.db.Close())
	}
	if w.connector != nil {
		errs = append(errs, w.connector.Close())
	}
	w.conn, w.db, w.connector = nil, nil, nil
	return errors.Join(errs...)
}

// Close closes the file.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	err := w.closeLocked()
	openMu.Lock()
	delete(openPaths, w.path)
	openMu.Unlock()
	return err
}

// DB is the pool for readers (the query endpoint). It changes after the
// writer recovers from an invalidated instance, so callers fetch it per use.
func (w *Writer) DB() *sql.DB {
	return w.readers.Load()
}

// Tier is the file's tier.
func (w *Writer) Tier() schema.Tier { return w.tier }

// FrameCount is the number of frames in the in-memory dictionary.
func (w *Writer) FrameCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dict.Len()
}

// ready reopens the file when an earlier fatal error invalidated the DuckDB
// instance (e.g. disk full during a checkpoint), so the exporter recovers
// once the cause is gone instead of failing forever.
func (w *Writer) ready(ctx context.Context) error {
	if w.conn != nil && w.broken == nil {
		return nil
	}
	_ = w.closeLocked()
	if err := w.open(ctx); err != nil {
		return fmt.Errorf("reopen after earlier failure: %w", err)
	}
	return nil
}

// noteFailure records whether err left the instance unusable and reloads the
// frame dictionary, which may now be ahead of the file.
func (w *Writer) noteFailure(ctx context.Context, err error) {
	msg := err.Error()
	if strings.Contains(msg, "invalidated") || strings.Contains(msg, "FATAL") || errors.Is(err, driver.ErrBadConn) {
		w.broken = err
		return
	}
	if d, lerr := framedict.Load(ctx, w.db, w.tb.Frames); lerr == nil {
		w.dict = d
	} else {
		w.broken = lerr
	}
}

// Write stores b in one transaction: new frames, frame reference counts,
// stack rows, binary metadata and (summary tier) the bucket percentages.
// On error nothing of b is stored.
func (w *Writer) Write(ctx context.Context, b *Batch) error {
	if len(b.Rows) == 0 && len(b.Binaries) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(ctx); err != nil {
		return err
	}
	err := w.conn.Raw(func(dc any) error { return w.writeTx(ctx, dc.(driver.Conn), b, false) })
	if err != nil {
		w.noteFailure(ctx, err)
		return fmt.Errorf("write batch of %d stacks to %s: %w", len(b.Rows), w.path, err)
	}
	return nil
}

type rawConn interface {
	driver.Conn
	driver.ExecerContext
	driver.QueryerContext
}

func (w *Writer) writeTx(ctx context.Context, dc driver.Conn, b *Batch, rowByRow bool) (err error) {
	c, ok := dc.(rawConn)
	if !ok {
		return fmt.Errorf("driver connection %T cannot exec", dc)
	}
	if _, err := c.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
		}
	}()

	// Encode stacks and count frame references. New frames get their whole
	// count on insert; known frames get one bulk UPDATE.
	ids := make([][]int32, len(b.Rows))
	delta := make(map[int32]int64)
	var newFrames []int32
	var newNames []string
	flat := make([]int32, 0, len(b.Rows)*16)
	for i := range b.Rows {
		start := len(flat)
		for _, name := range b.Rows[i].Frames {
			id, isNew := w.dict.ID(name)
			if isNew {
				newFrames = append(newFrames, id)
				newNames = append(newNames, name)
			}
			delta[id]++
			flat = append(flat, id)
		}
		ids[i] = flat[start:len(flat):len(flat)]
	}
	isNew := make(map[int32]bool, len(newFrames))
	for _, id := range newFrames {
		isNew[id] = true
	}

	if len(newFrames) > 0 {
		a, err := duckdb.NewAppenderFromConn(dc, "", w.tb.Frames)
		if err != nil {
			return fmt.Errorf("frame appender: %w", err)
		}
		for i, id := range newFrames {
			if err := a.AppendRow(id, newNames[i], delta[id]); err != nil {
				a.Close()
				return fmt.Errorf("append frame %q: %w", newNames[i], err)
			}
		}
		if err := a.Close(); err != nil {
			return fmt.Errorf("flush frames: %w", err)
		}
	}
	if err := w.addFrameCounts(ctx, c, delta, isNew); err != nil {
		return err
	}

	needPct := false
	var pct []float64
	if w.tier == schema.Summary && len(b.Rows) > 0 {
		pct, needPct, err = w.percentages(ctx, c, b.Rows)
		if err != nil {
			return err
		}
	}
	if rowByRow {
		err = w.insertRows(ctx, c, b.Rows, ids, pct)
	} else {
		err = w.appendRows(dc, b.Rows, ids, pct)
	}
	if err != nil {
		return err
	}
	if needPct {
		if err := w.fixPercentages(ctx, c, b.Rows); err != nil {
			return err
		}
	}
	if err := w.upsertBinaries(ctx, c, b.Binaries); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT", nil); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	w.dict.Commit()
	return nil
}

func nullable(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}

func nullablePeriod(ns int64) driver.Value {
	if ns <= 0 {
		return nil
	}
	return ns
}

func clampCount(n int64) int32 {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(n)
}

func (w *Writer) appendRows(dc driver.Conn, rows []StackRow, ids [][]int32, pct []float64) error {
	if len(rows) == 0 {
		return nil
	}
	a, err := duckdb.NewAppenderFromConn(dc, "", w.tb.Stacks)
	if err != nil {
		return fmt.Errorf("stack appender: %w", err)
	}
	for i := range rows {
		r := &rows[i]
		if w.tier == schema.Summary {
			err = a.AppendRow(r.Time.UTC(), r.ServiceID, r.PodName, r.BuildID, ids[i], clampCount(r.Count), pct[i], nullable(r.TraceID), nullable(r.SpanID), nullablePeriod(r.PeriodNanos))
		} else {
			err = a.AppendRow(r.Time.UTC(), r.ServiceID, r.BuildID, ids[i], clampCount(r.Count), nullable(r.TraceID), nullable(r.SpanID), nullablePeriod(r.PeriodNanos))
		}
		if err != nil {
			a.Close()
			return fmt.Errorf("append stack row: %w", err)
		}
	}
	if err := a.Close(); err != nil {
		return fmt.Errorf("flush stack rows: %w", err)
	}
	return nil
}

// insertRows is the row-at-a-time path, kept only so the benchmark can show
// what the Appender buys.
func (w *Writer) insertRows(ctx context.Context, c rawConn, rows []StackRow, ids [][]int32, pct []float64) error {
	for i := range rows {
		r := &rows[i]
		list := intList(ids[i])
		var err error
		if w.tier == schema.Summary {
			_, err = c.ExecContext(ctx, "INSERT INTO "+w.tb.Stacks+" VALUES (?, ?, ?, ?, "+list+", ?, ?, ?, ?, ?)", named(r.Time.UTC(), r.ServiceID, r.PodName, r.BuildID, int64(clampCount(r.Count)), pct[i], nullable(r.TraceID), nullable(r.SpanID), nullablePeriod(r.PeriodNanos)))
		} else {
			_, err = c.ExecContext(ctx, "INSERT INTO "+w.tb.Stacks+" VALUES (?, ?, ?, "+list+", ?, ?, ?, ?)", named(r.Time.UTC(), r.ServiceID, r.BuildID, int64(clampCount(r.Count)), nullable(r.TraceID), nullable(r.SpanID), nullablePeriod(r.PeriodNanos)))
		}
		if err != nil {
			return fmt.Errorf("insert stack row: %w", err)
		}
	}
	return nil
}

func named(vs ...driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(vs))
	for i, v := range vs {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

func intList(ids []int32) string {
	var sb strings.Builder
	sb.WriteString("[")
	for i, id := range ids {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString(strconv.FormatInt(int64(id), 10))
	}
	sb.WriteString("]::INTEGER[]")
	return sb.String()
}

// addFrameCounts raises frame_count of already-known frames in one UPDATE.
// The values are integers we produced, so building the VALUES list is safe.
func (w *Writer) addFrameCounts(ctx context.Context, c rawConn, delta map[int32]int64, isNew map[int32]bool) error {
	var sb strings.Builder
	n := 0
	for id, d := range delta {
		if isNew[id] {
			continue
		}
		if n > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, "(%d,%d)", id, d)
		n++
	}
	if n == 0 {
		return nil
	}
	q := "UPDATE " + w.tb.Frames + " AS f SET frame_count = f.frame_count + d.n FROM (VALUES " + sb.String() +
		") AS d(id, n) WHERE f.frame_id = d.id"
	if _, err := c.ExecContext(ctx, q, nil); err != nil {
		return fmt.Errorf("update frame counts: %w", err)
	}
	return nil
}

type bucketKey struct {
	service string
	bucket  time.Time
}

// percentages computes each row's share of its service's samples in its
// bucket from the batch alone, and reports whether the file already holds
// rows of those buckets (then the shares are recomputed in SQL after append).
func (w *Writer) percentages(ctx context.Context, c rawConn, rows []StackRow) ([]float64, bool, error) {
	totals := make(map[bucketKey]int64)
	lo, hi := rows[0].Time, rows[0].Time
	for i := range rows {
		totals[bucketKey{rows[i].ServiceID, rows[i].Time}] += rows[i].Count
		if rows[i].Time.Before(lo) {
			lo = rows[i].Time
		}
		if rows[i].Time.After(hi) {
			hi = rows[i].Time
		}
	}
	pct := make([]float64, len(rows))
	for i := range rows {
		if t := totals[bucketKey{rows[i].ServiceID, rows[i].Time}]; t > 0 {
			pct[i] = 100 * float64(rows[i].Count) / float64(t)
		}
	}
	r, err := c.QueryContext(ctx, "SELECT count(*) FROM "+w.tb.Stacks+" WHERE bucket_time BETWEEN ? AND ?", named(lo.UTC(), hi.UTC()))
	if err != nil {
		return nil, false, fmt.Errorf("check existing buckets: %w", err)
	}
	defer r.Close()
	vals := make([]driver.Value, 1)
	if err := r.Next(vals); err != nil {
		return nil, false, fmt.Errorf("check existing buckets: %w", err)
	}
	existing, _ := vals[0].(int64)
	return pct, existing > 0, nil
}

// fixPercentages recomputes the shares of every bucket the batch touched
// when earlier batches had already written to it.
func (w *Writer) fixPercentages(ctx context.Context, c rawConn, rows []StackRow) error {
	lo, hi := rows[0].Time, rows[0].Time
	for i := range rows {
		if rows[i].Time.Before(lo) {
			lo = rows[i].Time
		}
		if rows[i].Time.After(hi) {
			hi = rows[i].Time
		}
	}
	q := `UPDATE ` + w.tb.Stacks + ` AS s SET sample_percentage = 100.0 * s.sample_count / t.total
FROM (SELECT service_id, bucket_time, sum(sample_count) AS total FROM ` + w.tb.Stacks + `
      WHERE bucket_time BETWEEN $1 AND $2 GROUP BY ALL) AS t
WHERE s.bucket_time BETWEEN $1 AND $2 AND s.service_id = t.service_id AND s.bucket_time = t.bucket_time AND t.total > 0`
	if _, err := c.ExecContext(ctx, q, named(lo.UTC(), hi.UTC())); err != nil {
		return fmt.Errorf("update sample percentages: %w", err)
	}
	return nil
}

// upsertBinaries writes all binaries of the batch in one statement.
func (w *Writer) upsertBinaries(ctx context.Context, c rawConn, bins []Binary) error {
	// One row per build ID (an UPSERT may not touch a row twice), latest wins.
	byID := make(map[string]Binary, len(bins))
	var order []string
	for _, b := range bins {
		if b.BuildID == "" {
			continue
		}
		prev, seen := byID[b.BuildID]
		if !seen {
			order = append(order, b.BuildID)
		}
		if !seen || b.Seen.After(prev.Seen) {
			byID[b.BuildID] = b
		}
	}
	if len(order) == 0 {
		return nil
	}
	var sb strings.Builder
	args := make([]driver.Value, 0, len(order)*6)
	for i, id := range order {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?)")
		b := byID[id]
		args = append(args, b.BuildID, b.ServiceID, b.Path, b.Seen.UTC(), b.Seen.UTC(), b.HasDebugInfo)
	}
	q := "INSERT INTO " + w.tb.Binaries + " (build_id, service_id, binary_path, first_seen, last_seen, has_debug_info) VALUES " + sb.String() + `
ON CONFLICT (build_id) DO UPDATE SET
    service_id = excluded.service_id,
    binary_path = CASE WHEN excluded.binary_path <> '' THEN excluded.binary_path ELSE binary_path END,
    first_seen = least(first_seen, excluded.first_seen),
    last_seen = greatest(last_seen, excluded.last_seen),
    has_debug_info = excluded.has_debug_info`
	if _, err := c.ExecContext(ctx, q, named(args...)); err != nil {
		return fmt.Errorf("upsert binary metadata: %w", err)
	}
	return nil
}

// InTx runs fn in one transaction on the writer connection, with writes
// paused. After a successful commit, fn's afterCommit (if any) runs with the
// frame dictionary, still under the lock, so retention can drop the frames it
// deleted before any batch could reuse them.
func (w *Writer) InTx(ctx context.Context, fn func(ctx context.Context, conn *sql.Conn) (afterCommit func(*framedict.FrameDict), err error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(ctx); err != nil {
		return err
	}
	if _, err := w.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		w.noteFailure(ctx, err)
		return fmt.Errorf("begin: %w", err)
	}
	after, err := fn(ctx, w.conn)
	if err == nil {
		_, err = w.conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = w.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		w.noteFailure(ctx, err)
		return err
	}
	if after != nil {
		after(w.dict)
	}
	return nil
}

func (r Resources) apply(ctx context.Context, db *sql.DB) error {
	if r.MemoryLimit != "" {
		// SET takes no parameters; the value is validated by the config.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("SET memory_limit = '%s'", r.MemoryLimit)); err != nil {
			return fmt.Errorf("memory_limit %q: %w", r.MemoryLimit, err)
		}
	}
	if r.Threads > 0 {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("SET threads = %d", r.Threads)); err != nil {
			return fmt.Errorf("threads %d: %w", r.Threads, err)
		}
	}
	return nil
}
