// Package writer owns a hotpath DuckDB file while the exporter runs: it opens
// it (one connector; a pool for DDL and readers; one dedicated connection for
// the Appender), keeps the frame dictionary in step with it, and writes each
// batch of stacks in one transaction.
package writer

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	// DuckDB keeps the memory it frees between the exporter's pushes.
	_ "github.com/hotpath-dev/hotpath/internal/duckdballoc"
)

// StackRow is one stack with its count, frames named and root first.
type StackRow struct {
	Time      time.Time // sample time (local) or bucket start (summary)
	ServiceID string
	PodName   string // summary tier only
	BuildID   string // "" when unknown
	// ContainerID and PodUID say where the process ran (container.id,
	// k8s.pod.uid); "" = not in a container / pod.
	ContainerID, PodUID string
	Frames              []string
	Count               int64
	TraceID             string // 32 hex chars, "" = no trace (stored as NULL)
	SpanID              string // 16 hex chars, "" = no span (stored as NULL)
	// PeriodNanos is the CPU time one sample stands for (1e9 / sampling
	// frequency); 0 = unknown (stored as NULL).
	PeriodNanos int64
	// Key is framedict.KeyOf(Frames), when the caller has it (computed
	// once per stack rather than per row); zero: the writer computes it.
	Key framedict.StackKey
	// Meta, when not nil, says what each of Frames is (same index). A
	// frame's row is written once, with the metadata of its first stack:
	// frames stay keyed by name, so flame graphs merge as before.
	Meta []FrameMeta
	// Stack is the row's stack in the batch's Resolve, for a row sent
	// with Key and without Frames.
	Stack int32
}

// FrameMeta is what a frame is and where its code lives, as the sender
// said; zero values are stored as NULL (unknown).
type FrameMeta struct {
	Type string // profileschema.FrameType* ("python", "jit", ...)
	File string // source file of the function
	Line int64  // line of the frame, else the function's first line
}

// nullable stores zero values as NULL.
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
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
	// ID is the request's hotpath.batch.id ("" when it has none). A batch
	// whose ID is already in ingested_batches is not written again: that
	// is how a window sent twice (a retry, or a replay after a crash) is
	// stored once.
	ID       string
	Rows     []StackRow
	Binaries []Binary
	// Resolve names the frames of stack (a row's Stack), root first, for
	// rows sent with Key and without Frames: the writer asks only for the
	// stacks new to the file, so a sender skips naming the frames of the
	// stacks stored before (most of them, once a file has run a while).
	Resolve func(stack int32) ([]string, []FrameMeta)
}

// empty: b (which may be nil) writes nothing.
func (b *Batch) empty() bool { return b == nil || len(b.Rows) == 0 && len(b.Binaries) == 0 }

// FramesOf is r's frames and their metadata, named by Resolve if r does
// not carry them.
func (b *Batch) FramesOf(r *StackRow) ([]string, []FrameMeta) {
	if r.Frames == nil && b.Resolve != nil {
		return b.Resolve(r.Stack)
	}
	return r.Frames, r.Meta
}

// ErrDuplicate is returned (wrapped) by Write for a batch whose ID was stored
// before; nothing was written.
var ErrDuplicate = errors.New("batch already stored")

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
	now  func() time.Time // dates a stored batch's id

	mu        sync.Mutex // serialises everything that writes
	connector *duckdb.Connector
	db        *sql.DB
	readers   atomic.Pointer[sql.DB] // db, for readers that must not wait for a batch
	conn      *sql.Conn              // dedicated to writing (the Appender is not goroutine-safe)
	dicts     Dicts
	rolled    rollState // summary tier: how far the roll-ups are complete
	// descending is the stack_id order of the next batch's rows (see
	// rowOrder); it alternates per batch.
	descending bool
	// sortKeys is the last batch's rowKeys, kept for the next batch's.
	sortKeys []uint64
	// binaries is the binary metadata the file holds, as written by this
	// writer since it opened: a binary seen again within binarySeenStep
	// with nothing else changed is not written again. nil after a failure
	// or a retention step (every binary is written once more).
	binaries map[string]storedBinary
	// catchingUp: the roll-ups' backlog at open (more than a day) is being
	// closed by catchUpInBackground; catchUpErr is its last failure.
	// catchUpStop belongs to the open file and is closed with it (Close,
	// or a reopen after a failure): the catch-up of that file ends.
	catchingUp  bool
	catchUpErr  error
	catchUpStop chan struct{}
	catchUpWG   sync.WaitGroup
	// catchUpReport, when set, hears how the background catch-up went.
	catchUpReport func(took time.Duration, err error)
	// loading is the dictionaries' load begun by open, until a caller
	// that needs them has waited for it (awaitDicts); nil once dicts holds
	// them.
	loading *dictLoad
	broken  error // set when DuckDB invalidated the instance; reopen on next write
	// connStuck is set when the writer connection no longer runs statements
	// after a failure (a ROLLBACK that failed leaves its transaction
	// aborted); the next write replaces the connection.
	connStuck error
	// discard is the error of a COMMIT that failed for lack of memory
	// (sqlquery.IsOutOfMemory). DuckDB 1.5 can leave rows of such a
	// transaction in its in-memory tables, unseen, and the next COMMIT to
	// the table shows them: a batch whose COMMIT ran out of memory while a
	// query took it, sent again, was stored twice (in about one such COMMIT
	// of three; TestFailedCommitsStoreEachBatchOnce). The file and its log
	// hold none of it (DuckDB truncates the log back), so nothing more is
	// committed to that instance: it is closed without a checkpoint and the
	// file opened again before the next write (reopen). A COMMIT that fails
	// to write its log (a full or read-only disk) fails after the rows were
	// handed to the undo log, and DuckDB takes them back: the file stays
	// open, so its queries go on (TestFullAndReadOnlyDiskReturnErrorsThenRecover
	// and the e2e TestGatewayDiskFullRecovers count every batch once).
	discard error
}

// Dicts are the in-memory copies of a file's frame, stack and series
// dictionaries.
type Dicts struct {
	Frames *framedict.FrameDict
	Stacks *framedict.StackDict
	Series *framedict.SeriesDict
}

// dictLoad is one load of a file's dictionaries on a goroutine of its own.
type dictLoad struct {
	done chan struct{} // closed when d and err are set
	d    Dicts
	err  error
}

// loadDictsAsync begins loading the dictionaries of db. The load reads
// every stack the file holds (0.3 s for the storage bench's 3-hour agent
// file, seconds for a gateway's millions): the collector need not wait for
// it to start its receivers, only the first write does.
func loadDictsAsync(db *sql.DB, t schema.Tier) *dictLoad {
	l := &dictLoad{done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.d, l.err = loadDictsFunc(context.Background(), db, t)
	}()
	return l
}

// loadDictsFunc is loadDicts; tests replace it to hold a load back or
// make it fail.
var loadDictsFunc = loadDicts

// awaitDicts waits for the load open began, if it is still pending, and
// installs its dictionaries. A load that failed marks the file broken:
// the error is returned now and the next write reopens the file.
func (w *Writer) awaitDicts() error {
	l := w.loading
	if l == nil {
		return nil
	}
	<-l.done
	w.loading = nil
	if l.err != nil {
		w.broken = fmt.Errorf("load the dictionaries of %s: %w", w.path, l.err)
		return w.broken
	}
	w.dicts = l.d
	return nil
}

// stopLoading waits for a pending load to end and drops it (the file is
// being closed or its dictionaries reloaded). The load is not interrupted:
// an interrupted query could leave the database instance referenced past
// its close, and the next open of the file then waited for it forever
// (a loop of 300 opens and closes hung in NewConnector).
func (w *Writer) stopLoading() {
	if l := w.loading; l != nil {
		<-l.done
		w.loading = nil
	}
}

func loadDicts(ctx context.Context, db *sql.DB, t schema.Tier) (Dicts, error) {
	tb := schema.TablesFor(t)
	frames, err := framedict.Load(ctx, db, tb.Frames)
	if err != nil {
		return Dicts{}, err
	}
	stacks, err := framedict.LoadStacks(ctx, db, tb.StackDict, frames)
	if err != nil {
		return Dicts{}, err
	}
	series, err := framedict.LoadSeries(ctx, db, tb.Series, t == schema.Summary)
	if err != nil {
		return Dicts{}, err
	}
	return Dicts{frames, stacks, series}, nil
}

// ErrInUse means another exporter of this process already has the file open.
var ErrInUse = errors.New("file is already open in this process")

// Resources bounds what DuckDB may use in this process: an agent must stay
// small, while DuckDB's defaults take 80% of RAM and every core.
type Resources struct {
	MemoryLimit   string // DuckDB size, e.g. "64MB"; "" keeps DuckDB's default
	Threads       int    // 0 keeps DuckDB's default
	TempDirectory string // where DuckDB spills; "" keeps DuckDB's default (<path>.tmp)
	// BlockSize is the block size of the file if Open creates it (0:
	// DuckDB's default); an existing file keeps its own.
	BlockSize int
	// CheckpointThreshold is the write-ahead log's size that makes DuckDB
	// write its changes into the file (a DuckDB size; "" keeps DuckDB's
	// default, 16 MiB).
	CheckpointThreshold string
}

// Option configures Open.
type Option func(*Writer)

// WithResources applies r to the database when it is opened.
func WithResources(r Resources) Option { return func(w *Writer) { w.res = r } }

// WithClock dates what the writer records (a stored batch's id) by now
// instead of time.Now.
func WithClock(now func() time.Time) Option { return func(w *Writer) { w.now = now } }

// WithCatchUpReport has report called from the background roll-up
// catch-up (see CatchingUp): with err set after a step failed (it is
// retried), and with err nil once the backlog is closed, after took.
func WithCatchUpReport(report func(took time.Duration, err error)) Option {
	return func(w *Writer) { w.catchUpReport = report }
}

// Open opens (creating if needed) the file at path for tier t. Its
// dictionaries load on another goroutine; the first write waits for them.
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

	w := &Writer{path: abs, tier: t, tb: schema.TablesFor(t), now: time.Now}
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
	dsn := w.path
	if w.res.BlockSize > 0 {
		// DuckDB's setting for a file it creates; it reads an existing
		// file's from its header.
		dsn += "?default_block_size=" + strconv.Itoa(w.res.BlockSize)
	}
	c, err := duckdb.NewConnector(dsn, nil)
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
	conn, err := db.Conn(ctx)
	if err != nil {
		cleanup()
		return fmt.Errorf("open writer connection: %w", err)
	}
	hourly, daily, err := schema.Rollups(ctx, db, w.tier)
	if err != nil {
		conn.Close()
		cleanup()
		return err
	}
	w.connector, w.db, w.conn, w.dicts, w.rolled = c, db, conn, Dicts{}, rollState{hourly, daily}
	w.broken, w.discard, w.connStuck = nil, nil, nil
	w.loading = loadDictsAsync(db, w.tier)
	w.binaries = nil
	w.catchingUp, w.catchUpErr, w.catchUpStop = false, nil, make(chan struct{})
	if w.tier == schema.Summary {
		// The usual restart has at most a day to close: done here. A
		// longer backlog (a migrated file, a gateway stopped for days) is
		// closed in the background, so the collector starts at once.
		target, last, none, err := w.catchUpTarget(ctx)
		if err == nil && last && !none {
			err = w.catchUpTo(ctx, target)
		}
		if err != nil {
			_ = w.closeLocked()
			return err
		}
		if !last {
			w.catchingUp = true
			w.catchUpWG.Add(1)
			go w.catchUpInBackground(w.catchUpStop)
		}
	}
	w.readers.Store(db)
	return nil
}

func (w *Writer) closeLocked() error {
	w.stopLoading()
	if w.catchUpStop != nil {
		close(w.catchUpStop)
		w.catchUpStop = nil
	}
	var errs []error
	if w.db != nil && w.discard == nil {
		// DuckDB's own checkpoint at close is off (Resources.apply): the
		// memory goes into the file here, and not after a COMMIT that ran
		// out of memory, when it may hold that transaction's rows. The log keeps every
		// committed batch either way; the next open replays it.
		if _, err := w.db.ExecContext(context.Background(), "CHECKPOINT"); err != nil && w.broken == nil {
			errs = append(errs, fmt.Errorf("checkpoint: %w", err))
		}
	}
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
	err := w.closeLocked()
	w.mu.Unlock()
	// A catch-up step in progress ends with its day; the next sees the
	// file closed.
	w.catchUpWG.Wait()
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

// Space is how much of the file DuckDB uses: its blocks in all, and those
// free (left by deletes and by checkpoints rewriting row groups). DuckDB
// reuses free blocks for later writes but never gives them back to the
// file system.
type Space struct {
	FileBytes, FreeBytes int64
}

// Space reads the file's block counts.
func (w *Writer) Space(ctx context.Context) (Space, error) {
	var sp Space
	db := w.DB()
	if db == nil {
		return sp, errors.New("file is closed")
	}
	err := db.QueryRowContext(ctx, "SELECT block_size * total_blocks, block_size * free_blocks FROM pragma_database_size()").Scan(&sp.FileBytes, &sp.FreeBytes)
	if err != nil {
		return sp, fmt.Errorf("read the file's block counts: %w", err)
	}
	return sp, nil
}

// FrameCount is the number of frames in the in-memory dictionary.
func (w *Writer) FrameCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.awaitDicts() != nil || w.dicts.Frames == nil {
		return 0
	}
	return w.dicts.Frames.Len()
}

// StackCount is the number of stacks in the in-memory dictionary.
func (w *Writer) StackCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.awaitDicts() != nil || w.dicts.Stacks == nil {
		return 0
	}
	return w.dicts.Stacks.Len()
}

// ready reopens the file when an earlier fatal error invalidated the DuckDB
// instance (e.g. disk full during a checkpoint), so the exporter recovers
// once the cause is gone instead of failing forever.
func (w *Writer) ready(ctx context.Context) error {
	if w.conn != nil && w.broken == nil && w.discard == nil && w.connStuck == nil {
		return nil
	}
	if w.conn != nil && w.broken == nil && w.discard == nil {
		return w.replaceConn(ctx)
	}
	if err := w.reopen(ctx); err != nil {
		return fmt.Errorf("reopen after earlier failure: %w", err)
	}
	return nil
}

// reopen closes the DuckDB instance and opens the file again. Queries
// still running on the old instance finish first (the query endpoint's
// timeout bounds them; none starts meanwhile): two instances of one file
// in a process would each take the other's blocks for their own. If ctx
// ends first, the instance stays closed to new work and the next write
// waits on.
func (w *Writer) reopen(ctx context.Context) error {
	if w.db != nil {
		w.readers.Store(nil)
		if w.conn != nil {
			_ = w.conn.Close()
			w.conn = nil
		}
		_ = w.db.Close() // refuses new queries; running ones go on
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for w.db.Stats().InUse > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d queries still running on the file's old instance: %w", w.db.Stats().InUse, ctx.Err())
			case <-tick.C:
			}
		}
	}
	_ = w.closeLocked()
	return w.open(ctx)
}

// replaceConn discards the writer connection (database/sql closes a
// connection whose Raw call returns driver.ErrBadConn; DuckDB rolls back
// what it had open) and takes a fresh one from the same database, so the
// query endpoint's readers keep running.
func (w *Writer) replaceConn(ctx context.Context) error {
	_ = w.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = w.conn.Close()
	w.conn = nil
	conn, err := w.db.Conn(ctx)
	if err != nil {
		w.broken = fmt.Errorf("replace writer connection: %w", err)
		return fmt.Errorf("reopen after earlier failure: %w", w.broken)
	}
	w.conn, w.connStuck = conn, nil
	return nil
}

// discardAfter marks the instance to be closed and the file opened again
// (discard) when err is a COMMIT that ran out of memory, and reports
// whether it did.
func (w *Writer) discardAfter(err error) bool {
	if err == nil || !sqlquery.IsOutOfMemory(err) {
		return false
	}
	w.discard = err
	return true
}

// noteFailure records whether err left the instance or the writer
// connection unusable and reloads the dictionaries, which may now be ahead
// of the file.
func (w *Writer) noteFailure(ctx context.Context, err error) {
	msg := err.Error()
	if strings.Contains(msg, "invalidated") || strings.Contains(msg, "FATAL") || errors.Is(err, driver.ErrBadConn) {
		w.broken = err
		return
	}
	// An out-of-memory error (a query of the SQL endpoint took DuckDB's
	// memory) can leave the transaction aborted if the ROLLBACK failed too:
	// the connection then refuses every statement until it is replaced.
	var probe int
	if perr := w.conn.QueryRowContext(context.WithoutCancel(ctx), "SELECT 1").Scan(&probe); perr != nil {
		w.connStuck = perr
	}
	// The failed request's context may be what expired: the reload must
	// not fail with it, or one slow batch would force a reopen.
	ctx = context.WithoutCancel(ctx)
	w.binaries = nil
	w.stopLoading()
	d, lerr := loadDicts(ctx, w.db, w.tier)
	hourly, daily, rerr := schema.Rollups(ctx, w.db, w.tier)
	if lerr = errors.Join(lerr, rerr); lerr == nil {
		w.dicts, w.rolled = d, rollState{hourly, daily}
	} else {
		w.broken = lerr
	}
}

// Write stores b in one transaction: new frames and stacks, the rows
// (every sample in Samples, trace-tagged ones also in Traces) and binary
// metadata. On error nothing of b is stored.
func (w *Writer) Write(ctx context.Context, b *Batch) error {
	if b.empty() {
		return nil
	}
	return w.WriteConverted(ctx, b.ID, 0, func(*StackFeed) *Batch { return b })
}

// WriteConverted stores the batch convert returns, with id as its ID (""
// for none), as Write does. convert runs on the calling goroutine while
// another takes the file, begins the transaction and records id: a push
// spends about as long converting its request (1.5-2 ms for 5,000 rows)
// as DuckDB takes for those two statements, and they need not wait for
// each other. convert may hand the writer the batch's stacks through the
// feed as it makes the rows (up to stacks of them; see StackFeed). A nil
// or empty batch writes nothing. When id is stored already, nothing is
// written and ErrDuplicate is returned (wrapped).
func (w *Writer) WriteConverted(ctx context.Context, id string, stacks int, convert func(feed *StackFeed) *Batch) error {
	batches := make(chan *Batch, 1)
	feed := &StackFeed{chunks: make(chan []fedStack, max(stacks, 0)/feedChunk+1)}
	result := make(chan error, 1)
	go func() { result <- w.write(ctx, id, feed, batches) }()
	var b *Batch
	converted := false
	defer func() {
		if !converted {
			// convert panicked: the panic goes on once the transaction
			// is rolled back and the file released.
			<-result
		}
	}()
	func() {
		// Sent even if convert panics. The feed ends first: the writer
		// takes the batch once it has read the feed to its end.
		defer func() {
			feed.flush()
			close(feed.chunks)
			batches <- b
		}()
		b = convert(feed)
		converted = true
	}()
	return <-result
}

// StackFeed carries a batch's stacks to the writer while the batch is
// still being converted. The writer looks each one up in the stack
// dictionary, and names the frames of a stack new to the file and fills
// the dictionaries' Appenders with it, as it arrives: that work (about 2
// ms of a 5,000-row push, 325 of its stacks new) then overlaps the rest of
// the conversion on another core, instead of starting once the whole
// batch is made. Stacks go over in chunks:
// one at a time, the writer, faster than the converter, would be woken
// for each.
type StackFeed struct {
	chunks  chan []fedStack
	pending []fedStack
	// Resolve names a fed stack's frames, as Batch.Resolve: the converter
	// sets it before its first Add.
	Resolve func(stack int32) ([]string, []FrameMeta)
}

// feedChunk is how many stacks a StackFeed hands over at once.
const feedChunk = 256

// fedStack is a row's Stack and Key, handed over before the row's batch.
type fedStack struct {
	stack int32
	key   framedict.StackKey
}

// Add hands over stack (as a row's Stack) and key (its Key), once a row
// of the batch holds them. It never blocks: stacks past the feed's
// capacity (WriteConverted's stacks) are looked up with their rows
// instead, as those of a batch without a feed.
func (f *StackFeed) Add(stack int32, key framedict.StackKey) {
	if stack < 0 || key.IsZero() {
		return
	}
	if f.pending == nil {
		f.pending = make([]fedStack, 0, feedChunk)
	}
	f.pending = append(f.pending, fedStack{stack, key})
	if len(f.pending) == feedChunk {
		f.flush()
	}
}

// flush hands over the stacks added since the last chunk.
func (f *StackFeed) flush() {
	if len(f.pending) == 0 {
		return
	}
	select {
	case f.chunks <- f.pending:
	default:
	}
	f.pending = nil // the chunk sent is the writer's now
}

// errNothingToWrite ends a transaction begun for a batch that turned out
// empty.
var errNothingToWrite = errors.New("nothing to write")

func (w *Writer) write(ctx context.Context, id string, feed *StackFeed, batches <-chan *Batch) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(ctx); err != nil {
		return err
	}
	if err := w.awaitDicts(); err != nil {
		return err
	}
	var b *Batch
	err := w.conn.Raw(func(dc any) error {
		return w.writeTx(ctx, dc.(driver.Conn), id, feed, func() *Batch { b = <-batches; return b })
	})
	if errors.Is(err, errNothingToWrite) {
		return nil
	}
	if errors.Is(err, ErrDuplicate) {
		return fmt.Errorf("batch %q: %w", id, err)
	}
	var ce *commitError
	if errors.As(err, &ce) {
		// Whether the COMMIT happened is read from the file (opened
		// again first if the COMMIT ran out of memory; see discard):
		// DuckDB can report an error from COMMIT after the transaction
		// became durable (a checkpoint that failed after it), and a batch
		// without an ID of its own, sent again, would be stored twice.
		if w.discardAfter(err) {
			if rerr := w.ready(ctx); rerr != nil {
				return fmt.Errorf("write batch to %s: %w (and %w)", w.path, err, rerr)
			}
		} else {
			w.noteFailure(ctx, err) // reloads the dictionaries
		}
		if stored, lerr := w.committed(ctx, ce.writeID); lerr == nil && stored {
			return nil
		}
		return fmt.Errorf("write batch of %d stacks to %s: %w", len(b.Rows), w.path, err)
	}
	if err != nil {
		w.noteFailure(ctx, err)
		rows := 0
		if b != nil {
			rows = len(b.Rows)
		}
		return fmt.Errorf("write batch of %d stacks to %s: %w", rows, w.path, err)
	}
	return nil
}

// noTransaction is DuckDB's answer to ROLLBACK once the transaction ended
// (a failed COMMIT can end it): the connection is not stuck.
func noTransaction(err error) bool {
	return strings.Contains(err.Error(), "no transaction is active")
}

// commitError is a COMMIT that reported an error; whether it happened is
// told by writeID in ingested_batches.
type commitError struct {
	writeID string
	err     error
}

func (e *commitError) Error() string { return "commit: " + e.err.Error() }
func (e *commitError) Unwrap() error { return e.err }

// newWriteID names a write whose batch has no id of its own.
func newWriteID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "write-" + hex.EncodeToString(b[:])
}

// committed looks id up outside the writer's connection, which may be in
// any state after a failed COMMIT or append.
func (w *Writer) committed(ctx context.Context, id string) (bool, error) {
	var n int
	err := w.db.QueryRowContext(context.WithoutCancel(ctx), "SELECT count(*) FROM "+schema.IngestedBatches+" WHERE batch_id = ?", id).Scan(&n)
	return n > 0, err
}

// recordBatch stores id in ingested_batches, in the batch's transaction,
// or says it is there already (recorded: false; the transaction is then
// rolled back). The row goes in through an Appender, which checks the
// primary key as it appends: an INSERT ... ON CONFLICT DO NOTHING took
// 3.2 ms per batch here, the Appender 0.6 ms (a batch of 5,000 rows takes
// 12-15 ms in all). A failed append aborts the transaction, and its
// message is not typed: whether the id was the cause is asked of the table
// (committed).
func (w *Writer) recordBatch(ctx context.Context, dc driver.Conn, c rawConn, id string) (recorded bool, err error) {
	err = appendAll(dc, schema.IngestedBatches, 1, func(a *duckdb.Appender, _ int) error {
		return a.AppendRow(id, w.now().UTC())
	})
	if err == nil {
		return true, nil
	}
	if _, rerr := c.ExecContext(ctx, "ROLLBACK", nil); rerr != nil {
		return false, fmt.Errorf("record batch id: %w (and rollback failed: %w)", err, rerr)
	}
	stored, lerr := w.committed(ctx, id)
	if lerr != nil {
		return false, fmt.Errorf("record batch id: %w (and looking it up failed: %w)", err, lerr)
	}
	if stored {
		return false, nil
	}
	return false, fmt.Errorf("record batch id: %w", err)
}

type rawConn interface {
	driver.Conn
	driver.ExecerContext
	driver.QueryerContext
}

// writeTx writes the batch next returns, with id (its ID) recorded: the
// transaction begins and records the id before next is called, so the
// batch may still be in the making until then, its stacks coming through
// feed (nil: none) in the meantime.
func (w *Writer) writeTx(ctx context.Context, dc driver.Conn, id string, feed *StackFeed, next func() *Batch) (err error) {
	c, ok := dc.(rawConn)
	if !ok {
		return fmt.Errorf("driver connection %T cannot exec", dc)
	}
	if _, err := c.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			if _, rerr := c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil); rerr != nil && !noTransaction(rerr) {
				w.connStuck = rerr
				err = fmt.Errorf("%w (and rollback failed: %w)", err, rerr)
			}
		}
	}()
	// Every write records an id, its batch's or one of its own, so a
	// COMMIT that reports an error can be checked for having happened. A
	// batch's id is recorded in the same transaction as its rows, unless
	// it is there already: the batch is stored exactly once, whenever the
	// collector dies.
	writeID := id
	if writeID == "" {
		writeID = newWriteID()
	}
	if recorded, err := w.recordBatch(ctx, dc, c, writeID); err != nil {
		return err
	} else if !recorded {
		return ErrDuplicate
	}
	// The stacks the converter hands over while it makes the batch, each
	// looked up as it comes, and the new ones appended to their tables
	// while the writer would otherwise wait for the rest of the batch.
	var added newEntries
	dict := newDictAppend(dc, w.tb)
	defer dict.discard()
	fed, err := w.takeFeed(feed, &added, dict)
	if err != nil {
		return err
	}
	b := next()
	if b.empty() {
		if len(added.stacks) > 0 {
			// Stacks got IDs, and no batch came to store them (the
			// conversion panicked): an error, so that the writer reloads
			// its dictionaries from the file.
			return errors.New("the conversion handed over stacks and ended without a batch")
		}
		return errNothingToWrite // rolled back: the id is not recorded either
	}

	// Stack IDs: a fed stack's is known; any other row costs one map
	// access for a known stack, and a new stack names its frames (new
	// frames get IDs).
	ids := make([]int32, len(b.Rows))
	for i := range b.Rows {
		r := &b.Rows[i]
		if r.Frames == nil && r.Stack >= 0 && int(r.Stack) < len(fed) && fed[r.Stack] != 0 {
			ids[i] = fed[r.Stack]
			continue
		}
		key := r.Key
		if key.IsZero() {
			key = framedict.KeyOf(r.Frames)
		}
		ids[i] = w.stackID(key, func() ([]string, []FrameMeta) { return b.FramesOf(r) }, &added)
	}
	sids, newSeries := w.seriesIDs(b.Rows)
	// The rows are merged and sorted on another goroutine while DuckDB
	// takes the new frames, stacks and series: pure Go, about 0.5-1 ms of
	// a 5,000-row push, which then overlaps DuckDB's flushes.
	prepared := make(chan preparedRows, 1)
	descending := w.descending
	if len(b.Rows) > 0 {
		w.descending = !w.descending // see rowOrder
	}
	keys := w.sortKeys
	go func() { prepared <- prepareRows(b.Rows, sids, ids, descending, keys) }()
	err = dict.flush(&added)
	if err == nil {
		err = w.fillFrames(ctx, c, added.fills)
	}
	if err == nil {
		err = w.appendSeries(dc, newSeries)
	}
	rows := <-prepared
	if rows.keys != nil {
		w.sortKeys = rows.keys
	}
	if err != nil {
		return err
	}
	if rows.err != nil {
		return rows.err
	}
	if err := w.appendRows(dc, rows); err != nil {
		return err
	}
	rolled := w.rolled
	if w.tier == schema.Summary && len(b.Rows) > 0 {
		newest := b.Rows[0].Time
		for i := range b.Rows {
			if b.Rows[i].Time.After(newest) {
				newest = b.Rows[i].Time
			}
		}
		if rolled, err = w.rollUp(ctx, dc, c, b.Rows, sids, ids, newest); err != nil {
			return err
		}
	}
	written, err := w.upsertBinaries(ctx, c, b.Binaries)
	if err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT", nil); err != nil {
		return &commitError{writeID: writeID, err: err}
	}
	w.rolled = rolled
	if w.binaries == nil {
		w.binaries = map[string]storedBinary{}
	}
	for id, sb := range written {
		w.binaries[id] = sb
	}
	return nil
}

type newStack struct {
	id     int32
	frames []any // int32 frame IDs, root first
}

// newEntries are what a batch adds to the file's dictionaries: its new
// stacks and frames, and the type, file and line of stored frames that
// had none (fills).
type newEntries struct {
	stacks []newStack
	frames []int32
	names  []string
	metas  []FrameMeta
	fills  []frameFill
}

// takeFeed looks up the stacks feed (nil: none) carries until the
// converter is done with the batch, queuing the new ones in added and
// appending them (and their new frames) to dict after each chunk, and
// returns their IDs by stack (0: not fed).
func (w *Writer) takeFeed(feed *StackFeed, added *newEntries, dict *dictAppend) ([]int32, error) {
	if feed == nil {
		return nil, nil
	}
	var fed []int32
	for chunk := range feed.chunks {
		for _, f := range chunk {
			if int(f.stack) >= len(fed) {
				fed = append(fed, make([]int32, int(f.stack)+1-len(fed))...)
			}
			fed[f.stack] = w.stackID(f.key, func() ([]string, []FrameMeta) { return feed.Resolve(f.stack) }, added)
		}
		if err := dict.append(added); err != nil {
			return nil, err
		}
	}
	return fed, nil
}

// stackID is the ID of the stack with key. A stack new to the file gets
// one, and its frames (named by frames) get theirs where they are new:
// both are queued in added.
func (w *Writer) stackID(key framedict.StackKey, frames func() ([]string, []FrameMeta), added *newEntries) int32 {
	id, isNew := w.dicts.Stacks.ID(key)
	if !isNew {
		return id
	}
	names, metas := frames()
	// []any: the driver appends a list it is given as []any value by
	// value, and any other slice through reflection first, which took
	// half the time of appending a batch's new stacks.
	frameIDs := make([]any, len(names))
	for j, name := range names {
		fid, isNewFrame := w.dicts.Frames.ID(name)
		var m FrameMeta
		if j < len(metas) {
			m = metas[j]
		}
		switch {
		case isNewFrame:
			added.frames = append(added.frames, fid)
			added.names = append(added.names, name)
			added.metas = append(added.metas, m)
			if m == (FrameMeta{}) {
				w.dicts.Frames.MarkUntyped(fid)
			}
		case m != (FrameMeta{}) && w.dicts.Frames.Fill(fid):
			added.fills = append(added.fills, frameFill{fid, m})
		}
		frameIDs[j] = fid
	}
	added.stacks = append(added.stacks, newStack{id, frameIDs})
	return id
}

// appendAll appends n rows to table through one Appender.
func appendAll(dc driver.Conn, table string, n int, row func(a *duckdb.Appender, i int) error) error {
	a, err := duckdb.NewAppenderFromConn(dc, "", table)
	if err != nil {
		return fmt.Errorf("appender for %s: %w", table, err)
	}
	for i := 0; i < n; i++ {
		if err := row(a, i); err != nil {
			a.Close()
			return fmt.Errorf("append to %s: %w", table, err)
		}
	}
	if err := a.Close(); err != nil {
		return fmt.Errorf("flush %s: %w", table, err)
	}
	return nil
}

// dictAppend appends a batch's new frames and stacks (queued in its
// newEntries) to their tables through Appenders kept open while the batch
// is converted: filling them then happens while the writer waits for the
// converter, and only their flush is left once the batch is made.
type dictAppend struct {
	frames, stacks   lazyAppender
	nFrames, nStacks int // entries of the newEntries appended so far
}

func newDictAppend(dc driver.Conn, tb schema.Tables) *dictAppend {
	return &dictAppend{
		frames: lazyAppender{dc: dc, what: "frames", table: tb.Frames},
		stacks: lazyAppender{dc: dc, what: "stacks", table: tb.StackDict},
	}
}

// append appends the entries of added not appended yet.
func (d *dictAppend) append(added *newEntries) error {
	for ; d.nFrames < len(added.frames); d.nFrames++ {
		i := d.nFrames
		m := added.metas[i]
		line := m.Line
		if line < math.MinInt32 || line > math.MaxInt32 {
			line = 0 // not a line number: unknown
		}
		if err := d.frames.row(added.frames[i], added.names[i], nullable(m.Type), nullable(m.File), nullable(int32(line))); err != nil {
			return err
		}
	}
	for ; d.nStacks < len(added.stacks); d.nStacks++ {
		st := added.stacks[d.nStacks]
		if err := d.stacks.row(st.id, st.frames); err != nil {
			return err
		}
	}
	return nil
}

// flush appends what added holds beyond the appended entries and flushes
// both Appenders into the transaction.
func (d *dictAppend) flush(added *newEntries) error {
	if err := d.append(added); err != nil {
		return err
	}
	if err := d.frames.close(); err != nil {
		return err
	}
	return d.stacks.close()
}

// discard drops the Appenders flush did not close (the write failed):
// their rows are cleared, not flushed into a transaction being rolled
// back.
func (d *dictAppend) discard() {
	d.frames.discard()
	d.stacks.discard()
}

// lazyAppender is an Appender to table, created at its first row; what
// names the table in errors.
type lazyAppender struct {
	dc          driver.Conn
	what, table string
	a           *duckdb.Appender
}

func (l *lazyAppender) row(values ...driver.Value) error {
	if l.a == nil {
		a, err := duckdb.NewAppenderFromConn(l.dc, "", l.table)
		if err != nil {
			return fmt.Errorf("%s: appender for %s: %w", l.what, l.table, err)
		}
		l.a = a
	}
	if err := l.a.AppendRow(values...); err != nil {
		return fmt.Errorf("%s: append to %s: %w", l.what, l.table, err)
	}
	return nil
}

// close flushes the rows into the transaction (none: nothing to do).
func (l *lazyAppender) close() error {
	if l.a == nil {
		return nil
	}
	err := l.a.Close()
	l.a = nil
	if err != nil {
		return fmt.Errorf("%s: flush %s: %w", l.what, l.table, err)
	}
	return nil
}

func (l *lazyAppender) discard() {
	if l.a != nil {
		_ = l.a.Clear()
		_ = l.a.Close()
		l.a = nil
	}
}

// boxedTimes hands out a row's time and period as driver values, boxed
// once for each run of rows that share them: a batch holds a few times and
// periods for thousands of rows, and boxing a time.Time is an allocation.
type boxedTimes struct {
	at, period driver.Value // at is nil until the first row
	atTime     time.Time
	periodNs   int64
}

func (b *boxedTimes) of(at time.Time, periodNs int64) (driver.Value, driver.Value) {
	if b.at == nil || !at.Equal(b.atTime) || periodNs != b.periodNs {
		b.at, b.atTime, b.period, b.periodNs = at.UTC(), at, nullablePeriod(periodNs), periodNs
	}
	return b.at, b.period
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

// seriesOf is the series of r as the tier stores it (the local tier has
// no pod).
func (w *Writer) seriesOf(r *StackRow) framedict.Series {
	s := framedict.Series{Service: r.ServiceID, Build: r.BuildID, Container: r.ContainerID, PodUID: r.PodUID}
	if w.tier == schema.Summary {
		s.PodName = r.PodName
	}
	return s
}

// seriesIDs looks up every row's series ID, giving the series new to the
// file theirs (returned in ID order, to be stored by appendSeries). A
// batch's rows come resource by resource, so most rows have their
// predecessor's series.
func (w *Writer) seriesIDs(rows []StackRow) ([]int32, newSeries) {
	sids := make([]int32, len(rows))
	var added newSeries
	var prev framedict.Series
	var prevID int32
	for i := range rows {
		s := w.seriesOf(&rows[i])
		if i > 0 && s == prev {
			sids[i] = prevID
			continue
		}
		id, isNew := w.dicts.Series.ID(s)
		if isNew {
			if len(added.series) == 0 {
				added.first = id
			}
			added.series = append(added.series, s)
		}
		sids[i], prev, prevID = id, s, id
	}
	return sids, added
}

// newSeries are the series a batch adds to the file, with consecutive
// IDs from first.
type newSeries struct {
	first  int32
	series []framedict.Series
}

// appendSeries stores the new series in the dictionary's table, in the
// batch's transaction.
func (w *Writer) appendSeries(dc driver.Conn, added newSeries) error {
	if len(added.series) == 0 {
		return nil
	}
	summary := w.tier == schema.Summary
	err := appendAll(dc, w.tb.Series, len(added.series), func(a *duckdb.Appender, i int) error {
		s := added.series[i]
		if summary {
			return a.AppendRow(added.first+int32(i), s.Service, s.PodName, s.Build, s.Container, s.PodUID)
		}
		return a.AppendRow(added.first+int32(i), s.Service, s.Build, s.Container, s.PodUID)
	})
	if err != nil {
		return fmt.Errorf("series: %w", err)
	}
	return nil
}

// aggKey is what Samples rows are merged by: a trace-tagged row and an
// untraced one of the same stack are one aggregate row.
type aggKey struct {
	at     int64
	series int32
	stack  int32
	period int64
}

func keyOf(r *aggRow) aggKey {
	return aggKey{r.r.Time.UnixNano(), r.series, r.stack, r.r.PeriodNanos}
}

// rowOrder sorts a batch's rows by time, then by stack_id, ascending and
// descending in alternate batches. DuckDB packs an integer column in groups
// of 2048 values by the spread of the differences between neighbours
// (bit-packing's delta mode): sorted stack IDs differ by little, and
// alternating the direction keeps the step from one batch to the next
// small too, where one direction would jump from the largest ID back to
// the smallest at every batch. Measured on the storage bench's simulated
// day (10 services, 1-minute batches): the summary tier's sample table
// 14.95 -> 11.81 MB, the agent's 2.11 -> 1.85 MB.
func rowOrder(descending bool) func(a, b aggRow) int {
	return func(a, b aggRow) int {
		if c := a.r.Time.Compare(b.r.Time); c != 0 {
			return c
		}
		if descending {
			return cmp.Compare(b.stack, a.stack)
		}
		return cmp.Compare(a.stack, b.stack)
	}
}

// rowKeys gives agg the order rowOrder(descending) gives it, as integers
// that slices.Sort sorts: each row's key is the rank of its time among
// the batch's times, its stack ID (reversed when descending) and its
// index in agg, in the low bits. It returns nil, leaving agg to rowOrder,
// when a batch's ranks and indices need more than 33 bits (more than
// 65,536 rows of as many times) or a stack ID is negative. buf is reused.
// rowOrder as the sort's comparison reads each row's time through a
// pointer at every step: in a push of 50,000 rows (the gateway's minute
// of 200 services) the writer then waited 10-11 ms for the merge and sort
// after DuckDB's flushes, and 6-7 ms with these keys.
func rowKeys(agg []aggRow, descending bool, buf []uint64) []uint64 {
	n := len(agg)
	if n < 2 {
		return nil
	}
	keys := slices.Grow(buf[:0], n)[:n]
	// The distinct times, sorted: a batch holds one per bucket on the
	// summary tier, and its samples' own times on the local tier.
	for i := range agg {
		keys[i] = uint64(agg[i].r.Time.UnixNano()) ^ 1<<63 // unsigned order of the signed times
	}
	slices.Sort(keys)
	times := slices.Clone(slices.Compact(keys))
	idxBits := bits.Len(uint(n - 1))
	if bits.Len(uint(len(times)-1))+idxBits > 33 {
		return nil
	}
	for i := range agg {
		g := &agg[i]
		if g.stack < 0 {
			return nil
		}
		rank := 0
		if len(times) > 1 {
			rank, _ = slices.BinarySearch(times, uint64(g.r.Time.UnixNano())^1<<63)
		}
		stack := uint64(g.stack)
		if descending {
			stack = math.MaxInt32 - stack
		}
		keys[i] = uint64(rank)<<(31+idxBits) | stack<<idxBits | uint64(i)
	}
	slices.Sort(keys)
	return keys
}

// indexMask is the low bits of rowKeys' keys for n rows: a row's index.
func indexMask(n int) uint64 { return 1<<bits.Len(uint(n-1)) - 1 }

// aggRow is one row to append: the batch row it comes from, its series
// and stack IDs and its count.
type aggRow struct {
	r      *StackRow
	series int32
	stack  int32
	count  int64
}

// preparedRows are a batch's rows as appendRows writes them.
type preparedRows struct {
	// agg are the Samples rows: in rowOrder when keys is nil, else in
	// the order of the indices in keys (see rowKeys).
	agg    []aggRow
	keys   []uint64
	traces []tracedRow // Traces, in traceOrder
	err    error       // a malformed trace or span ID
}

// sample is the i-th Samples row in rowOrder.
func (p *preparedRows) sample(i int) *aggRow {
	if p.keys == nil {
		return &p.agg[i]
	}
	return &p.agg[p.keys[i]&indexMask(len(p.agg))]
}

// prepareRows merges every row's samples into Samples rows (trace-tagged
// rows merged into the untraced row of their key) in rowOrder (descending
// or not), and decodes the trace-tagged rows' IDs for Traces in
// traceOrder. It only reads its arguments: the writer runs it beside
// DuckDB's work.
func prepareRows(rows []StackRow, series, ids []int32, descending bool, keys []uint64) preparedRows {
	if len(rows) == 0 {
		return preparedRows{}
	}
	// Trace-tagged samples by aggregate key; untraced rows pick theirs up.
	var traced map[aggKey]int64
	var tracedRows []aggRow
	for i := range rows {
		if rows[i].TraceID != "" {
			if traced == nil {
				traced = map[aggKey]int64{}
			}
			t := aggRow{&rows[i], series[i], ids[i], rows[i].Count}
			traced[keyOf(&t)] += t.count
			tracedRows = append(tracedRows, t)
		}
	}
	agg := make([]aggRow, 0, len(rows)-len(tracedRows))
	for i := range rows {
		r := &rows[i]
		if r.TraceID != "" {
			continue
		}
		a := aggRow{r, series[i], ids[i], r.Count}
		if traced != nil {
			k := keyOf(&a)
			if n, ok := traced[k]; ok {
				a.count += n
				delete(traced, k)
			}
		}
		agg = append(agg, a)
	}
	// Keys with trace-tagged samples only, once each.
	for _, t := range tracedRows {
		k := keyOf(&t)
		if n, ok := traced[k]; ok {
			delete(traced, k)
			t.count = n
			agg = append(agg, t)
		}
	}
	out := preparedRows{agg: agg, keys: rowKeys(agg, descending, keys)}
	if out.keys == nil {
		slices.SortFunc(agg, rowOrder(descending))
	}
	if len(tracedRows) == 0 {
		return out
	}
	traces := make([]tracedRow, len(tracedRows))
	for j := range tracedRows {
		t := &traces[j]
		t.aggRow = tracedRows[j]
		r := t.r
		if !decodeID(t.trace[:], r.TraceID) {
			return preparedRows{keys: out.keys, err: fmt.Errorf("trace ID %q: want 32 hex characters", r.TraceID)}
		}
		if r.SpanID != "" {
			var b [8]byte
			if !decodeID(b[:], r.SpanID) {
				return preparedRows{keys: out.keys, err: fmt.Errorf("span ID %q: want 16 hex characters", r.SpanID)}
			}
			t.span, t.hasSpan = binary.BigEndian.Uint64(b[:]), true
		}
	}
	slices.SortFunc(traces, traceOrder)
	out.traces = traces
	return out
}

// appendRows writes rows' Samples rows and Traces rows (with binary IDs).
func (w *Writer) appendRows(dc driver.Conn, rows preparedRows) error {
	if len(rows.agg) == 0 {
		return nil
	}
	var boxed boxedTimes
	err := appendAll(dc, w.tb.Samples, len(rows.agg), func(a *duckdb.Appender, i int) error {
		g := rows.sample(i)
		at, period := boxed.of(g.r.Time, g.r.PeriodNanos)
		return a.AppendRow(at, g.series, g.stack, clampCount(g.count), period)
	})
	if err != nil || len(rows.traces) == 0 {
		return err
	}
	return appendAll(dc, w.tb.Traces, len(rows.traces), func(a *duckdb.Appender, j int) error {
		t := &rows.traces[j]
		var span driver.Value
		if t.hasSpan {
			span = t.span
		}
		at, period := boxed.of(t.r.Time, t.r.PeriodNanos)
		return a.AppendRow(at, t.series, t.stack, t.trace, span, clampCount(t.r.Count), period)
	})
}

// decodeID fills dst with the bytes of s, exactly 2×len(dst) hex digits.
func decodeID(dst []byte, s string) bool {
	if len(s) != 2*len(dst) {
		return false
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

// tracedRow is a trace-tagged row with its IDs decoded.
type tracedRow struct {
	aggRow
	trace   duckdb.UUID
	span    uint64
	hasSpan bool
}

// traceOrder is the order trace-tagged rows are appended in: time, series,
// trace, span, stack. A trace's rows of one bucket then sit together, and
// DuckDB stores each run of equal trace and span IDs once (run-length):
// random 16- and 8-byte IDs compress no other way. On the storage bench's
// simulated day the gateway's trace table is 11.0 MB in this order, 27.0 MB
// in rowOrder's (time, stack), and 15.7 MB as BLOB IDs (schema version 9).
func traceOrder(a, b tracedRow) int {
	if c := a.r.Time.Compare(b.r.Time); c != 0 {
		return c
	}
	if c := cmp.Compare(a.series, b.series); c != 0 {
		return c
	}
	if c := bytes.Compare(a.trace[:], b.trace[:]); c != 0 {
		return c
	}
	if c := cmp.Compare(a.span, b.span); c != 0 {
		return c
	}
	if a.hasSpan != b.hasSpan {
		if a.hasSpan {
			return 1
		}
		return -1
	}
	return cmp.Compare(a.stack, b.stack)
}

func named(vs ...driver.Value) []driver.NamedValue {
	out := make([]driver.NamedValue, len(vs))
	for i, v := range vs {
		out[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return out
}

// frameFill is what a frame stored untyped turned out to be.
type frameFill struct {
	id   int32
	meta FrameMeta
}

// fillFrames writes the type, file and line of frames stored without them
// (files upgraded to schema version 6 keep their frames; new samples say
// what they are), in one UPDATE. Strings are quoted: file names come from
// the sender (cleaned to valid UTF-8 without NUL by the converter).
func (w *Writer) fillFrames(ctx context.Context, c rawConn, fills []frameFill) error {
	if len(fills) == 0 {
		return nil
	}
	str := func(s string) string {
		if s == "" {
			return "NULL::VARCHAR"
		}
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	var sb strings.Builder
	for i, f := range fills {
		if i > 0 {
			sb.WriteString(",")
		}
		line := "NULL::INTEGER"
		if l := f.meta.Line; l > 0 && l <= math.MaxInt32 {
			line = strconv.FormatInt(l, 10)
		}
		fmt.Fprintf(&sb, "(%d,%s,%s,%s)", f.id, str(f.meta.Type), str(f.meta.File), line)
	}
	q := "UPDATE " + w.tb.Frames + " AS f SET frame_type = d.t, file_name = d.f, line_number = d.l FROM (VALUES " + sb.String() +
		") AS d(id, t, f, l) WHERE f.frame_id = d.id AND f.frame_type IS NULL AND f.file_name IS NULL"
	if _, err := c.ExecContext(ctx, q, nil); err != nil {
		return fmt.Errorf("fill frame types: %w", err)
	}
	return nil
}

// binarySeenStep is how precisely last_seen follows a binary's samples: a
// binary is written again when it was last written more than this before
// (or anything else about it changed). Every batch of a busy host names
// the same binaries; rewriting their rows is an upsert through the build
// ID's index per batch, for a column read by retention (days) and people.
const binarySeenStep = time.Minute

// storedBinary is a binary_metadata row as the file holds it.
type storedBinary struct {
	service, path string
	debug         bool
	first, last   time.Time
}

// merged is the row after the upsert of b (the statement's rules below).
func (s storedBinary) merged(b Binary) storedBinary {
	out := storedBinary{service: b.ServiceID, path: s.path, debug: b.HasDebugInfo, first: s.first, last: s.last}
	if b.Path != "" {
		out.path = b.Path
	}
	if b.Seen.Before(out.first) {
		out.first = b.Seen
	}
	if b.Seen.After(out.last) {
		out.last = b.Seen
	}
	return out
}

// upsertBinaries writes the batch's binaries that the file does not hold
// as they are (w.binaries), in one statement, and returns the rows as
// written, for the cache after COMMIT.
func (w *Writer) upsertBinaries(ctx context.Context, c rawConn, bins []Binary) (map[string]storedBinary, error) {
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
	var sb strings.Builder
	args := make([]driver.Value, 0, len(order)*6)
	for _, id := range order {
		b := byID[id]
		b.Seen = b.Seen.UTC()
		stored, known := w.binaries[id]
		if known {
			next := stored.merged(b)
			if next.service == stored.service && next.path == stored.path && next.debug == stored.debug &&
				next.first.Equal(stored.first) && !b.Seen.After(stored.last.Add(binarySeenStep)) {
				continue // the row holds this, last_seen within binarySeenStep
			}
		}
		if sb.Len() > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, b.BuildID, b.ServiceID, b.Path, b.Seen, b.Seen, b.HasDebugInfo)
	}
	if sb.Len() == 0 {
		return nil, nil
	}
	q := "INSERT INTO " + w.tb.Binaries + " (build_id, service_id, binary_path, first_seen, last_seen, has_debug_info) VALUES " + sb.String() + `
ON CONFLICT (build_id) DO UPDATE SET
    service_id = excluded.service_id,
    binary_path = CASE WHEN excluded.binary_path <> '' THEN excluded.binary_path ELSE binary_path END,
    first_seen = least(first_seen, excluded.first_seen),
    last_seen = greatest(last_seen, excluded.last_seen),
    has_debug_info = excluded.has_debug_info
RETURNING build_id, service_id, binary_path, has_debug_info, first_seen, last_seen`
	rows, err := c.QueryContext(ctx, q, named(args...))
	if err != nil {
		return nil, fmt.Errorf("upsert binary metadata: %w", err)
	}
	defer rows.Close()
	// The rows as the statement left them: what the file holds.
	written := make(map[string]storedBinary, len(order))
	dest := make([]driver.Value, 6)
	for {
		if err := rows.Next(dest); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("upsert binary metadata: %w", err)
		}
		id, _ := dest[0].(string)
		service, _ := dest[1].(string)
		path, _ := dest[2].(string)
		debug, _ := dest[3].(bool)
		first, _ := dest[4].(time.Time)
		last, _ := dest[5].(time.Time)
		written[id] = storedBinary{service, path, debug, first.UTC(), last.UTC()}
	}
	return written, nil
}

// InTx runs fn in one transaction on the writer connection, with writes
// paused. After a successful commit, fn's afterCommit (if any) runs with the
// dictionaries, still under the lock, so retention can drop the frames and
// stacks it deleted before any batch could reuse them.
func (w *Writer) InTx(ctx context.Context, fn func(ctx context.Context, conn *sql.Conn) (afterCommit func(Dicts), err error)) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.ready(ctx); err != nil {
		return err
	}
	if err := w.awaitDicts(); err != nil {
		return err
	}
	if _, err := w.conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		w.noteFailure(ctx, err)
		return fmt.Errorf("begin: %w", err)
	}
	after, err := fn(ctx, w.conn)
	if err == nil {
		if _, err = w.conn.ExecContext(ctx, "COMMIT"); w.discardAfter(err) {
			return fmt.Errorf("commit: %w", err)
		}
	}
	if err != nil {
		if _, rerr := w.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil && !noTransaction(rerr) {
			w.connStuck = rerr
		}
		w.noteFailure(ctx, err)
		return err
	}
	// Retention may have deleted binaries the cache holds.
	w.binaries = nil
	if after != nil {
		after(w.dicts)
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
	if r.CheckpointThreshold != "" {
		// Validated by the config, as memory_limit.
		if _, err := db.ExecContext(ctx, fmt.Sprintf("SET checkpoint_threshold = '%s'", r.CheckpointThreshold)); err != nil {
			return fmt.Errorf("checkpoint_threshold %q: %w", r.CheckpointThreshold, err)
		}
	}
	if r.TempDirectory != "" {
		// A path may hold quotes: doubled, they stay part of the literal.
		lit := "'" + strings.ReplaceAll(r.TempDirectory, "'", "''") + "'"
		if _, err := db.ExecContext(ctx, "SET temp_directory = "+lit); err != nil {
			return fmt.Errorf("temp_directory %q: %w", r.TempDirectory, err)
		}
	}
	// The writer checkpoints when it closes the file, unless a COMMIT ran
	// out of memory (Writer.discard): DuckDB's own checkpoint at close
	// would write whatever its memory holds.
	if _, err := db.ExecContext(ctx, "PRAGMA disable_checkpoint_on_shutdown"); err != nil {
		return fmt.Errorf("turn off the checkpoint at close: %w", err)
	}
	// Last, and before anything else can use db: queries see this file and
	// nothing else (no other files, no extensions). DuckDB refuses to change
	// temp_directory once this is off, and refuses the two together in the
	// connection string, so the file is opened with access on and closed
	// here; it cannot be turned on again.
	if _, err := db.ExecContext(ctx, "SET enable_external_access = false"); err != nil {
		return fmt.Errorf("disable external access: %w", err)
	}
	return nil
}
