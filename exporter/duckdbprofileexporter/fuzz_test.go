package duckdbprofileexporter

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/framedict"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
	"github.com/hotpath-dev/hotpath/internal/hostileotlp"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var updateSeeds = flag.Bool("update-seeds", false, "rewrite the committed fuzz seeds from internal/hostileotlp")

// The committed seeds under testdata/fuzz/FuzzConvert are the hostile cases.
func TestFuzzSeeds(t *testing.T) {
	if err := hostileotlp.SyncCorpus("testdata/fuzz/FuzzConvert", *updateSeeds); err != nil {
		t.Fatal(err)
	}
}

// checkBatch asserts what storage relies on, whatever the input: every
// string is valid UTF-8 without NUL, counts are positive, stacks are
// non-empty and bounded, times are in the accepted range.
func checkBatch(t *testing.T, c converter, pd pprofile.Profiles) (int64, skipReport) {
	t.Helper()
	batch, skip := c.convert(pd)
	var good int64
	now := c.now()
	for _, r := range batch.Rows {
		frames, _ := batch.FramesOf(&r)
		if r.Key != framedict.KeyOf(frames) {
			t.Fatalf("row's key is not its frames' key: %q", frames)
		}
		for _, s := range append([]string{r.ServiceID, r.PodName, r.BuildID, r.TraceID, r.SpanID}, frames...) {
			if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("row carries an unstorable string %q", s)
			}
		}
		if r.Count <= 0 {
			t.Fatalf("row count %d", r.Count)
		}
		if len(frames) == 0 || len(frames) > maxStackDepth {
			t.Fatalf("row has %d frames", len(frames))
		}
		if r.Time.Before(profileschema.MinSampleTime.Add(-c.bucket)) || r.Time.After(now.Add(profileschema.MaxFutureSkew)) {
			t.Fatalf("row time %s outside the accepted range", r.Time)
		}
		if r.ServiceID == hostileotlp.GoodService {
			good += r.Count
		}
	}
	for _, b := range batch.Binaries {
		if !utf8.ValidString(b.Path) || !utf8.ValidString(b.BuildID) || !utf8.ValidString(b.ServiceID) {
			t.Fatalf("binary row carries invalid UTF-8: %+v", b)
		}
	}
	if skip.count < 0 || skip.repaired < 0 {
		t.Fatalf("report %+v", skip)
	}
	return good, skip
}

// FuzzConvert feeds arbitrary OTLP bytes to the exporter's conversion:
// whatever decodes converts without panicking into rows storage accepts.
// `go test` runs the committed seeds; `go test -fuzz FuzzConvert` explores.
func FuzzConvert(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(data)
		if err != nil {
			return
		}
		now := func() time.Time { return hostileotlp.CorpusTime.Add(time.Minute) }
		for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
			checkBatch(t, converter{tier: tier, bucket: time.Minute, now: now}, pd)
		}
	})
}

// Each hostile request, pushed through the real exporter into DuckDB: the
// push succeeds (a failed push would be retried forever), the good process
// is stored whole, and the hostile samples are dropped or repaired as listed,
// each counted.
func TestHostileInputKeepsGoodData(t *testing.T) {
	want := map[string]struct{ dropped, repaired int64 }{
		"stack-index-out-of-range":                   {3, 0},
		"location-index-out-of-range":                {3, 0},
		"function-string-mapping-index-out-of-range": {0, 0}, // stored under address names
		"link-and-attribute-index-out-of-range":      {1, 0},
		"sample-type-index-out-of-range":             {0, 0}, // not a samples/count profile: not stored
		"recursive-stack":                            {0, 0},
		"empty-stack":                                {2, 0},
		"deep-stack":                                 {0, 1},
		"invalid-utf8":                               {0, 2},
		"negative-and-overflowing-values":            {2, 1},
		"missing-resource-attributes":                {0, 0},
		"time-far-past":                              {2, 0},
		"time-far-future":                            {2, 0},
		"timestamps-values-mismatch":                 {0, 0},
	}
	for _, c := range hostileotlp.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			w, ok := want[c.Name]
			if !ok {
				t.Fatalf("no expectation for case %s", c.Name)
			}
			for _, tier := range []string{"local", "summary"} {
				e := startExporter(t, testConfig(t, tier))
				at := time.Now().Add(-time.Second)
				if err := e.push(context.Background(), c.Build(at)); err != nil {
					t.Fatalf("%s: push: %v", tier, err)
				}
				table := "cpu_profile_samples_local"
				if tier == "summary" {
					table = "cpu_profile_summaries"
				}
				got := rowsOf(t, e.w.DB(), fmt.Sprintf(`SELECT coalesce(sum(sample_count), 0) FROM %s WHERE service_id = '%s'`, table, hostileotlp.GoodService))
				if len(got) != 1 || got[0] != fmt.Sprint(hostileotlp.GoodSamples) {
					t.Errorf("%s: good service stored %v samples, want %d", tier, got, hostileotlp.GoodSamples)
				}
				e.mu.Lock()
				dropped, repaired := e.skipped, e.repaired
				e.mu.Unlock()
				if dropped != w.dropped || repaired != w.repaired {
					t.Errorf("%s: dropped %d, repaired %d; want %d, %d", tier, dropped, repaired, w.dropped, w.repaired)
				}
			}
		})
	}
}

// push converts every request in buffers from buffersPool, used by the
// request before: each hostile request, converted in buffers that just
// held another (smaller or larger) one, gives the batch and report that
// fresh buffers give.
func TestConvertReusedBuffersGiveTheSameBatch(t *testing.T) {
	at := hostileotlp.CorpusTime
	c := converter{tier: schema.Summary, bucket: time.Minute, now: func() time.Time { return at.Add(time.Minute) }}
	describe := func(b *writer.Batch, skip skipReport) []string {
		var out []string
		for _, r := range b.Rows {
			frames, metas := b.FramesOf(&r)
			out = append(out, fmt.Sprintf("%s %q %q %q %q %q %d %q %q %d %v %q %v",
				r.Time, r.ServiceID, r.PodName, r.BuildID, r.ContainerID, r.PodUID, r.Count, r.TraceID, r.SpanID, r.PeriodNanos, r.Key, frames, metas))
		}
		for _, bin := range b.Binaries {
			out = append(out, fmt.Sprintf("binary %+v", bin))
		}
		return append(out, fmt.Sprintf("skipped %d repaired %d %v %v", skip.count, skip.repaired, skip.byReason, skip.first))
	}
	cases := hostileotlp.Cases()
	if len(cases) < 2 {
		t.Fatalf("%d hostile cases: the test needs requests of different shapes", len(cases))
	}
	buf := new(convertBuffers)
	// Twice round: the second pass meets buffers grown by every case.
	for pass := range 2 {
		for _, hc := range cases {
			pd := hc.Build(at)
			want := describe(c.convert(pd))
			got := describe(c.convertWith(pd, buf, nil))
			if !slices.Equal(got, want) {
				t.Fatalf("pass %d, %s: reused buffers give\n%s\nfresh ones\n%s", pass, hc.Name, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			buf.reset()
		}
	}
}
