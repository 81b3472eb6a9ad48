package duckdbprofileexporter

import (
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// converter turns OTLP profiles into one writer batch. It only reads pd:
// exporters in a fan-out share read-only data.
type converter struct {
	tier   schema.Tier
	bucket time.Duration // summary tier bucket width
	now    func() time.Time
}

// Reasons a sample is dropped (skipped) or stored changed (repaired). Each
// is counted and logged once per exporter with its first occurrence.
const (
	reasonNoStack      = "sample has no stack"
	reasonBadStack     = "stack index out of range"
	reasonEmptyStack   = "stack has no frames"
	reasonBadLocation  = "location index out of range"
	reasonBadLink      = "link index out of range"
	reasonNegative     = "negative sample value"
	reasonOverflow     = "sample values overflow int64"
	reasonTimeRange    = "sample time outside the accepted range"
	reasonInvalidUTF8  = "invalid UTF-8 or NUL in a name (replaced with U+FFFD)"
	reasonDeepStack    = "stack deeper than the frame limit (root side cut)"
	reasonCountClamped = "merged count overflows int64 (clamped)"
	reasonBadPeriod    = "sampling period outside 1µs..1m (stored as unknown)"
)

// maxStackDepth bounds the frames stored for one stack. Real unwinders stop
// far below it (the receiver at 127 frames); deeper stacks come from a
// hostile or broken sender and keep their leaf-most frames under a
// truncatedFrame root.
const maxStackDepth = 1024

// truncatedFrame replaces the root-side frames cut from a deep stack.
const truncatedFrame = "[truncated]"

// Accepted sample times: profileschema.SampleTimeAccepted. Old but
// plausible times are stored and left to retention.

// skipReport counts samples dropped as malformed and samples stored after a
// repair, by reason, with the first occurrence of each reason.
type skipReport struct {
	count    int // samples dropped
	repaired int // samples stored after a repair
	byReason map[string]int
	first    map[string]string
}

func (s *skipReport) note(reason, format string, args ...any) {
	if s.byReason == nil {
		s.byReason = map[string]int{}
		s.first = map[string]string{}
	}
	if s.byReason[reason] == 0 {
		s.first[reason] = fmt.Sprintf(format, args...)
	}
	s.byReason[reason]++
}

// add drops a sample.
func (s *skipReport) add(reason, format string, args ...any) {
	s.count++
	s.note(reason, format, args...)
}

// repair records a sample kept in a changed form.
func (s *skipReport) repair(reason, format string, args ...any) {
	s.repaired++
	s.note(reason, format, args...)
}

// cleanName makes s storable: DuckDB refuses invalid UTF-8 (which would fail
// the whole batch, and the queue would retry it forever), and NUL separates
// frames in the merge key.
func cleanName(s string) (string, bool) {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s, true
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD"), false
}

// sampleCount sums a sample's values, or says why it cannot be stored.
func sampleCount(s pprofile.Sample) (int64, string) {
	var n int64
	vs := s.Values()
	for i := 0; i < vs.Len(); i++ {
		v := vs.At(i)
		if v < 0 {
			return 0, reasonNegative
		}
		if n > math.MaxInt64-v {
			return 0, reasonOverflow
		}
		n += v
	}
	return n, ""
}

// stackEntry is one stack of a request, keyed once.
type stackEntry struct {
	done    bool
	fed     bool               // handed to the writer (StackFeed)
	dictKey framedict.StackKey // the frame list's identity, also in rows' merge key
	bad     string             // reason the stack cannot be stored
	detail  string
	repair  string // reason the stack was changed to be stored
}

// rowKey is what rows of a batch merge by: everything stored about them.
// The stack is its 128-bit key and the resource attributes a small
// number, so a sample costs one hash of a few words.
type rowKey struct {
	at, period int64
	resource   int32
	trace      pcommon.TraceID
	span       pcommon.SpanID
	stack      framedict.StackKey
}

// convertBuffers are one request's working memory: the batch's rows, its
// merge index and the per-location and per-stack caches. A request of
// 5,000 samples needs about 2 MB of them; push takes them from
// buffersPool and gives them back once the batch is written, so a busy
// gateway does not allocate (and collect) them per request.
type convertBuffers struct {
	frames []resolvedFrame
	stacks []stackEntry
	index  map[rowKey]int
	rows   []writer.StackRow
}

var buffersPool = sync.Pool{New: func() any { return new(convertBuffers) }}

// reset empties b for the next request, dropping its references to the
// last request's strings.
func (b *convertBuffers) reset() {
	clear(b.frames)
	clear(b.stacks)
	clear(b.index)
	clear(b.rows)
	b.frames, b.stacks, b.rows = b.frames[:0], b.stacks[:0], b.rows[:0]
}

// grow returns s with length n and zero elements, reusing its array.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// convert builds the batch in buffers of its own.
func (c converter) convert(pd pprofile.Profiles) (*writer.Batch, skipReport) {
	return c.convertWith(pd, new(convertBuffers), nil)
}

// convertWith builds the batch in buf, which it uses until buf.reset.
// Identical stacks (same time or bucket, service, pod, build, trace, span,
// sampling period) are merged so each is one row. Each stack a row holds
// is handed to feed (when not nil) as the first row holding it is made.
func (c converter) convertWith(pd pprofile.Profiles, buf *convertBuffers, feed *writer.StackFeed) (*writer.Batch, skipReport) {
	var skip skipReport
	dict := pd.Dictionary()
	locs := dict.LocationTable()
	stacks := dict.StackTable()
	links := dict.LinkTable()
	// Frames by location index, resolved and hashed once per request.
	buf.frames = grow(buf.frames, locs.Len())
	frameCache := buf.frames
	// Stacks by stack index, keyed once per request: processes share
	// stacks through the dictionary. Frames are merged by name, so stacks
	// that differ only in addresses within the same functions become one
	// row. A stack's frame list is only built if the writer asks for it
	// (Resolve): for the stacks new to the file.
	buf.stacks = grow(buf.stacks, stacks.Len())
	stackCache := buf.stacks

	batch := &writer.Batch{Resolve: func(sx int32) ([]string, []writer.FrameMeta) {
		return stackFrames(stacks.At(int(sx)), frameCache)
	}}
	if feed != nil {
		// The writer names a fed stack's frames from frameCache while
		// this goroutine goes on: a stack is fed once its frames are
		// resolved, and a resolved frame is never written again.
		feed.Resolve = batch.Resolve
	}
	type resourceKey struct{ service, pod, build, container, uid string }
	resources := map[resourceKey]int32{}
	n := sampleCapacity(dict, pd)
	if buf.index == nil {
		buf.index = make(map[rowKey]int, n)
	}
	index := buf.index
	if cap(buf.rows) < n {
		buf.rows = make([]writer.StackRow, 0, n)
	}
	batch.Rows = buf.rows[:0]

	now := c.now()
	rps := pd.ResourceProfiles()
	for ri := 0; ri < rps.Len(); ri++ {
		rp := rps.At(ri)
		res := rp.Resource()
		service, okService := cleanName(profileschema.ServiceName(res))
		pod := ""
		if c.tier == schema.Summary {
			pod = profileschema.PodName(res)
		}
		pod, okPod := cleanName(pod)
		build, okBuild := cleanName(profileschema.BuildID(res))
		container, okContainer := cleanName(profileschema.ContainerID(res))
		podUID, okPodUID := cleanName(profileschema.PodUID(res))
		resourceRepaired := !okService || !okPod || !okBuild || !okContainer || !okPodUID
		rk := resourceKey{service, pod, build, container, podUID}
		resource, seen := resources[rk]
		if !seen {
			resource = int32(len(resources))
			resources[rk] = resource
		}
		var latest time.Time

		sps := rp.ScopeProfiles()
		for si := 0; si < sps.Len(); si++ {
			profiles := sps.At(si).Profiles()
			for pi := 0; pi < profiles.Len(); pi++ {
				p := profiles.At(pi)
				if !profileschema.IsSampleCount(dict, p) {
					continue // the cpu/nanoseconds twin is derived
				}
				// The period is stored with each row: nodes sample at
				// different frequencies, and CPU time is count × period.
				period, okPeriod := profileschema.PeriodNanos(dict, p)
				samples := p.Samples()
				for i := 0; i < samples.Len(); i++ {
					s := samples.At(i)
					count, bad := sampleCount(s)
					if bad != "" {
						skip.add(bad, "service %s: sample %d: values %v", service, i, s.Values().AsRaw())
						continue
					}
					if count == 0 {
						continue // nothing sampled
					}
					sx := s.StackIndex()
					if sx == 0 {
						skip.add(reasonNoStack, "service %s: sample has no stack (index 0)", service)
						continue
					}
					if sx < 0 || int(sx) >= stacks.Len() {
						skip.add(reasonBadStack, "service %s: stack index %d out of range (%d stacks)", service, sx, stacks.Len())
						continue
					}
					st := &stackCache[sx]
					if !st.done {
						st.done = true
						st.dictKey, st.bad, st.detail, st.repair = c.stackKey(dict, stacks.At(int(sx)), frameCache)
					}
					if st.bad != "" {
						skip.add(st.bad, "service %s: stack %d: %s", service, sx, st.detail)
						continue
					}
					var tid pcommon.TraceID
					var sid pcommon.SpanID
					if lx := s.LinkIndex(); lx != 0 {
						if lx < 0 || int(lx) >= links.Len() {
							skip.add(reasonBadLink, "service %s: link index %d out of range (%d links)", service, lx, links.Len())
							continue
						}
						l := links.At(int(lx))
						tid, sid = l.TraceID(), l.SpanID()
					}
					at, ok := c.sampleTime(profileschema.SampleTime(p, s), now)
					if !ok {
						skip.add(reasonTimeRange, "service %s: sample time %d ns since epoch (accepted: %s to %s after now)",
							service, uint64(profileschema.SampleTime(p, s)), profileschema.MinSampleTime.Format(time.DateOnly), profileschema.MaxFutureSkew)
						continue
					}
					// One repair per sample, the stack's first.
					if st.repair != "" {
						skip.repair(st.repair, "service %s: stack %d: %s", service, sx, st.detail)
					} else if resourceRepaired {
						skip.repair(reasonInvalidUTF8, "service %q: resource attributes", service)
					} else if !okPeriod {
						skip.repair(reasonBadPeriod, "service %s: period %d ns", service, p.Period())
					}
					if at.After(latest) {
						latest = at
					}

					key := rowKey{at.UnixNano(), period, resource, tid, sid, st.dictKey}
					if k, seen := index[key]; seen {
						row := &batch.Rows[k]
						if row.Count > math.MaxInt64-count {
							skip.repair(reasonCountClamped, "service %s: count %d + %d", service, row.Count, count)
							row.Count = math.MaxInt64
							continue
						}
						row.Count += count
						continue
					}
					var traceID, spanID string
					if !tid.IsEmpty() {
						traceID = hex.EncodeToString(tid[:])
					}
					if !sid.IsEmpty() {
						spanID = hex.EncodeToString(sid[:])
					}
					if !st.fed && feed != nil {
						st.fed = true
						feed.Add(sx, st.dictKey)
					}
					index[key] = len(batch.Rows)
					batch.Rows = append(batch.Rows, writer.StackRow{
						Time: at, ServiceID: service, PodName: pod, BuildID: build, ContainerID: container, PodUID: podUID,
						Stack: sx, Key: st.dictKey, Count: count, TraceID: traceID, SpanID: spanID, PeriodNanos: period,
					})
				}
			}
		}
		if bin, ok := c.binary(res, service, build, latest); ok {
			batch.Binaries = append(batch.Binaries, bin)
		}
	}
	buf.rows = batch.Rows
	return batch, skip
}

// resolvedFrame is one location's frame as stored: its cleaned name, its
// key for stack hashing, what it is, and whether its name was repaired.
type resolvedFrame struct {
	done     bool
	repaired bool
	name     string
	key      framedict.NameKey
	meta     writer.FrameMeta
}

// sampleCapacity is the number of samples of the request's sample-count
// profiles: the batch's rows and merge index are sized once.
func sampleCapacity(dict pprofile.ProfilesDictionary, pd pprofile.Profiles) int {
	n := 0
	rps := pd.ResourceProfiles()
	for ri := 0; ri < rps.Len(); ri++ {
		sps := rps.At(ri).ScopeProfiles()
		for si := 0; si < sps.Len(); si++ {
			profiles := sps.At(si).Profiles()
			for pi := 0; pi < profiles.Len(); pi++ {
				if p := profiles.At(pi); profileschema.IsSampleCount(dict, p) {
					n += p.Samples().Len()
				}
			}
		}
	}
	return n
}

// stackKey resolves a stack's frames (into cache, by location) and
// computes the key of its frame list as stackFrames names it, or says why
// it cannot be stored (bad, with detail). repair says why the stored
// frames differ from the input (cleaned names, a deep stack cut).
func (c converter) stackKey(dict pprofile.ProfilesDictionary, st pprofile.Stack, cache []resolvedFrame) (key framedict.StackKey, bad, detail, repair string) {
	locs := dict.LocationTable()
	li := st.LocationIndices()
	n := li.Len()
	if n == 0 {
		return key, reasonEmptyStack, "no location indices", ""
	}
	keep := keptFrames(n)
	if keep < n {
		repair, detail = reasonDeepStack, fmt.Sprintf("%d frames, kept the %d leaf-most", n, keep)
	}
	nLocs := locs.Len()
	badLocation := func(loc int32) (framedict.StackKey, string, string, string) {
		return framedict.StackKey{}, reasonBadLocation, fmt.Sprintf("location index %d out of range (%d locations)", loc, nLocs), ""
	}
	// The frames a deep stack drops are checked too; the kept ones as
	// they are hashed (one pass: this runs for every sample).
	for j := keep; j < n; j++ {
		if loc := li.At(j); loc < 0 || int(loc) >= nLocs {
			return badLocation(loc)
		}
	}
	var h framedict.StackHasher
	if keep < n {
		h.Add(truncatedKey)
	}
	for j := keep - 1; j >= 0; j-- {
		loc := li.At(j)
		if loc < 0 || int(loc) >= nLocs {
			return badLocation(loc)
		}
		f := &cache[loc]
		if !f.done {
			name, ok := cleanName(profileschema.FrameName(dict, locs.At(int(loc))))
			*f = resolvedFrame{done: true, repaired: !ok, name: name, key: framedict.NameKeyOf(name), meta: frameMeta(dict, locs.At(int(loc)))}
		}
		if f.repaired && repair == "" {
			repair, detail = reasonInvalidUTF8, fmt.Sprintf("frame %q", f.name)
		}
		h.Add(f.key)
	}
	return h.Sum(), "", detail, repair
}

// keptFrames is how many of a stack's n frames are stored, leaf-most
// first: all up to maxStackDepth, else room is left for the
// truncatedFrame root.
func keptFrames(n int) int {
	if n > maxStackDepth {
		return maxStackDepth - 1
	}
	return n
}

// truncatedKey is truncatedFrame's name key.
var truncatedKey = framedict.NameKeyOf(truncatedFrame)

// stackFrames names the frames of a stack stackKey accepted, root first
// (OTLP lists them leaf first), from its resolved frames.
func stackFrames(st pprofile.Stack, cache []resolvedFrame) ([]string, []writer.FrameMeta) {
	li := st.LocationIndices()
	n := li.Len()
	keep := keptFrames(n)
	stored := keep
	if keep < n {
		stored++
	}
	frames := make([]string, 0, stored)
	meta := make([]writer.FrameMeta, 0, stored)
	if keep < n {
		frames = append(frames, truncatedFrame)
		meta = append(meta, writer.FrameMeta{})
	}
	for j := keep - 1; j >= 0; j-- {
		f := &cache[li.At(j)]
		frames = append(frames, f.name)
		meta = append(meta, f.meta)
	}
	return frames, meta
}

// Longest frame type and source file stored. Types are short words
// (python, jit, cpython, hotspot, …) and paths end at PATH_MAX: a sender's
// longer strings would only cost every frame row their bytes.
const (
	maxFrameTypeLen = 32
	maxFrameFileLen = 4096
)

// frameMeta is what a location is and where its code lives, cleaned for
// storage (a type or file that is not valid UTF-8, or longer than any real
// one, is dropped: the name already carries the frame).
func frameMeta(dict pprofile.ProfilesDictionary, loc pprofile.Location) writer.FrameMeta {
	file, line := profileschema.FrameSource(dict, loc)
	m := writer.FrameMeta{Type: profileschema.FrameType(dict, loc), File: file, Line: line}
	if _, ok := cleanName(m.Type); !ok || len(m.Type) > maxFrameTypeLen {
		m.Type = ""
	}
	if _, ok := cleanName(m.File); !ok || len(m.File) > maxFrameFileLen {
		m.File = ""
	}
	return m
}

// sampleTime is the row time: the sample's own (local tier) or the start of
// its bucket (summary tier). A missing time means "now". ok is false for a
// time outside profileschema.SampleTimeAccepted.
func (c converter) sampleTime(ts pcommon.Timestamp, now time.Time) (time.Time, bool) {
	t := now
	if ts != 0 {
		if !profileschema.SampleTimeAccepted(uint64(ts), now) {
			return time.Time{}, false
		}
		t = ts.AsTime()
	}
	t = t.UTC()
	if c.tier == schema.Summary {
		return t.Truncate(c.bucket), true
	}
	return t, true
}

// binary is the metadata row a resource carries (set by the buildid
// processor), if it names a build ID.
func (c converter) binary(res pcommon.Resource, service, build string, seen time.Time) (writer.Binary, bool) {
	if build == "" {
		return writer.Binary{}, false
	}
	attrs := res.Attributes()
	b := writer.Binary{BuildID: build, ServiceID: service, Seen: seen}
	if b.Seen.IsZero() {
		b.Seen = c.now().UTC()
	}
	if v, ok := attrs.Get(profileschema.AttrProcessExePath); ok {
		b.Path, _ = cleanName(v.Str())
	}
	if v, ok := attrs.Get(profileschema.AttrBinaryHasDebugInfo); ok {
		b.HasDebugInfo = v.Bool()
	}
	return b, true
}
