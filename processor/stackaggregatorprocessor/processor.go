package stackaggregatorprocessor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/xconsumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

const meterName = "github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor"

// telemetry is the processor's own metrics.
type telemetry struct {
	stacksIn, stacksOut, windows, late, truncated, malformed, outOfRange, overflow metric.Int64Counter
}

func newTelemetry(mp metric.MeterProvider) (*telemetry, error) {
	m := mp.Meter(meterName)
	var t telemetry
	var errs []error
	counter := func(dst *metric.Int64Counter, name, desc, unit string) {
		c, err := m.Int64Counter("otelcol_processor_stackaggregator_"+name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		*dst = c
	}
	counter(&t.stacksIn, "stacks_in", "Sample records received.", "{samples}")
	counter(&t.stacksOut, "stacks_out", "Merged sample records emitted.", "{samples}")
	counter(&t.windows, "windows_emitted", "Windows emitted.", "{windows}")
	counter(&t.late, "late_samples", "Sample records that arrived after their window closed (still emitted, in their own window).", "{samples}")
	counter(&t.truncated, "truncated_samples", "Sample records folded into [truncated] by max_unique_stacks.", "{samples}")
	counter(&t.malformed, "malformed_samples", "Sample records skipped for out-of-range dictionary indices or negative/overflowing values.", "{samples}")
	counter(&t.overflow, "overflow_samples", "Sample records of series beyond max_series in a window, merged into the [overflow] series.", "{samples}")
	counter(&t.outOfRange, "time_out_of_range_samples", "Sample values skipped for a time before 2020 or more than 10 minutes ahead of this host's clock.", "{samples}")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("create stackaggregator metrics: %w", err)
	}
	return &t, nil
}

type stackProcessor struct {
	cfg    *Config
	logger *zap.Logger
	next   xconsumer.Profiles
	tel    *telemetry
	now    func() time.Time

	mu  sync.Mutex // guards agg
	agg *aggregator

	logMu                                             sync.Mutex
	loggedMalformed, loggedOutOfRange, loggedOverflow bool

	cancel context.CancelFunc
	done   chan struct{}
}

func newProcessor(cfg *Config, set processor.Settings, next xconsumer.Profiles) (*stackProcessor, error) {
	tel, err := newTelemetry(set.MeterProvider)
	if err != nil {
		return nil, err
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
	p.mu.Lock()
	st := p.agg.Add(pd, p.now())
	p.mu.Unlock()
	p.tel.stacksIn.Add(ctx, st.Samples)
	if st.Late > 0 {
		p.tel.late.Add(ctx, st.Late)
	}
	if st.Truncated > 0 {
		p.tel.truncated.Add(ctx, st.Truncated)
	}
	if st.Malformed > 0 {
		p.tel.malformed.Add(ctx, st.Malformed)
		p.warnOnce(&p.loggedMalformed, "skipped malformed samples: dictionary index out of range, or negative or overflowing values (logged once; see otelcol_processor_stackaggregator_malformed_samples)", st.Malformed)
	}
	if st.Overflow > 0 {
		p.tel.overflow.Add(ctx, st.Overflow)
		p.warnOnce(&p.loggedOverflow, "more series in a window than max_series: samples merged into the [overflow] series (logged once; see otelcol_processor_stackaggregator_overflow_samples)", st.Overflow)
	}
	if st.OutOfRange > 0 {
		p.tel.outOfRange.Add(ctx, st.OutOfRange)
		p.warnOnce(&p.loggedOutOfRange, "skipped samples timed before 2020 or more than 10 minutes in the future (logged once; see otelcol_processor_stackaggregator_time_out_of_range_samples)", st.OutOfRange)
	}
	// Everything is buffered; the ticker emits it when its window closes.
	return pd, processorhelper.ErrSkipProcessingData
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

func (p *stackProcessor) start(_ context.Context, _ component.Host) error {
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(tickEvery(p.cfg.Window))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := p.flush(ctx, false); err != nil {
					p.logger.Error("emit closed windows", zap.Error(err))
				}
			}
		}
	}()
	return nil
}

// shutdown stops the ticker and emits everything still buffered, so a
// restart loses nothing that reached the processor.
func (p *stackProcessor) shutdown(ctx context.Context) error {
	if p.cancel != nil {
		p.cancel()
		<-p.done
	}
	return p.flush(ctx, true)
}

// flush emits the windows due now (all when all is set), oldest first.
func (p *stackProcessor) flush(ctx context.Context, all bool) error {
	p.mu.Lock()
	due := p.agg.Flush(p.now(), all)
	p.mu.Unlock()
	var errs []error
	for _, w := range due {
		pd, n := emit(w, p.cfg.Window)
		p.tel.windows.Add(ctx, 1)
		p.tel.stacksOut.Add(ctx, n)
		if err := p.next.ConsumeProfiles(ctx, pd); err != nil {
			errs = append(errs, fmt.Errorf("emit window %s: %w", time.Unix(0, w.start).UTC().Format(time.RFC3339), err))
		}
	}
	return errors.Join(errs...)
}
