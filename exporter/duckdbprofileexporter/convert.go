package duckdbprofileexporter

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

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

// skipReport says how many samples were dropped as malformed, and why the
// first one was.
type skipReport struct {
	count int
	first string
}

func (s *skipReport) add(format string, args ...any) {
	if s.count == 0 {
		s.first = fmt.Sprintf(format, args...)
	}
	s.count++
}

// convert builds the batch. Identical stacks (same time or bucket, service,
// pod, build, trace, span) are merged so each is one row.
func (c converter) convert(pd pprofile.Profiles) (*writer.Batch, skipReport) {
	var skip skipReport
	dict := pd.Dictionary()
	locs := dict.LocationTable()
	stacks := dict.StackTable()
	links := dict.LinkTable()
	// Frame names by location index, resolved once per request.
	names := make([]string, locs.Len())
	resolved := make([]bool, locs.Len())
	// Stacks by stack index, resolved once per request: processes share
	// stacks through the dictionary. Frames are merged by name, so stacks
	// that differ only in addresses within the same functions become one row.
	stackCache := make([]struct {
		done   bool
		frames []string // root first; shared by rows, never modified
		key    string
		bad    string
	}, stacks.Len())

	batch := &writer.Batch{}
	index := make(map[string]int)
	var key strings.Builder

	rps := pd.ResourceProfiles()
	for ri := 0; ri < rps.Len(); ri++ {
		rp := rps.At(ri)
		res := rp.Resource()
		service := profileschema.ServiceName(res)
		pod := ""
		if c.tier == schema.Summary {
			pod = profileschema.PodName(res)
		}
		build := profileschema.BuildID(res)
		var latest time.Time

		sps := rp.ScopeProfiles()
		for si := 0; si < sps.Len(); si++ {
			profiles := sps.At(si).Profiles()
			for pi := 0; pi < profiles.Len(); pi++ {
				p := profiles.At(pi)
				if !profileschema.IsSampleCount(dict, p) {
					continue // the cpu/nanoseconds twin is derived
				}
				samples := p.Samples()
				for i := 0; i < samples.Len(); i++ {
					s := samples.At(i)
					count := profileschema.SampleCount(s)
					if count <= 0 {
						continue
					}
					sx := s.StackIndex()
					if sx == 0 {
						skip.add("service %s: sample has no stack (index 0)", service)
						continue
					}
					if sx < 0 || int(sx) >= stacks.Len() {
						skip.add("service %s: stack index %d out of range (%d stacks)", service, sx, stacks.Len())
						continue
					}
					st := &stackCache[sx]
					if !st.done {
						st.done = true
						st.frames, st.bad = c.stackFrames(dict, stacks.At(int(sx)), names, resolved)
						st.key = strings.Join(st.frames, "\x00")
					}
					if st.bad != "" {
						skip.add("service %s: %s", service, st.bad)
						continue
					}
					frames := st.frames
					var traceID, spanID string
					if lx := s.LinkIndex(); lx != 0 {
						if lx < 0 || int(lx) >= links.Len() {
							skip.add("service %s: link index %d out of range (%d links)", service, lx, links.Len())
							continue
						}
						l := links.At(int(lx))
						if tid := l.TraceID(); !tid.IsEmpty() {
							traceID = hex.EncodeToString(tid[:])
						}
						if sid := l.SpanID(); !sid.IsEmpty() {
							spanID = hex.EncodeToString(sid[:])
						}
					}
					at := c.sampleTime(profileschema.SampleTime(p, s))
					if at.After(latest) {
						latest = at
					}

					key.Reset()
					key.Write(strconv.AppendInt(nil, at.UnixNano(), 10))
					for _, part := range [...]string{service, pod, build, traceID, spanID, st.key} {
						key.WriteByte(0)
						key.WriteString(part)
					}
					if k, seen := index[key.String()]; seen {
						batch.Rows[k].Count += count
						continue
					}
					index[key.String()] = len(batch.Rows)
					batch.Rows = append(batch.Rows, writer.StackRow{
						Time: at, ServiceID: service, PodName: pod, BuildID: build,
						Frames: frames, Count: count, TraceID: traceID, SpanID: spanID,
					})
				}
			}
		}
		if bin, ok := c.binary(res, service, build, latest); ok {
			batch.Binaries = append(batch.Binaries, bin)
		}
	}
	return batch, skip
}

// stackFrames names a stack's frames root first (OTLP lists them leaf
// first), or says why it cannot.
func (c converter) stackFrames(dict pprofile.ProfilesDictionary, st pprofile.Stack, names []string, resolved []bool) ([]string, string) {
	locs := dict.LocationTable()
	li := st.LocationIndices()
	n := li.Len()
	if n == 0 {
		return nil, "stack has no frames"
	}
	frames := make([]string, n)
	for j := 0; j < n; j++ {
		loc := li.At(j)
		if loc < 0 || int(loc) >= locs.Len() {
			return nil, fmt.Sprintf("location index %d out of range (%d locations)", loc, locs.Len())
		}
		if !resolved[loc] {
			names[loc] = profileschema.FrameName(dict, locs.At(int(loc)))
			resolved[loc] = true
		}
		frames[n-1-j] = names[loc]
	}
	return frames, ""
}

// sampleTime is the row time: the sample's own (local tier) or the start of
// its bucket (summary tier). A missing time means "now".
func (c converter) sampleTime(ts pcommon.Timestamp) time.Time {
	t := ts.AsTime()
	if ts == 0 {
		t = c.now()
	}
	t = t.UTC()
	if c.tier == schema.Summary {
		return t.Truncate(c.bucket)
	}
	return t
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
		b.Path = v.Str()
	}
	if v, ok := attrs.Get(profileschema.AttrBinaryHasDebugInfo); ok {
		b.HasDebugInfo = v.Bool()
	}
	return b, true
}
