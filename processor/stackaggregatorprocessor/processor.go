package stackaggregatorprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor/internal/metadata"
	"github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor/internal/wal"
)

type stackProcessor struct {
	cfg    *Config
	logger *zap.Logger
	next   xconsumer.Profiles
	tel    *metadata.TelemetryBuilder
	now    func() time.Time

	mu  sync.Mutex // guards agg, and orders log appends with merges
	agg *aggregator
	wal *wal.Log // nil without wal.directory
	// lastBefore is the latest batch in the log when it was opened; the
	// first batch after start reports the gap from it.
	lastBefore time.Time
	gapDone    bool // guarded by mu

	emitMu      sync.Mutex // serialises emission (ticker and shutdown)
	pending     []*window  // closed, not yet accepted by next; guarded by emitMu
	pendingN    atomic.Int64
	lastExpired time.Time

	logMu                                             sync.Mutex
	loggedMalformed, loggedOutOfRange, loggedOverflow bool

	cancel context.CancelFunc
	done   chan struct{}
}

func newProcessor(cfg *Config, set processor.Settings, next xconsumer.Profiles) (*stackProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create stackaggregator metrics: %w", err)
	}
	logger := set.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	return &stackProcessor{
		cfg: cfg, logger: logger, next: next, tel: tel, now: time.Now,
		agg: newAggregator(cfg),
	}, nil
}

func (p *stackProcessor) process(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	if n := p.pendingN.Load(); n >= int64(p.cfg.MaxPendingWindows) {
		p.tel.ProcessorStackaggregatorRefusedBatches.Add(ctx, 1)
		return pd, fmt.Errorf("stackaggregator: %d closed windows wait for the next component to accept them (max_pending_windows); retry later", n)
	}
	batchID := profileschema.BatchID(pd)
	var payload []byte
	if p.wal != nil {
		// The marshaler rewrites a writable input in place (strings to
		// dictionary references); the input is not ours to change.
		enc := pd
		if !pd.IsReadOnly() {
			enc = pprofile.NewProfiles()
			pd.CopyTo(enc)
		}
		var err error
		if payload, err = (&pprofile.ProtoMarshaler{}).MarshalProfiles(enc); err != nil {
			return pd, fmt.Errorf("stackaggregator: encode batch for the write-ahead log: %w", err)
		}
	}
	now := p.now()
	p.mu.Lock()
	if p.wal != nil && batchID != "" && p.wal.Seen(batchID) {
		p.mu.Unlock()
		p.tel.ProcessorStackaggregatorDuplicateBatches.Add(ctx, 1)
		return pd, processorhelper.ErrSkipProcessingData
	}
	var routes []wal.Route
	if p.wal != nil {
		routes = p.agg.Routes(pd, now)
		// On disk before merged, so what is merged is always in the log;
		// on error nothing was merged and the sender keeps the batch.
		if err := p.wal.Append(wal.Record{Received: now, BatchID: batchID, Routes: routes, Payload: payload}); err != nil {
			p.mu.Unlock()
			p.tel.ProcessorStackaggregatorRefusedBatches.Add(ctx, 1)
			return pd, fmt.Errorf("stackaggregator: %w", err)
		}
	}
	st := p.agg.Add(pd, now, routes)
	unused := p.agg.unusedRoutes(routes)
	reportGap := p.wal != nil && !p.gapDone && !p.lastBefore.IsZero()
	p.gapDone = true
	p.mu.Unlock()
	for _, id := range unused {
		// Only malformed samples pointed there: no window to wait for.
		if err := p.wal.Committed(id); err != nil {
			p.logger.Warn("write-ahead log", zap.Error(err))
		}
	}
	if reportGap {
		gap := now.Sub(p.lastBefore)
		p.tel.ProcessorStackaggregatorRestartGap.Add(ctx, int64(gap.Seconds()))
		p.logger.Warn("first batch since start: nothing was received between the last batch before the restart and this one (samples of that span are not in storage)",
			zap.Time("last_before_start", p.lastBefore), zap.Time("first_after_start", now), zap.Duration("gap", gap))
	}
	p.record(ctx, st)
	// Everything is buffered; the ticker emits it when its window closes.
	return pd, processorhelper.ErrSkipProcessingData
}

func (p *stackProcessor) record(ctx context.Context, st addStats) {
	p.tel.ProcessorStackaggregatorStacksIn.Add(ctx, st.Samples)
	if st.Late > 0 {
		p.tel.ProcessorStackaggregatorLateSamples.Add(ctx, st.Late)
	}
	if st.Truncated > 0 {
		p.tel.ProcessorStackaggregatorTruncatedSamples.Add(ctx, st.Truncated)
	}
	if st.Malformed > 0 {
		p.tel.ProcessorStackaggregatorMalformedSamples.Add(ctx, st.Malformed)
		p.warnOnce(&p.loggedMalformed, "skipped malformed samples: dictionary index out of range, or negative or overflowing values (logged once; see otelcol_processor_stackaggregator_malformed_samples)", st.Malformed)
	}
	if st.Overflow > 0 {
		p.tel.ProcessorStackaggregatorOverflowSamples.Add(ctx, st.Overflow)
		p.warnOnce(&p.loggedOverflow, "more series in a window than max_series: samples merged into the [overflow] series (logged once; see otelcol_processor_stackaggregator_overflow_samples)", st.Overflow)
	}
	if st.OutOfRange > 0 {
		p.tel.ProcessorStackaggregatorTimeOutOfRangeSamples.Add(ctx, st.OutOfRange)
		p.warnOnce(&p.loggedOutOfRange, "skipped samples timed before 2020 or more than 10 minutes in the future (logged once; see otelcol_processor_stackaggregator_time_out_of_range_samples)", st.OutOfRange)
	}
}

// warnOnce logs msg the first time only: a misbehaving sender would
// otherwise flood the log; the counters keep the totals.
func (p *stackProcessor) warnOnce(logged *bool, msg string, n int64) {
	p.logMu.Lock()
	first := !*logged
	*logged = true
	p.logMu.Unlock()
	if first {
		p.logger.Warn(msg, zap.Int64("samples", n))
	}
}

// tickEvery is how often closed windows are looked for: often enough that a
// window leaves at most a fraction of its length late.
func tickEvery(window time.Duration) time.Duration {
	return min(max(window/4, time.Millisecond), time.Second)
}

func (p *stackProcessor) start(ctx context.Context, _ component.Host) error {
	if dir := p.cfg.WAL.Directory; dir != "" {
		if err := p.openWAL(ctx, dir); err != nil {
			return err
		}
	}
	tctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(tickEvery(p.cfg.Window))
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-t.C:
				if err := p.flush(tctx, false); err != nil {
					p.logger.Error("emit closed windows (kept, retried next tick)", zap.Error(err))
				}
			}
		}
	}()
	return nil
}

// openWAL opens the log and rebuilds the windows it holds that were not
// accepted downstream before the last stop (a crash, or a failed emit).
// They are emitted as their windows close, under their original ids.
func (p *stackProcessor) openWAL(ctx context.Context, dir string) error {
	l, err := wal.Open(dir, wal.Options{
		SegmentAge:  p.cfg.Window,
		DedupWindow: p.cfg.WAL.DedupWindow,
		Sync:        true,
		Now:         p.now,
	})
	if err != nil {
		return fmt.Errorf("stackaggregator: open write-ahead log %s: %w", dir, err)
	}
	var batches int
	var u pprofile.ProtoUnmarshaler
	err = l.Replay(func(r wal.Record) error {
		pd, err := u.UnmarshalProfiles(r.Payload)
		if err != nil {
			return fmt.Errorf("decode batch received %s: %w", r.Received.UTC().Format(time.RFC3339), err)
		}
		p.mu.Lock()
		p.agg.Add(pd, r.Received, r.Routes)
		p.mu.Unlock()
		batches++
		return nil
	})
	if err != nil {
		_ = l.Close()
		return fmt.Errorf("stackaggregator: replay write-ahead log %s: %w", dir, err)
	}
	st := l.Stats()
	p.tel.ProcessorStackaggregatorReplayedBatches.Add(ctx, int64(batches))
	p.wal, p.lastBefore = l, l.LastReceived()
	fields := []zap.Field{zap.String("directory", dir), zap.Int("segments", st.Segments), zap.Int("batches_replayed", batches)}
	if st.TornBytes > 0 {
		fields = append(fields, zap.Int64("torn_bytes_dropped", st.TornBytes))
	}
	if st.CorruptBytes > 0 {
		p.logger.Error("write-ahead log had damaged records; the batches after the damage in those segments are lost", append(fields, zap.Int64("corrupt_bytes", st.CorruptBytes))...)
	} else {
		p.logger.Info("write-ahead log opened", fields...)
	}
	return nil
}

// shutdown stops the ticker and emits everything still buffered, so a
// restart loses nothing that reached the processor. What the next
// component refuses stays in the write-ahead log for the next start.
func (p *stackProcessor) shutdown(ctx context.Context) error {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	err := p.flush(ctx, true)
	if p.wal != nil {
		if err != nil {
			p.logger.Warn("windows not accepted at shutdown stay in the write-ahead log and are emitted after the next start", zap.Error(err))
			err = nil
		}
		err = errors.Join(err, p.wal.Close())
	}
	return err
}

// flush emits the windows due now (all when all is set), oldest first, and
// the ones refused before. A refused window is kept and tried again; an
// accepted one is marked committed in the log.
func (p *stackProcessor) flush(ctx context.Context, all bool) error {
	p.emitMu.Lock()
	defer p.emitMu.Unlock()
	now := p.now()
	p.mu.Lock()
	due := p.agg.Flush(now, all)
	p.mu.Unlock()
	if p.wal != nil && now.Sub(p.lastExpired) >= time.Minute {
		p.lastExpired = now
		p.wal.Expire()
	}
	queue := append(p.pending, due...)
	p.pending = nil
	var errs []error
	for _, w := range queue {
		pd, n := emit(w, p.cfg.Window)
		if err := p.next.ConsumeProfiles(ctx, pd); err != nil {
			p.tel.ProcessorStackaggregatorEmitFailures.Add(ctx, 1)
			p.pending = append(p.pending, w)
			errs = append(errs, fmt.Errorf("emit window %s: %w", time.Unix(0, w.start).UTC().Format(time.RFC3339), err))
			continue
		}
		p.tel.ProcessorStackaggregatorWindowsEmitted.Add(ctx, 1)
		p.tel.ProcessorStackaggregatorStacksOut.Add(ctx, n)
		if p.wal != nil {
			if err := p.wal.Committed(w.id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	p.pendingN.Store(int64(len(p.pending)))
	p.tel.ProcessorStackaggregatorPendingWindows.Record(ctx, int64(len(p.pending)))
	return errors.Join(errs...)
}
