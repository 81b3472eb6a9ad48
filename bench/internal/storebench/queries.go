package storebench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotpath-dev/hotpath/bench/internal/filecopy"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/stacknames"
	"github.com/hotpath-dev/hotpath/internal/testport"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

const tsLayout = "2006-01-02 15:04:05"

func ts(t time.Time) string { return "TIMESTAMP '" + t.UTC().Format(tsLayout) + "'" }

// timeQueries runs the figures' queries: 1 h folded stacks on the local
// tier (a day stored), a trace lookup among a day of trace-tagged rows on
// both tiers, and 1 h and N-day folded stacks on a summary file holding N
// days of 10 services; and the same profiles as `hotpath profile` loads
// them (timeProfile).
func timeQueries(ctx context.Context, o Options, res *Result, localPath, summaryPath, service string) ([]Query, error) {
	end := o.End
	hourAgo := end.Add(-time.Hour)
	var qs []Query

	folded := func(since time.Time) string {
		return fmt.Sprintf("SELECT folded, samples FROM folded_stacks('%s', %s, %s)", service, ts(since), ts(end))
	}
	// The expected totals: a plain sum over the samples table.
	want := func(tb tierTables, since time.Time) string {
		return fmt.Sprintf("SELECT coalesce(sum(sample_count), 0) FROM %s WHERE service_id = '%s' AND %s >= %s AND %s < %s",
			tb.samples, service, tb.timeCol, ts(since), tb.timeCol, ts(end))
	}
	// What hotpath trace-profile runs: the trace table by trace ID (UUID),
	// summed per stack, each distinct stack decoded once.
	trace := func(tb tierTables) string {
		return fmt.Sprintf(`WITH agg AS (SELECT stack_id, sum(sample_count)::BIGINT AS samples FROM %s WHERE trace_id = '%s'::UUID GROUP BY stack_id),
dict AS (%s)
SELECT array_to_string(%s, ';') AS folded, samples
FROM agg JOIN %s s USING (stack_id), dict ORDER BY samples DESC`, tb.traces, o.Trace.TraceID, stacknames.DictSQL(tb.frames), stacknames.DecodeSQL("s.stack_frame_ids"), tb.stackDict)
	}

	run := []struct {
		name, file, sql, wantSQL string
		want                     int64
	}{
		{name: fmt.Sprintf("local 1h folded_stacks (%g h stored)", o.LocalSpan.Hours()), file: localPath, sql: folded(hourAgo), wantSQL: want(localTables, hourAgo)},
		{name: fmt.Sprintf("local trace lookup (%g h of trace-tagged rows)", o.LocalSpan.Hours()), file: localPath, sql: trace(localTables), want: o.Trace.Samples},
		{name: fmt.Sprintf("summary trace lookup (%g h of trace-tagged rows)", o.Span.Hours()), file: summaryPath, sql: trace(summaryTables), want: o.Trace.Samples},
	}
	for _, r := range run {
		q, err := timeQuery(ctx, r.file, r.name, r.sql, r.wantSQL, r.want, o.Runs)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
		o.Log("storage: query %q: %v ms, %d rows", q.Name, q.Millis, q.Rows)
	}
	q, err := timeProfile(ctx, localPath, fmt.Sprintf("cli: hotpath profile --local --since 1h (%g h stored)", o.LocalSpan.Hours()), "--local ", service, hourAgo, end, want(localTables, hourAgo), o.Runs)
	if err != nil {
		return nil, err
	}
	qs = append(qs, q)
	o.Log("storage: %q: %v ms, %d stacks", q.Name, q.Millis, q.Rows)
	if o.CLI != "" {
		q, err := timeCommand(ctx, o.CLI, fmt.Sprintf("cli: hotpath profile --local --since 1h (%g h stored), as a command", o.LocalSpan.Hours()),
			localPath, []string{"--local"}, service, hourAgo, end, want(localTables, hourAgo), o.Runs)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
		o.Log("storage: %q: %v ms, %d lines", q.Name, q.Millis, q.Rows)
	}

	// The long query needs N days: copy the written day and replicate it
	// N-1 times into the past. The rows are the exporter's own (same
	// layout, same time order).
	longPath := filepath.Join(o.Dir, fmt.Sprintf("summary-%dd.duckdb", o.Days))
	if err := filecopy.Copy(summaryPath, longPath, 0o666); err != nil {
		return nil, err
	}
	o.Log("storage: replicating the day into %d days for the long query", o.Days)
	if err := replicate(ctx, longPath, o.End.Add(-o.Span), o.Days, o.Log); err != nil {
		return nil, err
	}
	if st, err := os.Stat(longPath); err == nil {
		res.LongFile = st.Size()
	}
	daysAgo := end.Add(-time.Duration(o.Days) * 24 * time.Hour)
	// idsFirst is not a shipped macro: the same flame graph from the
	// minute rows alone (the shipped macro reads the roll-ups for whole
	// hours and days), aggregated on the integer stacks before decoding
	// names, as a reference for what the roll-ups save.
	idsFirst := fmt.Sprintf(`WITH agg AS (
  SELECT stack_id, sum(sample_count)::BIGINT AS samples FROM stack_summaries
  WHERE service_id = '%s' AND bucket_time >= %s AND bucket_time < %s GROUP BY stack_id),
dict AS (%s)
SELECT array_to_string(%s, ';') AS folded, samples
FROM agg JOIN profile_stack_dictionary s USING (stack_id), dict ORDER BY samples DESC`, service, ts(daysAgo), ts(end), stacknames.DictSQL("profile_frame_dictionary"), stacknames.DecodeSQL("s.stack_frame_ids"))
	wantLong := want(summaryTables, daysAgo)
	for _, r := range []struct {
		name, sql, want string
		runs            int
	}{
		{fmt.Sprintf("summary 1h folded_stacks (%d days stored)", o.Days), folded(hourAgo), want(summaryTables, hourAgo), o.Runs},
		{fmt.Sprintf("summary %dd folded_stacks (%d days stored)", o.Days, o.Days), folded(daysAgo), wantLong, o.LongRuns},
		{fmt.Sprintf("reference: summary %dd from the minute rows alone, no roll-ups (hand-written, ids first)", o.Days), idsFirst, wantLong, o.LongRuns},
	} {
		q, err := timeQuery(ctx, longPath, r.name, r.sql, r.want, 0, r.runs)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
		o.Log("storage: query %q: %v ms, %d rows", q.Name, q.Millis, q.Rows)
	}
	for _, r := range []struct {
		name  string
		since time.Time
		runs  int
	}{
		{fmt.Sprintf("cli: hotpath profile --since 1h (%d days stored)", o.Days), hourAgo, o.Runs},
		{fmt.Sprintf("cli: hotpath profile --since %dd (%d days stored)", o.Days, o.Days), daysAgo, o.LongRuns},
	} {
		q, err := timeProfile(ctx, longPath, r.name, "", service, r.since, end, want(summaryTables, r.since), r.runs)
		if err != nil {
			return nil, err
		}
		qs = append(qs, q)
		o.Log("storage: %q: %v ms, %d stacks", q.Name, q.Millis, q.Rows)
		if o.CLI != "" {
			q, err := timeCommand(ctx, o.CLI, r.name+", as a command", longPath, nil, service, r.since, end, want(summaryTables, r.since), r.runs)
			if err != nil {
				return nil, err
			}
			qs = append(qs, q)
			o.Log("storage: %q: %v ms, %d lines", q.Name, q.Millis, q.Rows)
		}
	}
	// The same loads through a running collector's endpoint, as
	// `hotpath profile` runs beside a gateway.
	eqs, err := timeProfileEndpoint(ctx, o.CLI, longPath, service, end, []endpointRange{
		{fmt.Sprintf("cli: hotpath profile --since 1h through a running collector (%d days stored)", o.Days), hourAgo, want(summaryTables, hourAgo), o.Runs},
		{fmt.Sprintf("cli: hotpath profile --since %dd through a running collector (%d days stored)", o.Days, o.Days), daysAgo, want(summaryTables, daysAgo), o.LongRuns},
	})
	if err != nil {
		return nil, err
	}
	for _, q := range eqs {
		qs = append(qs, q)
		o.Log("storage: %q: %v ms, %d stacks", q.Name, q.Millis, q.Rows)
	}
	// Last, as it deletes: the gateway's default retention on the N-day
	// file is what a gateway that ran N days keeps.
	steady, err := retained(ctx, "summary", summaryTables, longPath, time.Minute)
	if err != nil {
		return nil, err
	}
	steady.BytesPerSvcDay = float64(steady.UsedBytes) / float64(o.Host.Services) / float64(o.Days)
	o.Log("storage: %d-day file at the default retention: %.1f MB used, %.1f MB free, %.1f MB compacted, traces over %.1f days (retention took %.0f s)",
		o.Days, float64(steady.UsedBytes)/1e6, float64(steady.FreeBytes)/1e6, float64(steady.CompactBytes)/1e6, steady.TraceDays, steady.Seconds)
	res.Steady = steady
	return qs, nil
}

// retained starts the tier's exporter with its default retention on path,
// waits for the retention run that starts with it, and measures what the
// file then holds (bucket: the width of the tier's sample rows).
func retained(ctx context.Context, tier string, tb tierTables, path string, bucket time.Duration) (Steady, error) {
	var out Steady
	core, logs := observer.New(zap.DebugLevel)
	began := time.Now()
	exp, err := startExporterLogging(ctx, tier, path, core, true, "")
	if err != nil {
		return out, fmt.Errorf("retention on %s: %w", path, err)
	}
	for logs.FilterMessage("retention run done").Len() == 0 {
		if failed := logs.FilterMessage("retention cleanup failed; will retry next interval"); failed.Len() > 0 {
			_ = exp.Shutdown(ctx)
			return out, fmt.Errorf("retention on %s failed: %v", path, failed.All()[0].ContextMap())
		}
		if time.Since(began) > time.Hour {
			_ = exp.Shutdown(ctx)
			return out, fmt.Errorf("retention on %s: no run after an hour", path)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out.Seconds = time.Since(began).Seconds()
	if err := exp.Shutdown(ctx); err != nil {
		return out, fmt.Errorf("retention on %s: %w", path, err)
	}
	db, err := sql.Open("duckdb", path)
	if err != nil {
		return out, fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return out, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	var blockSize, used, free int64
	if err := db.QueryRowContext(ctx, "SELECT block_size, used_blocks, free_blocks FROM pragma_database_size()").Scan(&blockSize, &used, &free); err != nil {
		return out, fmt.Errorf("size of %s: %w", path, err)
	}
	out.UsedBytes, out.FreeBytes = used*blockSize, free*blockSize
	if out.CompactBytes, err = compactSize(ctx, db, path+".compact"); err != nil {
		return out, fmt.Errorf("compact copy of %s: %w", path, err)
	}
	var oldestTrace, newestTrace sql.NullTime
	var buckets int64
	q := fmt.Sprintf(`SELECT (SELECT count(*) FROM %[1]s), (SELECT count(DISTINCT %[3]s) FROM %[1]s), (SELECT count(*) FROM %[4]s),
  count(*), min(%[3]s), max(%[3]s) FROM %[2]s`, tb.sampleRows, tb.traceRows, tb.timeCol, tb.stackDict)
	if err := db.QueryRowContext(ctx, q).Scan(&out.Rows, &buckets, &out.Stacks, &out.TracedRows, &oldestTrace, &newestTrace); err != nil {
		return out, fmt.Errorf("count rows of %s: %w", path, err)
	}
	out.KeptHours = float64(buckets) * bucket.Hours()
	if oldestTrace.Valid {
		out.TraceDays = newestTrace.Time.Sub(oldestTrace.Time).Hours() / 24
	}
	if err := db.Close(); err != nil {
		return out, fmt.Errorf("close %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return out, fmt.Errorf("size of %s: %w", path, err)
	}
	out.FileBytes = st.Size()
	return out, nil
}

// slowQueryMillis is where a query is timed once instead of warm-up + runs.
const slowQueryMillis = 15000

// timeQuery opens file read-only, runs q once to warm caches, then times it
// runs times, reading every row. The expected sample total comes from
// wantSQL (a plain sum over the raw table) or want.
func timeQuery(ctx context.Context, file, name, q, wantSQL string, want int64, runs int) (Query, error) {
	out := Query{Name: name, SQL: q, File: file, Want: want}
	db, err := sql.Open("duckdb", file+"?access_mode=read_only")
	if err != nil {
		return out, fmt.Errorf("open %s: %w", file, err)
	}
	defer db.Close()
	if wantSQL != "" {
		if err := db.QueryRowContext(ctx, wantSQL).Scan(&out.Want); err != nil {
			return out, fmt.Errorf("%s: expected total: %w", name, err)
		}
	}
	for i := 0; i <= runs; i++ {
		t0 := time.Now()
		rows, samples, err := readAll(ctx, db, q)
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil {
			return out, fmt.Errorf("%s: %w", name, err)
		}
		out.Rows, out.Samples = rows, samples
		if i > 0 {
			out.Millis = append(out.Millis, ms)
		}
		if i == 0 && ms > slowQueryMillis {
			// Seconds-long queries are not made faster by a warm-up, and
			// repeating them would cost minutes: this run is the figure.
			out.Millis = append(out.Millis, ms)
			break
		}
	}
	return out, nil
}

// timeProfile times what `hotpath profile --db file` does for service over
// [since, until): open the file read-only, load the profile
// (internal/profilequery: the query, naming the frames, merging and
// sorting) and write its folded lines; once untimed, then runs times. Rows
// is the stacks loaded; the expected sample total comes from wantSQL.
func timeProfile(ctx context.Context, file, name, flags, service string, since, until time.Time, wantSQL string, runs int) (Query, error) {
	cmd := fmt.Sprintf("hotpath profile --db %s %s--service %s --since %q --until %q", file, flags, service, since.UTC().Format(tsLayout), until.UTC().Format(tsLayout))
	out := Query{Name: name, SQL: cmd + ", in the bench's process: opening the file, loading and writing the folded lines (not the process's start)", File: file}
	wants, err := expectedTotals(ctx, file, wantSQL)
	if err != nil {
		return out, fmt.Errorf("%s: %w", name, err)
	}
	out.Want = wants[0]
	return out, timeLoads(ctx, file, service, since, until, runs, &out)
}

// expectedTotals reads the total each of wantSQLs gives on file, opened
// read-only.
func expectedTotals(ctx context.Context, file string, wantSQLs ...string) ([]int64, error) {
	db, err := sql.Open("duckdb", file+"?access_mode=read_only")
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", file, err)
	}
	wants := make([]int64, len(wantSQLs))
	for i, q := range wantSQLs {
		if err = db.QueryRowContext(ctx, q).Scan(&wants[i]); err != nil {
			err = fmt.Errorf("expected total: %w", err)
			break
		}
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return wants, err
}

// timeLoads loads service's profile over [since, until) from target (a
// file or a collector's HOST:PORT, as `hotpath profile --db` takes it) and
// writes its folded lines, runs times after one warm-up, into q.
func timeLoads(ctx context.Context, target, service string, since, until time.Time, runs int, q *Query) error {
	for i := 0; i <= runs; i++ {
		t0 := time.Now()
		src, err := profilequery.Open(ctx, profilequery.Target{DB: target})
		if err != nil {
			return fmt.Errorf("%s: %w", q.Name, err)
		}
		p, err := profilequery.Load(ctx, src, profilequery.Selector{Service: service, Range: timerange.Range{Since: since, Until: until}})
		if err == nil {
			err = p.WriteFolded(io.Discard)
		}
		if cerr := src.Close(); err == nil {
			err = cerr
		}
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil {
			return fmt.Errorf("%s: %w", q.Name, err)
		}
		q.Rows, q.Samples = int64(len(p.Stacks)), p.Total()
		if i > 0 {
			q.Millis = append(q.Millis, ms)
		}
	}
	return nil
}

// endpointRange is one range timeProfileEndpoint loads.
type endpointRange struct {
	name    string
	since   time.Time
	wantSQL string
	runs    int
}

// timeProfileEndpoint times timeProfile's load through a collector's
// query endpoint: a summary-tier exporter (the gateway's defaults, but
// retention off, as for the other queries) holds file and serves queries
// on a free loopback port, and each run opens it as `hotpath profile --db
// HOST:PORT` does, loads the profile and writes its folded lines. Both
// sides run in the bench's process; the command's own start is not
// counted. With cli set, each range is also timed as that binary's
// command against the endpoint (timeCommand). The expected totals are read
// from the file before the exporter opens it.
func timeProfileEndpoint(ctx context.Context, cli, file, service string, until time.Time, ranges []endpointRange) ([]Query, error) {
	wantSQLs := make([]string, len(ranges))
	for i, r := range ranges {
		wantSQLs[i] = r.wantSQL
	}
	wants, err := expectedTotals(ctx, file, wantSQLs...)
	if err != nil {
		return nil, err
	}
	port, err := testport.Pick()
	if err != nil {
		return nil, err
	}
	endpoint := fmt.Sprintf("127.0.0.1:%d", port)
	// The file's roll-ups are complete (replicate waited for them), so
	// the exporter's start has nothing to catch up in the background.
	exp, err := startExporterLogging(ctx, "summary", file, nil, false, endpoint)
	if err != nil {
		return nil, fmt.Errorf("collector on %s: %w", file, err)
	}
	var out []Query
	for i, r := range ranges {
		cmd := fmt.Sprintf("hotpath profile --db %s --service %s --since %q --until %q", endpoint, service, r.since.UTC().Format(tsLayout), until.UTC().Format(tsLayout))
		q := Query{Name: r.name, File: file, Want: wants[i],
			SQL: cmd + ", in the bench's process beside the collector serving the file: opening the endpoint, loading through it and writing the folded lines (not the process's start)"}
		err := timeLoads(ctx, endpoint, service, r.since, until, r.runs, &q)
		out = append(out, q)
		if err == nil && cli != "" {
			q, err = runCommand(ctx, cli, r.name+", as a command", endpoint, nil, service, r.since, until, wants[i], r.runs)
			q.File = file
			out = append(out, q)
		}
		if err != nil {
			_ = exp.Shutdown(ctx)
			return nil, err
		}
	}
	return out, exp.Shutdown(ctx)
}

// timeCommand times the hotpath binary cli's `profile --db file` command
// (flags before --service) over [since, until), as a user runs it: a new
// process each time, its start included; once untimed, then runs times.
// Rows is its folded lines, Samples their counts' sum; the expected total
// comes from wantSQL.
func timeCommand(ctx context.Context, cli, name, file string, flags []string, service string, since, until time.Time, wantSQL string, runs int) (Query, error) {
	wants, err := expectedTotals(ctx, file, wantSQL)
	if err != nil {
		return Query{Name: name, File: file}, fmt.Errorf("%s: %w", name, err)
	}
	return runCommand(ctx, cli, name, file, flags, service, since, until, wants[0], runs)
}

// runCommand is timeCommand against db (a file or HOST:PORT) with the
// expected total given.
func runCommand(ctx context.Context, cli, name, db string, flags []string, service string, since, until time.Time, want int64, runs int) (Query, error) {
	args := append([]string{"profile", "--db", db}, flags...)
	args = append(args, "--service", service, "--since", since.UTC().Format(tsLayout), "--until", until.UTC().Format(tsLayout))
	q := Query{Name: name, File: db, Want: want,
		SQL: fmt.Sprintf("%s %s > folded.txt, as a command: a new process each run, its start included", cli, shellQuote(args))}
	for i := 0; i <= runs; i++ {
		var stdout, stderr bytes.Buffer
		c := exec.CommandContext(ctx, cli, args...)
		c.Stdout, c.Stderr = &stdout, &stderr
		t0 := time.Now()
		err := c.Run()
		ms := float64(time.Since(t0).Microseconds()) / 1000
		if err != nil {
			return q, fmt.Errorf("%s: %w: %s", name, err, bytes.TrimSpace(stderr.Bytes()))
		}
		lines, samples, err := foldedTotals(stdout.Bytes())
		if err != nil {
			return q, fmt.Errorf("%s: %w", name, err)
		}
		q.Rows, q.Samples = lines, samples
		if i > 0 {
			q.Millis = append(q.Millis, ms)
		}
	}
	return q, nil
}

// foldedTotals counts folded lines ("frames count") and sums their counts.
func foldedTotals(out []byte) (lines, samples int64, err error) {
	for line := range bytes.Lines(out) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		sp := bytes.LastIndexByte(line, ' ')
		n, perr := strconv.ParseInt(string(line[sp+1:]), 10, 64)
		if sp < 0 || perr != nil {
			return 0, 0, fmt.Errorf("folded line %.80q: no count at its end", line)
		}
		lines++
		samples += n
	}
	return lines, samples, nil
}

// shellQuote writes args as a shell would take them back.
func shellQuote(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$`\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		quoted[i] = a
	}
	return strings.Join(quoted, " ")
}

// readAll reads every (folded, samples) row, as a flame graph would.
func readAll(ctx context.Context, db *sql.DB, q string) (rows, samples int64, err error) {
	rs, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	defer rs.Close()
	var folded string
	var n int64
	for rs.Next() {
		if err := rs.Scan(&folded, &n); err != nil {
			return 0, 0, err
		}
		rows++
		samples += n
	}
	return rows, samples, rs.Err()
}

// replicate extends the summary file's one day [start, start+1d) to days
// days by copying it 1..days-1 days back, oldest first, one INSERT per day
// so each day is appended in time order like the gateway writes it.
func replicate(ctx context.Context, path string, start time.Time, days int, logf func(string, ...any)) error {
	db, err := sql.Open("duckdb", path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	for k := days - 1; k >= 1; k-- {
		for _, table := range []string{summaryTables.sampleRows, summaryTables.traceRows} {
			q := fmt.Sprintf(`INSERT INTO %[1]s
SELECT * REPLACE (bucket_time - INTERVAL %[2]d DAY AS bucket_time)
FROM %[1]s WHERE bucket_time >= %[3]s AND bucket_time < %[4]s ORDER BY bucket_time`, table, k, ts(start), ts(start.Add(24*time.Hour)))
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("replicate day -%d into %s: %w", k, path, err)
			}
		}
	}
	// The roll-ups are rebuilt from the replicated minutes: the exporter
	// rolls up the closed hours and days of a file when it opens it.
	for _, table := range []string{summaryTables.hourlyRows, summaryTables.dailyRows, "rollup_progress"} {
		if _, err := db.ExecContext(ctx, "DELETE FROM "+table); err != nil {
			return fmt.Errorf("reset %s in %s: %w", table, path, err)
		}
	}
	if err := db.Close(); err != nil {
		return err
	}
	// The catch-up runs in the background after a start that returns at
	// once; the long query is measured on the finished roll-ups.
	core, logs := observer.New(zap.InfoLevel)
	began := time.Now()
	exp, err := startExporterLogging(ctx, "summary", path, core, false, "")
	if err != nil {
		return fmt.Errorf("roll up %s: %w", path, err)
	}
	started := time.Since(began)
	// The exporter closes roll-ups less than a day behind the stored
	// minutes while it opens the file (a 1-day file's); it logs that it
	// left them to the background, and later "roll-ups caught up", only
	// when they are further behind.
	how := "which closed them"
	if logs.FilterMessageSnippet("more than a day behind").Len() > 0 {
		for logs.FilterMessage("roll-ups caught up").Len() == 0 {
			if time.Since(began) > time.Hour {
				_ = exp.Shutdown(ctx)
				return fmt.Errorf("roll up %s: no catch-up after an hour", path)
			}
			time.Sleep(100 * time.Millisecond)
		}
		how = fmt.Sprintf("roll-ups caught up in the background %s after the start", time.Since(began).Round(time.Second))
	}
	logf("storage: %d-day file without roll-ups: exporter started in %s, %s", days, started.Round(time.Millisecond), how)
	if err := exp.Shutdown(ctx); err != nil {
		return fmt.Errorf("roll up %s: %w", path, err)
	}
	db, err = sql.Open("duckdb", path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	return db.Close()
}
