package writer

import (
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
	at                  time.Time
	service, pod, build string
	container, podUID   string
	stack               int32
	period              int64
}

// rollUp keeps the roll-ups exact in the batch's transaction. Rows older
// than a roll-up's progress (late minutes) are added to it directly; hours
// and days that closed (the newest bucket is past them) are summed from the
// finer tier. It returns the new progress, applied after COMMIT.
func (w *Writer) rollUp(ctx context.Context, dc driver.Conn, c rawConn, rows []StackRow, ids []int32, newest time.Time) (rollState, error) {
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
			k := rollKey{r.Time.UTC().Truncate(l.width), r.ServiceID, r.PodName, r.BuildID, r.ContainerID, r.PodUID, ids[i], r.PeriodNanos}
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
			return a.AppendRow(k.at, k.service, k.pod, k.build, k.stack, sums[k], nullablePeriod(k.period), k.container, k.podUID)
		})
		if err != nil {
			return st, fmt.Errorf("late rows: %w", err)
		}
	}
	return w.closeRollups(ctx, c, st, newest)
}

// closeRollups sums the hours and days before newest's hour and day that
// the roll-ups do not hold yet, and records the progress (table and the
// constant macros samples_in reads).
func (w *Writer) closeRollups(ctx context.Context, c rawConn, st rollState, newest time.Time) (rollState, error) {
	changed := false
	// The daily roll-up's rows are ordered by service and stack within a
	// day: a service's rows then share row groups, and the long-range
	// queries, which read one service's days, scan half as much (measured
	// on 30 days of 10 services). The hourly roll-up stays in time order: a
	// catch-up sorts millions of rows a day for it.
	steps := []struct {
		name, from, to, unit, order string
		done                        *time.Time
		end                         time.Time
	}{
		{"hourly", w.tb.Samples, w.tb.Hourly, "hour", "bucket", &st.hourly, newest.UTC().Truncate(time.Hour)},
		{"daily", w.tb.Hourly, w.tb.Daily, "day", "bucket, service_id, stack_id", &st.daily, newest.UTC().Truncate(24 * time.Hour)},
	}
	for _, s := range steps {
		if !s.end.After(*s.done) {
			continue
		}
		lower := ""
		args := []driver.Value{s.end}
		if !s.done.IsZero() {
			lower = " AND bucket_time >= $2"
			args = append(args, *s.done)
		}
		q := fmt.Sprintf(`INSERT INTO %s
SELECT date_trunc('%s', bucket_time) AS bucket, service_id, pod_name, build_id, stack_id, sum(sample_count), sample_period_ns, %s
FROM %s WHERE bucket_time < $1%s GROUP BY ALL ORDER BY %s`, s.to, s.unit, schema.WorkloadColumns, s.from, lower, s.order)
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

// catchUpRollups rolls up the hours and days that closed before the file
// was opened (a migrated file, or a gateway stopped for a while): the
// newest stored bucket says what is closed. It goes a day per transaction,
// so a month of minutes never has to fit in DuckDB's memory at once.
func (w *Writer) catchUpRollups(ctx context.Context) error {
	if w.tier != schema.Summary {
		return nil
	}
	var oldest, newest sql.NullTime
	if err := w.conn.QueryRowContext(ctx, "SELECT min(bucket_time), max(bucket_time) FROM "+w.tb.Samples).Scan(&oldest, &newest); err != nil {
		return fmt.Errorf("catch up roll-ups: %w", err)
	}
	if !newest.Valid {
		return nil // no samples
	}
	from := w.rolled.hourly
	if from.IsZero() {
		from = oldest.Time.UTC()
	}
	for target := from.Truncate(24 * time.Hour).Add(24 * time.Hour); ; target = target.Add(24 * time.Hour) {
		last := !target.Before(newest.Time)
		if last {
			target = newest.Time.UTC()
		}
		if err := w.closeInTx(ctx, target); err != nil {
			return fmt.Errorf("catch up roll-ups to %s: %w", target, err)
		}
		if last {
			return nil
		}
	}
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
			_, err = c.ExecContext(ctx, "COMMIT", nil)
		}
		if err != nil {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), "ROLLBACK", nil)
			return err
		}
		w.rolled = st
		return nil
	})
}
