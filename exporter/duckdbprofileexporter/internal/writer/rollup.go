package writer

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

// rollState is how far the summary tier's roll-ups are complete: every
// bucket before hourly is in the hourly roll-up, every one before daily in
// the daily roll-up (zero: not started).
type rollState struct {
	hourly, daily time.Time
}

// rollKey is one roll-up row being built from late rows.
type rollKey struct {
	at     time.Time
	series int32
	stack  int32
	period int64
}

// rollUp keeps the roll-ups exact in the batch's transaction. Rows older
// than a roll-up's progress (late minutes) are added to it directly; hours
// and days that closed (the newest bucket is past them) are summed from the
// finer tier. It returns the new progress, applied after COMMIT.
func (w *Writer) rollUp(ctx context.Context, dc driver.Conn, c rawConn, rows []StackRow, series, ids []int32, newest time.Time) (rollState, error) {
	st := w.rolled
	late := []struct {
		table string
		until time.Time
		width time.Duration
	}{{w.tb.Hourly, st.hourly, time.Hour}, {w.tb.Daily, st.daily, 24 * time.Hour}}
	for _, l := range late {
		if l.until.IsZero() {
			continue
		}
		sums := map[rollKey]int64{}
		var order []rollKey
		for i := range rows {
			r := &rows[i]
			if !r.Time.Before(l.until) {
				continue
			}
			k := rollKey{r.Time.UTC().Truncate(l.width), series[i], ids[i], r.PeriodNanos}
			if _, ok := sums[k]; !ok {
				order = append(order, k)
			}
			sums[k] += int64(clampCount(r.Count))
		}
		if len(order) == 0 {
			continue
		}
		err := appendAll(dc, l.table, len(order), func(a *duckdb.Appender, i int) error {
			k := order[i]
			return a.AppendRow(k.at, k.series, k.stack, sums[k], nullablePeriod(k.period))
		})
		if err != nil {
			return st, fmt.Errorf("late rows: %w", err)
		}
	}
	if w.catchingUp {
		// The backlog is closed a day per transaction in the background
		// (catchUpInBackground); closing it here would sum all of it in
		// this batch's transaction.
		return st, nil
	}
	return w.closeRollups(ctx, c, st, newest)
}

// closeRollups sums the hours and days before newest's hour and day that
// the roll-ups do not hold yet, and records the progress (table and the
// constant macros samples_in reads).
func (w *Writer) closeRollups(ctx context.Context, c rawConn, st rollState, newest time.Time) (rollState, error) {
	changed := false
	// The daily roll-up's rows are ordered by service and stack within a
	// day (the series dictionary says each row's service): a service's
	// rows then share row groups, and the long-range queries, which read
	// one service's days, scan half as much (measured on 30 days of 10
	// services). The hourly roll-up's are ordered by stack
	// within an hour, which DuckDB's delta bit-packing stores in a few
	// bits per stack_id (see rowOrder): the storage bench's hourly table
	// 10.76 -> 6.83 MB a day; an hour of a service's rows is too few to
	// fill row groups of its own, so ordering by service first saves less
	// (9.45 MB) and prunes nothing.
	steps := []struct {
		name, from, to, unit, order string
		done                        *time.Time
		end                         time.Time
	}{
		{"hourly", w.tb.Samples, w.tb.Hourly, "hour", "bucket, r.stack_id", &st.hourly, newest.UTC().Truncate(time.Hour)},
		{"daily", w.tb.Hourly, w.tb.Daily, "day", "bucket, s.service_id, r.stack_id", &st.daily, newest.UTC().Truncate(24 * time.Hour)},
	}
	for _, s := range steps {
		if !s.end.After(*s.done) {
			continue
		}
		lower := ""
		args := []driver.Value{s.end}
		if !s.done.IsZero() {
			lower = " AND r.bucket_time >= $2"
			args = append(args, *s.done)
		}
		q := fmt.Sprintf(`INSERT INTO %s
SELECT date_trunc('%s', r.bucket_time) AS bucket, r.series_id, r.stack_id, sum(r.sample_count), r.sample_period_ns
FROM %s r JOIN %s s ON s.series_id = r.series_id
WHERE r.bucket_time < $1%s GROUP BY bucket, r.series_id, r.stack_id, r.sample_period_ns, s.service_id ORDER BY %s`, s.to, s.unit, s.from, w.tb.Series, lower, s.order)
		if _, err := c.ExecContext(ctx, q, named(args...)); err != nil {
			return st, fmt.Errorf("roll up %s: %w", s.name, err)
		}
		if _, err := c.ExecContext(ctx, "INSERT OR REPLACE INTO "+w.tb.Rollups+" VALUES ($1, $2)", named(s.name, s.end)); err != nil {
			return st, fmt.Errorf("record %s roll-up: %w", s.name, err)
		}
		*s.done = s.end
		changed = true
	}
	if changed {
		for _, m := range schema.RollupMacros(st.hourly, st.daily) {
			if _, err := c.ExecContext(ctx, m, nil); err != nil {
				return st, fmt.Errorf("record roll-up progress: %w", err)
			}
		}
	}
	return st, nil
}

// catchUpTarget says how far the next catch-up step closes the roll-ups:
// the hours and days that closed before the file was opened (a migrated
// file, or a gateway stopped for a while), a day of them per transaction,
// so a month of minutes never has to fit in DuckDB's memory at once. The
// newest stored bucket says what is closed; last: the step reaches it
// (none: no samples at all). w.mu is held.
func (w *Writer) catchUpTarget(ctx context.Context) (target time.Time, last, none bool, err error) {
	var oldest, newest sql.NullTime
	if err := w.conn.QueryRowContext(ctx, "SELECT min(bucket_time), max(bucket_time) FROM "+w.tb.Samples).Scan(&oldest, &newest); err != nil {
		return time.Time{}, false, false, fmt.Errorf("catch up roll-ups: %w", err)
	}
	if !newest.Valid {
		return time.Time{}, true, true, nil
	}
	from := w.rolled.hourly
	if from.IsZero() {
		from = oldest.Time.UTC()
	}
	target = from.Truncate(24 * time.Hour).Add(24 * time.Hour)
	if last = !target.Before(newest.Time); last {
		target = newest.Time.UTC()
	}
	return target, last, false, nil
}

// catchUpStep closes one day of the roll-ups' backlog (catchUpTarget) and
// reports whether they are complete up to the newest bucket. w.mu is held.
func (w *Writer) catchUpStep(ctx context.Context) (done bool, err error) {
	if err := cmp.Or(w.discard, w.broken); err != nil {
		// Nothing is committed to an instance that is to be closed; the
		// next write opens the file again, with a catch-up of its own.
		return false, fmt.Errorf("waiting for the file to be opened again after: %w", err)
	}
	target, last, none, err := w.catchUpTarget(ctx)
	if err != nil || none {
		return none, err
	}
	return last, w.catchUpTo(ctx, target)
}

// catchUpTo closes the roll-ups up to target in a transaction of its own.
func (w *Writer) catchUpTo(ctx context.Context, target time.Time) error {
	if err := w.closeInTx(ctx, target); err != nil {
		return fmt.Errorf("catch up roll-ups to %s: %w", target, err)
	}
	return nil
}

// catchUpRetry is how long the background catch-up waits after a failed
// step (DuckDB out of memory while queries run, a full disk) before trying
// again.
const catchUpRetry = 30 * time.Second

// beforeCatchUpStep runs before each background catch-up step; tests
// pause the catch-up with it to look at a file halfway.
var beforeCatchUpStep = func() {}

// catchUpInBackground closes the roll-ups' backlog a day at a time, taking
// the writer's lock for one day only, so batches are stored and queries
// answered meanwhile: samples_in reads the minutes past the roll-ups'
// progress, so every answer stays exact; retention keeps minutes the
// roll-ups do not hold yet. It ends when the backlog is closed or stop,
// the open file's channel, is closed (closeLocked, under w.mu).
func (w *Writer) catchUpInBackground(stop <-chan struct{}) {
	defer w.catchUpWG.Done()
	ctx := context.Background()
	began := time.Now()
	report := w.catchUpReport
	if report == nil {
		report = func(time.Duration, error) {}
	}
	for {
		select {
		case <-stop:
			return
		default:
		}
		beforeCatchUpStep()
		w.mu.Lock()
		select {
		case <-stop:
			// The file was closed while this step waited for the lock.
			w.mu.Unlock()
			return
		default:
		}
		done, err := w.catchUpStep(ctx)
		if done {
			w.catchingUp = false
		}
		if err != nil {
			w.catchUpErr = err
		}
		w.mu.Unlock()
		if done {
			report(time.Since(began), nil)
			return
		}
		if err != nil {
			report(time.Since(began), err)
			select {
			case <-stop:
				return
			case <-time.After(catchUpRetry):
			}
		}
	}
}

// CatchingUp reports whether the roll-ups' backlog is still being closed
// in the background, and the last error a step of it met.
func (w *Writer) CatchingUp() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.catchingUp, w.catchUpErr
}

// RolledUp is how far the summary tier's roll-ups are complete: every
// bucket before hourly is in the hourly roll-up, before daily in the daily
// one (zero: nothing yet, and always for the local tier).
func (w *Writer) RolledUp() (hourly, daily time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rolled.hourly, w.rolled.daily
}

// closeInTx runs closeRollups up to newest in a transaction of its own.
func (w *Writer) closeInTx(ctx context.Context, newest time.Time) error {
	return w.conn.Raw(func(dcAny any) error {
		c, ok := dcAny.(rawConn)
		if !ok {
			return fmt.Errorf("driver connection %T cannot exec", dcAny)
		}
		if _, err := c.ExecContext(ctx, "BEGIN TRANSACTION", nil); err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		st, err := w.closeRollups(ctx, c, w.rolled, newest)
		if err == nil {
			if _, err = c.ExecContext(ctx, "COMMIT", nil); w.discardAfter(err) {
				return fmt.Errorf("commit: %w", err)
			}
		}
		if err != nil {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
			return err
		}
		w.rolled = st
		return nil
	})
}
