package buildidprocessor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/processor/buildidprocessor/internal/metadata"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// seenBuild is when this collector first and last saw a build.
type seenBuild struct{ first, last time.Time }

type buildIDProcessor struct {
	host     string
	procRoot string
	cache    *buildid.Cache
	logger   *zap.Logger
	tel      *metadata.TelemetryBuilder
	now      func() time.Time

	// mu makes a build's first/last update one step with its lookup.
	mu   sync.Mutex
	seen *lru.Cache[string, *seenBuild]
}

func newProcessor(cfg *Config, set processor.Settings) (*buildIDProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create buildid metrics: %w", err)
	}
	host := cfg.HostName
	if host == "" {
		if host, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("buildid: host_name is not set and the OS host name is unknown: %w", err)
		}
	}
	logger := set.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	// Builds seen are remembered four times as long as binaries' IDs: a
	// build outlives the file identities (restarts, copies) it had.
	seen, err := lru.New[string, *seenBuild](4 * cfg.CacheSize)
	if err != nil {
		return nil, fmt.Errorf("buildid: %w", err)
	}
	return &buildIDProcessor{
		host: host, procRoot: cfg.ProcRoot, cache: buildid.NewCache(cfg.CacheSize),
		logger: logger, tel: tel, now: time.Now,
		seen: seen,
	}, nil
}

// process is a local process whose binaries can be read on this host.
type process struct {
	procDir string // <proc_root>/<pid>; "" for a resource without a pid
	exePath string // executable path as the process sees it
	exe     *buildid.Info
}

func (p *buildIDProcessor) process(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	now := p.now()
	rps := pd.ResourceProfiles()
	procs := make([]*process, rps.Len())
	for r := 0; r < rps.Len(); r++ {
		identifyFromProducer(pd.Dictionary(), rps.At(r))
		procs[r] = p.annotateResource(ctx, rps.At(r).Resource().Attributes(), now)
	}
	p.annotateMappings(ctx, pd, procs)
	return pd, nil
}

func trimDeleted(path string) string {
	p, _ := procmaps.TrimDeleted(path)
	return p
}

func pidOf(attrs pcommon.Map) int64 {
	v, ok := attrs.Get(profileschema.AttrProcessPID)
	if !ok {
		return 0
	}
	switch v.Type() {
	case pcommon.ValueTypeInt:
		return v.Int()
	case pcommon.ValueTypeStr:
		n, _ := strconv.ParseInt(v.Str(), 10, 64)
		return n
	}
	return 0
}

// thisHost reports whether a resource says it was profiled on this host.
func (p *buildIDProcessor) thisHost(attrs pcommon.Map) bool {
	v, ok := attrs.Get(profileschema.AttrHostName)
	return ok && v.Str() == p.host
}

// local decides whether a resource's binaries can be read here, and how. A
// resource naming another host, or naming a pid that is gone or runs another
// executable, is left alone: its binaries are not (or no longer) the ones on
// this host.
func (p *buildIDProcessor) local(ctx context.Context, attrs pcommon.Map) *process {
	host := ""
	if v, ok := attrs.Get(profileschema.AttrHostName); ok {
		host = v.Str()
	}
	if host != "" && host != p.host {
		return nil
	}
	exePath := ""
	if v, ok := attrs.Get(profileschema.AttrProcessExePath); ok {
		exePath = trimDeleted(v.Str())
	}
	pid := pidOf(attrs)
	if pid <= 0 {
		// Without a pid a path is only trusted when the resource says it
		// was profiled on this very host.
		if host != p.host || !filepath.IsAbs(exePath) {
			return nil
		}
		return &process{exePath: exePath}
	}
	procDir := filepath.Join(p.procRoot, strconv.FormatInt(pid, 10))
	link, err := os.Readlink(filepath.Join(procDir, "exe"))
	if err != nil {
		p.tel.ProcessorBuildidUnresolvedBinaries.Add(ctx, 1)
		p.logger.Debug("process not readable here", zap.Int64("pid", pid), zap.Error(err))
		return nil
	}
	if exePath != "" && trimDeleted(link) != exePath {
		// The pid was reused, or it is another host's pid.
		p.tel.ProcessorBuildidUnresolvedBinaries.Add(ctx, 1)
		p.logger.Debug("pid runs another executable", zap.Int64("pid", pid), zap.String("want", exePath), zap.String("have", link))
		return nil
	}
	return &process{procDir: procDir, exePath: trimDeleted(link)}
}

func (p *buildIDProcessor) annotateResource(ctx context.Context, attrs pcommon.Map, now time.Time) *process {
	if id, ok := attrs.Get(profileschema.AttrBuildID); ok {
		// The producer identified the executable already: our receiver does
		// when it reads a process, so a process gone by now (a short-lived
		// one, or a pid reused since) keeps its build ID. A resource of
		// another host, or one annotated before, is left alone; a local one
		// gets its first/last seen and, while it runs, its mappings' IDs.
		if _, done := attrs.Get(profileschema.AttrBinaryFirstSeen); done || !p.thisHost(attrs) {
			return nil
		}
		seen := p.sawBuild(id.AsString(), now)
		attrs.PutInt(profileschema.AttrBinaryFirstSeen, seen.first.UnixNano())
		attrs.PutInt(profileschema.AttrBinaryLastSeen, seen.last.UnixNano())
		return p.local(ctx, attrs)
	}
	proc := p.local(ctx, attrs)
	if proc == nil || proc.exePath == "" {
		return proc
	}
	// /proc/PID/exe is the running binary even when its path was replaced
	// or deleted since the process started.
	file := proc.exePath
	if proc.procDir != "" {
		file = filepath.Join(proc.procDir, "exe")
	}
	info, ok := p.lookup(ctx, file)
	if !ok {
		p.tel.ProcessorBuildidUnresolvedBinaries.Add(ctx, 1)
		return proc
	}
	proc.exe = &info
	for _, kv := range info.Attributes() {
		attrs.PutStr(kv[0], kv[1])
	}
	attrs.PutBool(profileschema.AttrBinaryHasDebugInfo, info.HasDebugInfo)
	seen := p.sawBuild(info.Canonical(), now)
	attrs.PutInt(profileschema.AttrBinaryFirstSeen, seen.first.UnixNano())
	attrs.PutInt(profileschema.AttrBinaryLastSeen, seen.last.UnixNano())
	return proc
}

func (p *buildIDProcessor) lookup(ctx context.Context, file string) (buildid.Info, bool) {
	info, _, hit, err := p.cache.Lookup(file)
	if err != nil {
		p.logger.Debug("read build ID", zap.String("file", file), zap.Error(err))
		return buildid.Info{}, false
	}
	if hit {
		p.tel.ProcessorBuildidCacheHits.Add(ctx, 1)
	} else {
		p.tel.ProcessorBuildidCacheMisses.Add(ctx, 1)
	}
	return info, true
}

// sawBuild records that build id was seen now. The table is bounded: past
// maxSeen builds the least recently seen is forgotten (the exporter keeps
// the durable first_seen; this only spares it a lookup).
func (p *buildIDProcessor) sawBuild(id string, now time.Time) seenBuild {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.seen.Get(id)
	if !ok {
		s = &seenBuild{first: now}
		p.seen.Add(id, s)
	}
	if now.After(s.last) {
		s.last = now
	}
	return *s
}
