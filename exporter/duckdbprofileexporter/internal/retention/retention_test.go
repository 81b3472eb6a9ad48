package retention

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

// openWriter opens a fresh file of tier for the test, closed at its end.
func openWriter(t *testing.T, tier schema.Tier) *writer.Writer {
	t.Helper()
	w, err := writer.Open(context.Background(), filepath.Join(t.TempDir(), "r.duckdb"), tier)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func folded(t *testing.T, w *writer.Writer, view string) string {
	t.Helper()
	rows, err := w.DB().Query("SELECT folded FROM " + view + " ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func TestApplyDeletesInChunksAndReleasesFrames(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t, schema.Local)
	// Ten old rows through "old_fn" (of a service that sends nothing
	// after), two recent ones through "main;recent".
	var rows []writer.StackRow
	for i := range 10 {
		rows = append(rows, writer.StackRow{Time: t0.Add(time.Duration(i) * time.Second), ServiceID: "gone", Frames: []string{"main", "old_fn"}, Count: 1})
	}
	rows = append(rows,
		writer.StackRow{Time: t0.Add(2 * time.Hour), ServiceID: "s", Frames: []string{"main", "recent"}, Count: 1},
		writer.StackRow{Time: t0.Add(2 * time.Hour), ServiceID: "s", Frames: []string{"main", "recent"}, Count: 3, TraceID: "0102030405060708090a0b0c0d0e0f10"})
	if err := w.Write(ctx, &writer.Batch{
		Rows: rows,
		Binaries: []writer.Binary{
			{BuildID: "old", ServiceID: "s", Path: "/old", Seen: t0.Add(-8 * 24 * time.Hour)},
			{BuildID: "new", ServiceID: "s", Path: "/new", Seen: t0},
		},
	}); err != nil {
		t.Fatal(err)
	}

	now := t0.Add(2*time.Hour + 30*time.Minute)
	res, err := Apply(ctx, w, Policy{Stacks: time.Hour, TraceStacks: 10 * time.Minute, Binaries: 7 * 24 * time.Hour, ChunkRows: 3}, now)
	if err != nil {
		t.Fatal(err)
	}
	if res.Stacks != 11 || res.Frames != 1 || res.Binaries != 1 || res.Series != 1 || !res.Swept {
		t.Fatalf("removed %+v, want 11 stacks (10 old + 1 traced), 1 frame, 1 binary, 1 series, swept", res)
	}
	if got := folded(t, w, "cpu_profile_samples_local_decoded"); got != "main;recent" {
		t.Fatalf("left: %q", got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
	// The removed frame and series are forgotten in memory too: writing
	// them again gets fresh dictionary rows, and the views decode them.
	if err := w.Write(ctx, &writer.Batch{Rows: []writer.StackRow{{Time: now, ServiceID: "gone", Frames: []string{"main", "old_fn"}, Count: 1}}}); err != nil {
		t.Fatal(err)
	}
	if got := folded(t, w, "cpu_profile_samples_local_decoded"); got != "main;old_fn,main;recent" {
		t.Fatalf("after rewrite: %q", got)
	}
	var services string
	if err := w.DB().QueryRow("SELECT string_agg(service_id || ':' || sample_count, ',' ORDER BY service_id) FROM stack_samples_local").Scan(&services); err != nil {
		t.Fatal(err)
	}
	if services != "gone:1,s:4" {
		t.Fatalf("rows by service after rewrite: %s", services)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}

// A run that deletes no rows does not look for unreferenced stacks (the
// search reads every row): a stack whose rows went some other way stays
// until a run that deletes rows, or one that owes a sweep, removes it.
func TestSweepOnlyAfterDeletes(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t, schema.Local)
	tb := schema.TablesFor(schema.Local)
	at := t0.Add(2 * time.Hour)
	if err := w.Write(ctx, &writer.Batch{Rows: []writer.StackRow{
		{Time: at, ServiceID: "s", Frames: []string{"main", "kept"}, Count: 1},
		{Time: at, ServiceID: "x", Frames: []string{"main", "orphan"}, Count: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	// The "x" row goes without retention: its stack is left unreferenced.
	if _, err := w.DB().Exec("DELETE FROM " + tb.Samples + " WHERE series_id = (SELECT series_id FROM " + tb.Series + " WHERE service_id = 'x')"); err != nil {
		t.Fatal(err)
	}
	stacks := func() int {
		var n int
		if err := w.DB().QueryRow("SELECT count(*) FROM " + tb.StackDict).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	p := Policy{Stacks: time.Hour}
	res, err := Apply(ctx, w, p, at.Add(30*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if res.Swept || res.Stacks != 0 || stacks() != 2 {
		t.Fatalf("nothing to delete: %+v, %d stacks stored; want no sweep and both stacks", res, stacks())
	}
	res, err = apply(ctx, w, p, at.Add(30*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Swept || res.StackIDs != 1 || stacks() != 1 {
		t.Fatalf("owed a sweep: %+v, %d stacks stored; want the orphan swept", res, stacks())
	}
	if got := folded(t, w, "cpu_profile_samples_local_decoded"); got != "main;kept" {
		t.Fatalf("left: %q", got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}

// TestBatchIDsOutliveTheirRows: a batch's id is forgotten only after its
// rows are deleted, so a resend (here, the same batch written again) is
// either dropped as a repeat or stored where no copy of it is left: never
// doubled. The exporter keeps ids an hour longer than its rows.
func TestBatchIDsOutliveTheirRows(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t, schema.Local)
	now := time.Now().UTC()
	// The batch's samples are 90 minutes old, older than the rows' hour.
	batch := func() *writer.Batch {
		return &writer.Batch{ID: "window-1", Rows: []writer.StackRow{{Time: now.Add(-90 * time.Minute), ServiceID: "s", Frames: []string{"main", "work"}, Count: 5}}}
	}
	samples := func() int64 {
		t.Helper()
		var n int64
		if err := w.DB().QueryRow("SELECT coalesce(sum(sample_count), 0) FROM stack_samples_local").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	ids := func() int64 {
		t.Helper()
		var n int64
		if err := w.DB().QueryRow("SELECT count(*) FROM " + schema.IngestedBatches).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := w.Write(ctx, batch()); err != nil {
		t.Fatal(err)
	}
	p := Policy{Stacks: time.Hour, BatchIDs: 2 * time.Hour}
	if _, err := Apply(ctx, w, p, now); err != nil {
		t.Fatal(err)
	}
	if n, k := samples(), ids(); n != 0 || k != 1 {
		t.Fatalf("after the rows' hour: %d samples, %d ids; want the rows gone and the id kept", n, k)
	}
	if err := w.Write(ctx, batch()); !errors.Is(err, writer.ErrDuplicate) {
		t.Fatalf("resend while the id is kept: %v, want ErrDuplicate", err)
	}
	// The id was stored three hours ago: past the ids' two hours.
	err := w.InTx(ctx, func(ctx context.Context, conn *sql.Conn) (func(writer.Dicts), error) {
		_, err := conn.ExecContext(ctx, "UPDATE "+schema.IngestedBatches+" SET stored_at = stored_at - INTERVAL 3 HOUR")
		return nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(ctx, w, p, now); err != nil {
		t.Fatal(err)
	}
	if k := ids(); k != 0 {
		t.Fatalf("%d ids left, want 0", k)
	}
	// A resend now is stored, once: its first copy is gone.
	if err := w.Write(ctx, batch()); err != nil {
		t.Fatal(err)
	}
	if n := samples(); n != 5 {
		t.Fatalf("after the late resend: %d samples, want 5 (one copy)", n)
	}
	if _, err := Apply(ctx, w, p, now); err != nil {
		t.Fatal(err)
	}
	if n := samples(); n != 0 {
		t.Fatalf("the late resend's rows outlived their hour: %d samples", n)
	}
}

func TestRunnerStopsPromptly(t *testing.T) {
	w := openWriter(t, schema.Summary)
	results := make(chan error, 10)
	r := Start(w, Policy{Stacks: time.Hour}, time.Hour, time.Now, func(_ Result, err error) { results <- err })
	if err := <-results; err != nil {
		t.Fatalf("first run: %v", err)
	}
	r.Stop()
}

// TestMinutesKeptUntilRolledUp: on the gateway, minutes past their age are
// deleted only once the hourly roll-up holds them, and hourly rows only
// once the daily one does (after an upgrade the roll-ups' catch-up may
// still be running when retention first runs).
func TestMinutesKeptUntilRolledUp(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t, schema.Summary)
	var rows []writer.StackRow
	for h := range 30 {
		rows = append(rows, writer.StackRow{Time: t0.Add(time.Duration(h) * time.Hour), ServiceID: "s", PodName: "p", Frames: []string{"main"}, Count: 1})
	}
	// A stack of the first day only: once its minutes and hours are
	// deleted, only the daily roll-up holds it, and the run's search for
	// unreferenced stacks must keep it.
	for h := range 24 {
		rows = append(rows, writer.StackRow{Time: t0.Add(time.Duration(h) * time.Hour), ServiceID: "s", PodName: "p", Frames: []string{"main", "first_day"}, Count: 1})
	}
	if err := w.Write(ctx, &writer.Batch{Rows: rows}); err != nil {
		t.Fatal(err)
	}
	hourly, daily := w.RolledUp()
	if !hourly.Equal(t0.Add(29*time.Hour)) || !daily.Equal(t0.Add(24*time.Hour)) {
		t.Fatalf("roll-ups at %s / %s", hourly, daily)
	}
	count := func(table string) int {
		var n int
		if err := w.DB().QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tb := schema.TablesFor(schema.Summary)
	// Everything is past a one-minute age, but the newest minute is not in
	// the hourly roll-up and the second day's hours are not in the daily.
	res, err := Apply(ctx, w, Policy{Stacks: time.Minute, Hourly: time.Minute, ChunkRows: 7}, t0.Add(100*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Swept || res.StackIDs != 0 {
		t.Errorf("%+v: want a search that removes no stack (the daily roll-up holds the first day's)", res)
	}
	if n := count(tb.Samples); n != 1 {
		t.Errorf("%d minute rows left, want the one the hourly roll-up does not hold", n)
	}
	if n := count(tb.Hourly); n != 5 {
		t.Errorf("%d hourly rows left, want the 5 of the day the daily roll-up does not hold", n)
	}
	var total int
	if err := w.DB().QueryRow("SELECT sum(sample_count) FROM samples_in('s', TIMESTAMP '2000-01-01', TIMESTAMP '2100-01-01')").Scan(&total); err != nil {
		t.Fatal(err)
	}
	if total != 54 {
		t.Errorf("samples_in over everything: %d, want all 54", total)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Summary); err != nil {
		t.Fatal(err)
	}
}

// A node that starts processes all day names new frames all day (an
// unsymbolized frame is named by its address, which differs from process
// to process). Frames retention removes give their IDs to new ones, so the
// highest frame ID, the length of the name list every query builds, stays
// at the most frames the file held at once: here 20 simulated hours of 50
// new frames an hour end at 101, not 1,001. A reader's snapshot taken
// before retention stays as it was while a batch reuses the IDs.
func TestFrameIDsReusedAfterRetention(t *testing.T) {
	ctx := context.Background()
	w := openWriter(t, schema.Local)
	tb := schema.TablesFor(schema.Local)
	one := func(q string) int64 {
		t.Helper()
		var n int64
		if err := w.DB().QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	const hours, perHour = 20, 50
	for h := range hours {
		at := t0.Add(time.Duration(h) * time.Hour)
		var rows []writer.StackRow
		for j := range perHour {
			rows = append(rows, writer.StackRow{Time: at, ServiceID: "s", Frames: []string{"main", fmt.Sprintf("0x%x", 0x7f0000000000+h*perHour+j)}, Count: 1})
		}
		if err := w.Write(ctx, &writer.Batch{Rows: rows}); err != nil {
			t.Fatalf("hour %d: %v", h, err)
		}
		var reader *sql.Conn
		var seen int64
		if h == hours/2 {
			var err error
			if reader, err = w.DB().Conn(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := reader.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
				t.Fatal(err)
			}
			if err := reader.QueryRowContext(ctx, "SELECT sum(frame_id) FROM "+tb.Frames).Scan(&seen); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Apply(ctx, w, Policy{Stacks: time.Hour}, at.Add(30*time.Minute)); err != nil {
			t.Fatalf("hour %d: retention: %v", h, err)
		}
		if reader != nil {
			// The next hour's batch reuses the IDs just freed while the
			// reader's transaction still sees their old frames.
			if err := w.Write(ctx, &writer.Batch{Rows: []writer.StackRow{{Time: at.Add(time.Minute), ServiceID: "s", Frames: []string{"main", "0x1"}, Count: 1}}}); err != nil {
				t.Fatalf("batch reusing an ID under an open reader: %v", err)
			}
			var again int64
			if err := reader.QueryRowContext(ctx, "SELECT sum(frame_id) FROM "+tb.Frames).Scan(&again); err != nil {
				t.Fatal(err)
			}
			if again != seen {
				t.Fatalf("reader's snapshot changed: sum of frame IDs %d, then %d", seen, again)
			}
			if _, err := reader.ExecContext(ctx, "COMMIT"); err != nil {
				t.Fatal(err)
			}
			reader.Close()
		}
	}
	if got := one("SELECT max(frame_id) FROM " + tb.Frames); got != 2*perHour+1 {
		t.Fatalf("highest frame ID %d after %d hours of %d new frames, want %d", got, hours, perHour, 2*perHour+1)
	}
	if got, want := one("SELECT count(*) FROM "+tb.Decoded+" WHERE folded LIKE 'main;0x%'"), int64(perHour); got != want {
		t.Fatalf("%d stacks of the last hour decode, want %d", got, want)
	}
	last := fmt.Sprintf("main;0x%x", 0x7f0000000000+(hours-1)*perHour)
	if got := one("SELECT count(*) FROM " + tb.Decoded + " WHERE folded = '" + last + "'"); got != 1 {
		t.Fatalf("the last hour's first stack %q decoded %d times, want 1", last, got)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}
