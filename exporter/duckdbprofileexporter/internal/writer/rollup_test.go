package writer

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

// TestRollupBacklogClosedInBackground: a gateway file whose roll-ups are
// days behind its minutes (as after an upgrade, or a long stop) opens at
// once; the backlog is closed a day at a time in the background while
// batches are stored and samples_in answers every range exactly; at the
// end the roll-ups hold the minutes' totals per hour and day.
func TestRollupBacklogClosedInBackground(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "summary.duckdb")
	tb := schema.TablesFor(schema.Summary)
	// Five days of minutes, every 40 minutes, two stacks.
	w := open(t, path, schema.Summary)
	var rows []StackRow
	start := t0.Add(-5 * 24 * time.Hour)
	end := t0.Add(-3 * time.Hour)
	for at, i := start, int64(0); at.Before(end); at, i = at.Add(40*time.Minute), i+1 {
		rows = append(rows,
			StackRow{Time: at, ServiceID: "api", PodName: "p", BuildID: "b", Frames: []string{"main", "parse"}, Count: i%5 + 1},
			StackRow{Time: at, ServiceID: "api", PodName: "p", BuildID: "b", Frames: []string{"main", "gc"}, Count: 2})
	}
	if err := w.Write(ctx, &Batch{Rows: rows}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// The roll-ups forgotten: a file whose minutes were never rolled up.
	rawExec(t, path, append([]string{"DELETE FROM " + tb.Hourly, "DELETE FROM " + tb.Daily, "DELETE FROM " + tb.Rollups},
		schema.RollupMacros(time.Time{}, time.Time{})...)...)

	steps := make(chan struct{})
	beforeCatchUpStep = func() { <-steps }
	defer func() { beforeCatchUpStep = func() {} }()
	w = open(t, path, schema.Summary)
	defer func() {
		close(steps) // let a paused step see the file closed
		w.Close()
	}()
	if busy, _ := w.CatchingUp(); !busy {
		t.Fatal("a five-day backlog was closed inside Open")
	}
	if h, d := w.RolledUp(); !h.IsZero() || !d.IsZero() {
		t.Fatalf("roll-ups at %s / %s before any step", h, d)
	}

	ts := func(t time.Time) string { return "TIMESTAMP '" + t.Format(time.DateTime) + "'" }
	one := func(q string) string { return strings.Join(queryStrings(t, w.DB(), q), "") }
	ranges := [][2]time.Time{
		{start, t0},
		{start.Add(24 * time.Hour), start.Add(48 * time.Hour)},               // a whole day
		{start.Add(26*time.Hour + 7*time.Minute), start.Add(75 * time.Hour)}, // unaligned
	}
	exact := func(when string) {
		t.Helper()
		for _, r := range ranges {
			want := one(fmt.Sprintf("SELECT sum(sample_count) FROM %s WHERE bucket_time >= %s AND bucket_time < %s", tb.Samples, ts(r[0]), ts(r[1])))
			if got := one(fmt.Sprintf("SELECT sum(sample_count) FROM samples_in('api', %s, %s)", ts(r[0]), ts(r[1]))); got != want {
				t.Errorf("%s: samples_in %s..%s = %s, the minutes hold %s", when, r[0], r[1], got, want)
			}
		}
	}
	exact("before the catch-up")
	// Two days closed; a batch stored meanwhile (a minute of the newest
	// hour, and a late one in a day not rolled up yet).
	steps <- struct{}{}
	steps <- struct{}{}
	if err := w.Write(ctx, &Batch{Rows: []StackRow{
		{Time: end.Add(10 * time.Minute), ServiceID: "api", PodName: "p", BuildID: "b", Frames: []string{"main", "parse"}, Count: 5},
		{Time: start.Add(80 * time.Hour), ServiceID: "api", PodName: "p", BuildID: "b", Frames: []string{"main", "late"}, Count: 9},
	}}); err != nil {
		t.Fatal(err)
	}
	h, d := w.RolledUp()
	if h.IsZero() || !h.Before(end) || !d.Before(h.Add(time.Nanosecond)) {
		t.Fatalf("after two steps: roll-ups at %s / %s, want partway", h, d)
	}
	exact(fmt.Sprintf("halfway (hourly until %s)", h))
	// The rest, with no further batch.
	deadline := time.Now().Add(30 * time.Second)
	for busy := true; busy; busy, _ = w.CatchingUp() {
		select {
		case steps <- struct{}{}:
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("catch-up did not finish")
		}
	}
	if _, err := w.CatchingUp(); err != nil {
		t.Fatalf("catch-up: %v", err)
	}
	newest := end.Add(10 * time.Minute).Truncate(time.Hour)
	if h, d := w.RolledUp(); !h.Equal(newest) || !d.Equal(newest.Truncate(24*time.Hour)) {
		t.Fatalf("roll-ups at %s / %s, want %s / %s", h, d, newest, newest.Truncate(24*time.Hour))
	}
	exact("after the catch-up")
	for _, c := range []struct{ table, unit string }{{tb.Hourly, "hour"}, {tb.Daily, "day"}} {
		rolled := queryStrings(t, w.DB(), fmt.Sprintf("SELECT bucket_time, stack_id, sum(sample_count) FROM %s GROUP BY ALL ORDER BY ALL", c.table))
		limit := newest
		if c.unit == "day" {
			limit = newest.Truncate(24 * time.Hour)
		}
		minutes := queryStrings(t, w.DB(), fmt.Sprintf("SELECT date_trunc('%s', bucket_time), stack_id, sum(sample_count) FROM %s WHERE bucket_time < %s GROUP BY ALL ORDER BY ALL", c.unit, tb.Samples, ts(limit)))
		if len(minutes) == 0 || strings.Join(rolled, "\n") != strings.Join(minutes, "\n") {
			t.Errorf("%s roll-up: %d rows, the minutes make %d:\n%v\nvs\n%v", c.unit, len(rolled), len(minutes), rolled[:min(4, len(rolled))], minutes[:min(4, len(minutes))])
		}
	}
}
