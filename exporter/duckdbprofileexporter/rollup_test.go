package duckdbprofileexporter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// TestRollupsAnswerRangesExactly writes a gateway's minutes over two days
// (and a minute that arrives after its hour closed), then checks that the
// hourly and daily roll-ups were written as hours and days closed, and that
// samples_in (and folded_stacks through it) answers aligned and unaligned
// ranges with the same total as a plain sum over the minutes. With the
// minutes of the closed hours deleted, as minute retention would, ranges of
// whole hours still answer in full: they are read from the roll-ups.
func TestRollupsAnswerRangesExactly(t *testing.T) {
	cfg := testConfig(t, "summary")
	keep := 100 * 365 * 24 * time.Hour
	cfg.Retention = RetentionConfig{Stacks: keep, TraceStacks: keep, Metadata: keep}
	e := startExporter(t, cfg)
	ctx := context.Background()
	// From 21:00 two days ago to now's hour minus one, every 20 minutes.
	end := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	start := end.Truncate(24 * time.Hour).Add(-27 * time.Hour)
	push := func(at time.Time, n int64) {
		t.Helper()
		b := newProfileBuilder()
		for p, pod := range []string{"api-1", "api-2"} {
			b.process(at, map[string]any{profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: pod, profileschema.AttrBuildID: "beef"})
			b.sample(n+int64(p), []string{"parse", "main"}, nil, nil)
			b.sample(1, []string{"gc", "main"}, traceA, spanA)
		}
		if err := e.push(ctx, b.pd); err != nil {
			t.Fatal(err)
		}
	}
	i := int64(0)
	for at := start; !at.After(end); at = at.Add(20 * time.Minute) {
		i++
		push(at, i%7+1)
	}
	late := start.Add(3*time.Hour + 5*time.Minute) // its hour closed long ago
	push(late, 100)

	db := e.w.DB()
	tb := schema.TablesFor(schema.Summary)
	hourly, daily, err := schema.Rollups(ctx, db, schema.Summary)
	if err != nil {
		t.Fatal(err)
	}
	if !hourly.Equal(end) || !daily.Equal(end.Truncate(24*time.Hour)) {
		t.Fatalf("roll-ups complete until %s (hourly), %s (daily); want %s, %s", hourly, daily, end, end.Truncate(24*time.Hour))
	}
	ts := func(t time.Time) string { return "TIMESTAMP '" + t.Format("2006-01-02 15:04:05.999999") + "'" }
	plain := func(lo, hi time.Time) string {
		return strings.Join(rowsOf(t, db, fmt.Sprintf("SELECT coalesce(sum(sample_count), 0) FROM %s WHERE service_id = 'api' AND bucket_time >= %s AND bucket_time < %s", tb.SamplesView, ts(lo), ts(hi))), "")
	}
	viaMacro := func(lo, hi time.Time) string {
		return strings.Join(rowsOf(t, db, fmt.Sprintf("SELECT coalesce(sum(sample_count), 0) FROM samples_in('api', %s, %s)", ts(lo), ts(hi))), "")
	}
	folded := func(lo, hi time.Time) string {
		return strings.Join(rowsOf(t, db, fmt.Sprintf("SELECT coalesce(sum(samples), 0) FROM folded_stacks('api', %s, %s)", ts(lo), ts(hi))), "")
	}
	ranges := [][2]time.Time{
		{start, end.Add(time.Minute)},                                                     // everything
		{start.Add(7 * time.Minute), end.Add(-13 * time.Minute)},                          // unaligned both ends
		{start.Add(3 * time.Hour), start.Add(4 * time.Hour)},                              // one whole hour (with the late minute)
		{start.Add(3*time.Hour + 10*time.Minute), start.Add(4 * time.Hour)},               // part of it
		{end.Truncate(24 * time.Hour).Add(-24 * time.Hour), end.Truncate(24 * time.Hour)}, // one whole day
		{end.Add(-30 * time.Minute), end.Add(time.Hour)},                                  // past the roll-ups
	}
	before := make([]string, len(ranges))
	for k, r := range ranges {
		want := plain(r[0], r[1])
		if got := viaMacro(r[0], r[1]); got != want {
			t.Errorf("samples_in %s..%s: %s samples, the minutes hold %s", r[0], r[1], got, want)
		}
		if got := folded(r[0], r[1]); got != want {
			t.Errorf("folded_stacks %s..%s: %s samples, the minutes hold %s", r[0], r[1], got, want)
		}
		before[k] = want
	}
	if before[2] == "0" || before[4] == "0" {
		t.Fatalf("empty ranges: %v", before)
	}
	// Every range between these points, empty and reversed ones too:
	// before the data, on and off hour and day boundaries, within one
	// hour, across midnight by less than a day, up to and past the
	// roll-ups' progress.
	midnight := end.Truncate(24 * time.Hour)
	points := []time.Time{
		start.Add(-90 * time.Minute), start, start.Add(7 * time.Minute), start.Add(time.Hour),
		start.Add(3*time.Hour + 10*time.Minute), start.Add(4 * time.Hour),
		midnight.Add(-24 * time.Hour), midnight.Add(-50 * time.Minute), midnight.Add(-time.Microsecond), midnight,
		midnight.Add(40 * time.Minute), midnight.Add(2 * time.Hour),
		end.Add(-30 * time.Minute), end, end.Add(time.Minute), end.Add(2 * time.Hour),
	}
	for _, lo := range points {
		for _, hi := range points {
			if got, want := viaMacro(lo, hi), plain(lo, hi); got != want {
				t.Errorf("samples_in %s..%s: %s samples, the minutes hold %s", lo.Format(time.DateTime+".000000"), hi.Format(time.DateTime+".000000"), got, want)
			}
		}
	}

	// Minutes of closed hours gone: whole hours and days still answer.
	if _, err := db.Exec(fmt.Sprintf("DELETE FROM %s WHERE bucket_time < %s", tb.Samples, ts(end))); err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{2, 4} {
		if got := viaMacro(ranges[k][0], ranges[k][1]); got != before[k] {
			t.Errorf("from the roll-ups, %s..%s: %s samples, want %s", ranges[k][0], ranges[k][1], got, before[k])
		}
	}
}
