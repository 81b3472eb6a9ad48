package duckdbprofileexporter

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/queryserver"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/retention"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/sqlquery"
)

type profilesExporter struct {
	cfg    *Config
	logger *zap.Logger
	conv   converter

	w       *writer.Writer
	cleaner *retention.Runner
	server  *queryserver.Server

	mu         sync.Mutex
	skipped    int64 // malformed samples dropped since start
	loggedSkip bool
}

func newProfilesExporter(cfg *Config, logger *zap.Logger) *profilesExporter {
	return &profilesExporter{
		cfg:    cfg,
		logger: logger,
		conv:   converter{tier: schema.Tier(cfg.Tier), bucket: cfg.BucketInterval, now: time.Now},
	}
}

func (e *profilesExporter) start(ctx context.Context, _ component.Host) error {
	w, err := writer.Open(ctx, e.cfg.Path, schema.Tier(e.cfg.Tier), writer.WithResources(e.cfg.resources()))
	if err != nil {
		return err
	}
	e.w = w
	if e.cfg.Query.Enabled {
		srv, err := queryserver.Start(e.cfg.Query.Endpoint, e.cfg.Query.Token, w.DB, sqlquery.Limits{
			Timeout: e.cfg.Query.Timeout, MaxRows: e.cfg.Query.MaxRows, MaxBytes: e.cfg.Query.MaxBytes,
		}, e.logger)
		if err != nil {
			_ = w.Close()
			return fmt.Errorf("start query endpoint: %w", err)
		}
		e.server = srv
		e.logger.Info("serving read-only SQL", zap.String("endpoint", srv.Addr()), zap.String("path", e.cfg.Path))
	}
	r := e.cfg.effectiveRetention()
	e.cleaner = retention.Start(w, retention.Policy{
		Stacks: r.Stacks, TraceStacks: r.TraceStacks, Binaries: r.Metadata,
		ChunkRows: r.ChunkRows, ChunkTimeout: time.Minute,
	}, r.Interval, time.Now, func(res retention.Result, err error) {
		if err != nil {
			e.logger.Warn("retention cleanup failed; will retry next interval", zap.Error(err))
			return
		}
		if res.Stacks+res.Frames+res.Binaries > 0 {
			e.logger.Info("retention cleanup", zap.Int64("stack_rows", res.Stacks), zap.Int64("frames", res.Frames), zap.Int64("binaries", res.Binaries))
		}
	})
	return nil
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
	if e.skipped > 0 {
		e.logger.Warn("malformed samples were dropped", zap.Int64("total", e.skipped))
	}
	e.mu.Unlock()
	return err
}

// push writes one request. Errors go back to the exporter helper, whose
// retry and queue keep the data until the file accepts writes again.
func (e *profilesExporter) push(ctx context.Context, pd pprofile.Profiles) error {
	batch, skip := e.conv.convert(pd)
	if skip.count > 0 {
		e.mu.Lock()
		e.skipped += int64(skip.count)
		first := !e.loggedSkip
		e.loggedSkip = true
		e.mu.Unlock()
		if first {
			// Logged once: a misbehaving sender would otherwise flood the log.
			e.logger.Warn("dropping malformed samples (logged once; total reported at shutdown)",
				zap.Int("count", skip.count), zap.String("first", skip.first))
		}
	}
	return e.w.Write(ctx, batch)
}

// skippedSamples is the number of malformed samples dropped so far.
func (e *profilesExporter) skippedSamples() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.skipped
}
