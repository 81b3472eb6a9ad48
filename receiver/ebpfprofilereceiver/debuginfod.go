package ebpfprofilereceiver

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/debuginfod"
)

// debugFetcher gives the symbolizer stripped binaries' debug files from
// debuginfod servers (symbolize.DebugFiles): a binary of a process the
// agent reads is asked for once, fetched in the background, one file at a
// time, into a cache directory kept within its bound. Its table waits for
// the file (up to wait), so the process's frames are named from its first
// interval or so on, instead of staying file offsets that only `hotpath
// symbolize` could name later (and never for shared libraries, whose
// build IDs the stored frames do not carry).
type debugFetcher struct {
	client   *debuginfod.Client
	wait     time.Duration
	maxBytes int64
	logger   *zap.Logger
	count    func(outcome string)
	now      func() time.Time

	mu     sync.Mutex
	builds map[string]*debugBuild
	// maxBuilds bounds builds: a CI runner builds new binaries all day.
	// Past it the builds already done are forgotten (asked again if a
	// table of theirs is read again).
	maxBuilds int
	queue     chan string
	warned    bool // a failed fetch was logged at warn; later ones at debug
}

// debugBuild is what is known of one build's debug file.
type debugBuild struct {
	asked time.Time // when it was queued
	done  bool
	path  string    // the file, when done and fetched
	retry time.Time // when done without it after a failure: ask again from then
}

// Outcomes of receiver_ebpfprofile_debuginfod_files.
const (
	debugFetched  = "fetched"   // downloaded
	debugCached   = "cached"    // already in the cache directory
	debugNotFound = "not_found" // no server has it
	debugFailed   = "failed"    // a server failed, or sent a file refused (another build, too large, cut off)
	debugDropped  = "dropped"   // too many builds waiting at once
)

const (
	// debugQueue bounds the builds waiting to be fetched. A node's
	// processes map a few dozen distinct libraries; a burst beyond this is
	// asked for again when its binaries are next read.
	debugQueue = 256
	// debugFetchTimeout bounds one file's download.
	debugFetchTimeout = 10 * time.Minute
	// debugBuildsKept is the default maxBuilds.
	debugBuildsKept = 4096
	// debugRetryAfter is how long a build whose fetch failed (not one no
	// server has) waits before it is asked for again.
	debugRetryAfter = 10 * time.Minute
)

func newDebugFetcher(cfg DebuginfodConfig, logger *zap.Logger, counter metric.Int64Counter) (*debugFetcher, error) {
	client, err := debuginfod.New(cfg.URLs, cfg.Directory)
	if err != nil {
		return nil, err
	}
	maxBytes := int64(cfg.MaxMiB) << 20
	client.MaxBytes = maxBytes
	return &debugFetcher{
		client:   client,
		wait:     cfg.Wait,
		maxBytes: maxBytes,
		logger:   logger,
		count: func(outcome string) {
			counter.Add(context.Background(), 1, metric.WithAttributes(attribute.String("outcome", outcome)))
		},
		now:       time.Now,
		builds:    map[string]*debugBuild{},
		maxBuilds: debugBuildsKept,
		queue:     make(chan string, debugQueue),
	}, nil
}

// DebugFile implements symbolize.DebugFiles.
func (d *debugFetcher) DebugFile(build string) (string, bool) {
	if !debuginfod.IsGNUBuildID(build) {
		return "", false
	}
	now := d.now()
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.builds[build]
	switch {
	case b == nil || (b.done && b.path == "" && !b.retry.IsZero() && now.After(b.retry)):
		if len(d.builds) >= d.maxBuilds {
			for id, b := range d.builds {
				if b.done {
					delete(d.builds, id)
				}
			}
		}
		select {
		case d.queue <- build:
			d.builds[build] = &debugBuild{asked: now}
			return "", d.wait > 0
		default:
			d.count(debugDropped)
			return "", false
		}
	case b.done:
		return b.path, false
	default:
		return "", now.Sub(b.asked) < d.wait
	}
}

// run fetches queued builds until ctx ends.
func (d *debugFetcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case build := <-d.queue:
			d.fetch(ctx, build)
		}
	}
}

func (d *debugFetcher) fetch(ctx context.Context, build string) {
	fctx, cancel := context.WithTimeout(ctx, debugFetchTimeout)
	defer cancel()
	start := d.now()
	var err error
	path, cached := d.client.Cached(build, debuginfod.DebugInfo)
	if !cached {
		path, err = d.client.Fetch(fctx, build, debuginfod.DebugInfo)
	}
	outcome := debugFetched
	switch {
	case cached:
		outcome = debugCached
	case errors.Is(err, debuginfod.ErrNotFound):
		outcome = debugNotFound
	case err != nil:
		outcome = debugFailed
	}
	if ctx.Err() != nil {
		return // shutting down: nothing was fetched, nothing to record
	}
	d.count(outcome)
	d.mu.Lock()
	b := d.builds[build]
	b.done, b.path, b.retry = true, path, time.Time{}
	level := zap.DebugLevel
	if outcome == debugFailed {
		b.retry = d.now().Add(debugRetryAfter)
		if !d.warned {
			d.warned, level = true, zap.WarnLevel
		}
	}
	d.mu.Unlock()
	msg := "debug file from debuginfod"
	if path == "" {
		msg = "no debug file from debuginfod: frames of this build stay file offsets"
	}
	d.logger.Log(level, msg, zap.String("build_id", build), zap.String("outcome", outcome),
		zap.Duration("took", d.now().Sub(start)), zap.Error(err))
	if outcome == debugFetched {
		if n, err := d.client.Trim(d.maxBytes, build); err != nil {
			d.logger.Warn("debuginfod cache", zap.Error(err))
		} else if n > 0 {
			d.logger.Debug("debuginfod cache trimmed", zap.Int("builds_removed", n))
		}
	}
}
