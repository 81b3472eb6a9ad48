package labelfilterprocessor

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/processor/labelfilterprocessor/internal/metadata"
)

// Where a dropped attribute was attached: the "scope" of the drop counter.
const (
	levelResource = "resource"
	levelScope    = "scope"
	levelProfile  = "profile"
	levelSample   = "sample"
)

// maxLoggedKeys bounds how many distinct dropped keys are logged: a hostile
// sender could invent a new key per request.
const maxLoggedKeys = 64

// Drops counts what one request lost, by where the attribute was attached.
// Invalid counts profile/sample attribute indices outside the dictionary.
type Drops struct {
	Resource, Scope, Profile, Sample, Invalid int64
}

// Total is every attribute dropped.
func (d Drops) Total() int64 { return d.Resource + d.Scope + d.Profile + d.Sample + d.Invalid }

type labelFilter struct {
	allow   allowList
	logger  *zap.Logger
	dropped metric.Int64Counter

	mu     sync.Mutex // guards logged
	logged map[string]bool
}

func newProcessor(cfg *Config, set processor.Settings) (*labelFilter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := set.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	f := &labelFilter{allow: newAllowList(cfg.Allow), logger: logger, logged: map[string]bool{}}
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("create labelfilter metrics: %w", err)
	}
	f.dropped = tb.ProcessorLabelfilterDroppedAttributes
	return f, nil
}

func (f *labelFilter) process(ctx context.Context, pd pprofile.Profiles) (pprofile.Profiles, error) {
	d := f.filter(pd)
	for level, n := range map[string]int64{
		levelResource: d.Resource, levelScope: d.Scope, levelProfile: d.Profile,
		levelSample: d.Sample, "invalid": d.Invalid,
	} {
		if n > 0 {
			f.dropped.Add(ctx, n, metric.WithAttributes(attribute.String("scope", level)))
		}
	}
	return pd, nil
}

// filter removes every attribute whose key is not allowed. Dictionary
// entries stay (locations and mappings share them); profiles and samples
// just stop pointing at them.
func (f *labelFilter) filter(pd pprofile.Profiles) Drops {
	var d Drops
	dict := pd.Dictionary()
	// allowed[i]: may attribute table entry i stay? Decided once per request.
	attrs := dict.AttributeTable()
	allowed := make([]bool, attrs.Len())
	for i := range allowed {
		key := profileschema.Str(dict, attrs.At(i).KeyStrindex())
		allowed[i] = f.allow.allows(key)
	}
	keep := func(level string, idx pcommon.Int32Slice, n *int64) {
		drop := 0
		for i := 0; i < idx.Len(); i++ {
			if ai := idx.At(i); ai < 0 || int(ai) >= len(allowed) || !allowed[ai] {
				drop++
			}
		}
		if drop == 0 {
			return
		}
		kept := make([]int32, 0, idx.Len()-drop)
		for i := 0; i < idx.Len(); i++ {
			ai := idx.At(i)
			switch {
			case ai < 0 || int(ai) >= len(allowed):
				d.Invalid++
			case !allowed[ai]:
				*n++
				f.logDrop(level, profileschema.Str(dict, attrs.At(int(ai)).KeyStrindex()))
			default:
				kept = append(kept, ai)
			}
		}
		idx.FromRaw(kept)
	}

	rps := pd.ResourceProfiles()
	for r := 0; r < rps.Len(); r++ {
		rp := rps.At(r)
		d.Resource += f.filterMap(levelResource, rp.Resource().Attributes())
		sps := rp.ScopeProfiles()
		for s := 0; s < sps.Len(); s++ {
			sp := sps.At(s)
			d.Scope += f.filterMap(levelScope, sp.Scope().Attributes())
			ps := sp.Profiles()
			for p := 0; p < ps.Len(); p++ {
				prof := ps.At(p)
				keep(levelProfile, prof.AttributeIndices(), &d.Profile)
				samples := prof.Samples()
				for i := 0; i < samples.Len(); i++ {
					keep(levelSample, samples.At(i).AttributeIndices(), &d.Sample)
				}
			}
		}
	}
	return d
}

func (f *labelFilter) filterMap(level string, m pcommon.Map) int64 {
	var n int64
	m.RemoveIf(func(k string, _ pcommon.Value) bool {
		// The batch id is how retries are recognised downstream, whatever
		// the allow-list says; it is never stored as a label.
		if f.allow.allows(k) || (level == levelResource && k == profileschema.AttrBatchID) {
			return false
		}
		n++
		f.logDrop(level, k)
		return true
	})
	return n
}

// droppedByDesign are keys hotpath's own pipeline sends for a processor
// placed before this one (the receiver's process.pid, for buildid) or for
// a pipeline that keeps them (service.instance.id, one per process start,
// from an SDK's process context): their drops are counted like any other
// and logged at debug level, since a warning on every start of the shipped
// configuration would tell an operator nothing.
var droppedByDesign = map[string]bool{profileschema.AttrProcessPID: true, profileschema.AttrServiceInstanceID: true}

// logDrop logs the first drop of each key (up to maxLoggedKeys keys), so an
// operator sees what a sender tried to store without a log line per sample.
func (f *labelFilter) logDrop(level, key string) {
	const maxKeyLen = 128
	if len(key) > maxKeyLen {
		key = key[:maxKeyLen] + "…"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logged[key] || len(f.logged) > maxLoggedKeys {
		return
	}
	f.logged[key] = true
	if droppedByDesign[key] {
		f.logger.Debug("dropping attribute not on the allow-list, as designed (counted in otelcol_processor_labelfilter_dropped_attributes)",
			zap.String("key", key), zap.String("scope", level))
		return
	}
	if len(f.logged) > maxLoggedKeys {
		f.logger.Warn("dropping attributes not on the allow-list; further keys are counted, not logged",
			zap.Int("keys_logged", maxLoggedKeys))
		return
	}
	f.logger.Warn("dropping attribute not on the allow-list (counted in otelcol_processor_labelfilter_dropped_attributes; logged once per key)",
		zap.String("key", key), zap.String("scope", level))
}
