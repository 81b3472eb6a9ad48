package duckdbprofileexporter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/queryserver"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/retention"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
	"github.com/hotpath-dev/hotpath/internal/duckdballoc"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// batchIDMargin is how much longer than the rows they stored the ids of
// stored batches are kept. A resend (a retry, a replay after a crash, however
// long the collector was down) could only double rows that are still in the
// file, and retention deletes a batch's rows by their sample time, which is
// before the batch was stored, unless the sender's clock runs ahead: the
// margin covers that skew. A week of an agent's ids (40,320) takes 1.8 MB of
// its file, against about 5 MB for the hour of profiles it keeps.
const batchIDMargin = time.Hour

// retentionPolicy is the policy the exporter's retention runs, from the
// configured retention with the tier's defaults.
func (c *Config) retentionPolicy() (retention.Policy, time.Duration) {
	r := c.effectiveRetention()
	return retention.Policy{
		Stacks: r.Stacks, TraceStacks: r.TraceStacks, Hourly: r.Hourly, Daily: r.Daily, Binaries: r.Metadata,
		BatchIDs:  r.Stacks + batchIDMargin,
		ChunkRows: r.ChunkRows, ChunkTimeout: time.Minute,
	}, r.Interval
}

type profilesExporter struct {
	cfg    *Config
	set    component.TelemetrySettings
	logger *zap.Logger
	conv   converter
	// now is the clock of what the exporter dates: the batch ids it
	// records, the retention's cutoffs, the converter's sample-time checks.
	now func() time.Time

	w       *writer.Writer
	cleaner *retention.Runner
	server  *queryserver.Server

	metrics *exporterMetrics // nil in tests that build the exporter directly

	mu         sync.Mutex
	skipped    int64 // malformed samples dropped since start
	repaired   int64 // samples stored after a repair since start
	loggedSkip map[string]bool

	// compactHinted is when the retention goroutine last said that the
	// file's free blocks are worth a `hotpath compact`.
	compactHinted time.Time
}

func newProfilesExporter(cfg *Config, set component.TelemetrySettings) *profilesExporter {
	e := &profilesExporter{
		cfg:        cfg,
		set:        set,
		logger:     set.Logger,
		conv:       converter{tier: schema.Tier(cfg.Tier), bucket: cfg.BucketInterval},
		loggedSkip: map[string]bool{},
	}
	e.setClock(time.Now)
	return e
}

// setClock makes now the exporter's clock (before start): the uptime
// benchmark runs days of an agent on a simulated one.
func (e *profilesExporter) setClock(now func() time.Time) {
	e.now, e.conv.now = now, now
}

// start opens the file and the query endpoint. A failure is also reported
// as a permanent error through componentstatus, so health checks show this
// exporter, and not only the collector's exit, as the cause.
func (e *profilesExporter) start(ctx context.Context, host component.Host) error {
	err := e.open(ctx, host)
	if err != nil {
		componentstatus.ReportStatus(host, componentstatus.NewPermanentErrorEvent(err))
	}
	return err
}

func (e *profilesExporter) open(ctx context.Context, host component.Host) error {
	w, err := writer.Open(ctx, e.cfg.Path, schema.Tier(e.cfg.Tier), writer.WithResources(e.cfg.resources()), writer.WithClock(e.now),
		writer.WithCatchUpReport(func(took time.Duration, err error) {
			if err != nil {
				e.logger.Warn("roll-up catch-up step failed; retrying (queries stay exact, from the minutes)", zap.String("path", e.cfg.Path), zap.Error(err))
				return
			}
			e.logger.Info("roll-ups caught up", zap.String("path", e.cfg.Path), zap.Duration("took", took))
		}))
	if err != nil {
		return err
	}
	e.w = w
	if alloc, err := duckdballoc.Current(); err == nil {
		e.logger.Debug("DuckDB's allocator", zap.Uint("arenas", alloc.Arenas), zap.Duration("freed_memory_kept", alloc.DirtyDecay))
	} else {
		e.logger.Debug("DuckDB's allocator", zap.Error(err))
	}
	if busy, _ := w.CatchingUp(); busy {
		hourly, _ := w.RolledUp()
		e.logger.Info("roll-ups are more than a day behind the stored minutes: closing them in the background, a day per transaction (queries stay exact meanwhile)",
			zap.String("path", e.cfg.Path), zap.Time("hourly_complete_until", hourly))
	}
	if e.cfg.Query.Enabled {
		q := e.cfg.Query
		srv, err := queryserver.Start(ctx, &q.ServerConfig, host, e.set, queryserver.Config{
			Limits:        sqlquery.Limits{Timeout: q.Timeout, MaxRows: q.MaxRows, MaxBytes: q.MaxBytes},
			MaxConcurrent: q.MaxConcurrent, MemoryLimit: e.cfg.resources().MemoryLimit,
		}, w.DB)
		if err != nil {
			_ = w.Close()
			e.w = nil
			return fmt.Errorf("start query endpoint: %w", err)
		}
		e.server = srv
		e.logger.Info("serving read-only SQL", zap.String("endpoint", srv.Addr()), zap.String("path", e.cfg.Path))
	}
	policy, interval := e.cfg.retentionPolicy()
	e.cleaner = retention.Start(w, policy, interval, e.now, func(res retention.Result, err error) {
		if err != nil {
			e.logger.Warn("retention cleanup failed; will retry next interval", zap.Error(err))
			return
		}
		fields := []zap.Field{zap.Int64("stack_rows", res.Stacks), zap.Int64("stacks", res.StackIDs), zap.Int64("series", res.Series), zap.Int64("frames", res.Frames), zap.Int64("binaries", res.Binaries)}
		if res.Stacks+res.StackIDs+res.Series+res.Frames+res.Binaries > 0 {
			e.logger.Info("retention cleanup", fields...)
		}
		// Every run, for whoever waits on one (the storage bench).
		e.logger.Debug("retention run done", append(fields, zap.Bool("swept", res.Swept))...)
		e.hintCompaction(w)
	})
	return nil
}

// A file whose free blocks take at least compactHintBytes and a quarter of
// it is worth compacting; the hint is repeated at most once a day.
const (
	compactHintBytes = 64 << 20
	compactHintEvery = 24 * time.Hour
)

// worthCompacting says whether a file with sp's blocks is worth a
// `hotpath compact`.
func worthCompacting(sp writer.Space) bool {
	return sp.FreeBytes >= compactHintBytes && 4*sp.FreeBytes >= sp.FileBytes
}

// hintCompaction tells the operator, once a day at most, when deletes have
// left much of the file free: DuckDB reuses those blocks but never shrinks
// the file, and the collector does not compact it while it runs.
func (e *profilesExporter) hintCompaction(w *writer.Writer) {
	if time.Since(e.compactHinted) < compactHintEvery {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sp, err := w.Space(ctx)
	if err != nil || !worthCompacting(sp) {
		return
	}
	e.compactHinted = time.Now()
	e.logger.Info("the file's free blocks take much of it: DuckDB reuses them but does not shrink the file; `hotpath compact` rewrites a stopped collector's file without them",
		zap.String("path", e.cfg.Path), zap.Int64("file_bytes", sp.FileBytes), zap.Int64("free_bytes", sp.FreeBytes))
}

func (e *profilesExporter) shutdown(ctx context.Context) error {
	if e.cleaner != nil {
		e.cleaner.Stop()
	}
	var err error
	if e.server != nil {
		err = e.server.Shutdown(ctx)
	}
	if e.w != nil {
		if cerr := e.w.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	e.mu.Lock()
	if e.skipped > 0 || e.repaired > 0 {
		e.logger.Warn("malformed samples were dropped or repaired", zap.Int64("dropped", e.skipped), zap.Int64("repaired", e.repaired))
	}
	e.mu.Unlock()
	return err
}

// push writes one request. Errors go back to the exporter helper, whose
// retry and queue keep the data until the file accepts writes again.
func (e *profilesExporter) push(ctx context.Context, pd pprofile.Profiles) error {
	buf := buffersPool.Get().(*convertBuffers)
	defer func() {
		buf.reset()
		buffersPool.Put(buf)
	}()
	// The writer begins the transaction and checks the batch ID while the
	// request is converted, then looks up its stacks as the converter
	// hands them over.
	id := profileschema.BatchID(pd)
	var batch *writer.Batch
	var skip skipReport
	stacks := pd.Dictionary().StackTable().Len()
	err := e.w.WriteConverted(ctx, id, stacks, func(feed *writer.StackFeed) *writer.Batch {
		batch, skip = e.conv.convertWith(pd, buf, feed)
		batch.ID = id
		return batch
	})
	e.metrics.recordMalformed(ctx, skip.byReason)
	if skip.count > 0 || skip.repaired > 0 {
		e.mu.Lock()
		e.skipped += int64(skip.count)
		e.repaired += int64(skip.repaired)
		var fresh []string
		for reason := range skip.byReason {
			if !e.loggedSkip[reason] {
				e.loggedSkip[reason] = true
				fresh = append(fresh, reason)
			}
		}
		e.mu.Unlock()
		// Logged once per reason: a misbehaving sender would otherwise
		// flood the log. Totals are reported at shutdown.
		for _, reason := range fresh {
			e.logger.Warn("malformed samples (logged once per reason; totals at shutdown)",
				zap.String("reason", reason), zap.Int("samples", skip.byReason[reason]), zap.String("first", skip.first[reason]),
				zap.Int("dropped_in_request", skip.count), zap.Int("repaired_in_request", skip.repaired))
		}
	}
	if err != nil {
		if errors.Is(err, writer.ErrDuplicate) {
			// Stored before (a retry or a replay): acknowledged, not doubled.
			e.metrics.recordDuplicate(ctx)
			return nil
		}
		return err
	}
	e.metrics.recordRows(ctx, len(batch.Rows))
	return nil
}

// skippedSamples is the number of malformed samples dropped so far.
func (e *profilesExporter) skippedSamples() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.skipped
}
