// Package storebench measures storage and query cost on a simulated day:
// simday's intervals go through the real duckdbprofile exporter (created by
// its factory, as the collector does) into a local-tier and a summary-tier
// file, and the exporter's own macros are timed on the result.
package storebench

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/hotpath-dev/hotpath/bench/internal/filecopy"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter"
	"github.com/hotpath-dev/hotpath/internal/dbcopy"
	"github.com/hotpath-dev/hotpath/internal/simday"
)

// Options of one run.
type Options struct {
	Dir  string        // where the DuckDB files go (must exist)
	Host simday.Params // the simulated host
	Span time.Duration // simulated time written to the summary tier (a day)
	// LocalSpan is the part of Span, at its end, also written to the local
	// tier. The agent keeps 1 h, and its writes per day are 5,760 small
	// transactions, so a few hours measure its bytes per row and are
	// scaled to a day (reported as such).
	LocalSpan time.Duration
	End       time.Time // simulated time ends here (UTC, whole minutes)
	Days      int       // summary days for the long query (the written day is replicated)
	Runs      int       // timed runs per query
	// LongRuns is the timed runs of the multi-day queries (slow ones).
	LongRuns int
	Log      func(format string, args ...any)
	// CLI is the hotpath binary: when set, `hotpath profile` is also
	// timed as a command (a new process each run) beside the loads timed
	// in the bench's process.
	CLI string
	// Trace is filled while writing: a trace to look up afterwards.
	Trace TraceProbe
}

// TraceProbe is one trace ID from the middle of the simulated span and how
// many samples it got, to check the lookup finds exactly them.
type TraceProbe struct {
	TraceID string
	Samples int64
}

// Tier is the storage figure of one tier.
type Tier struct {
	Path           string  `json:"path"`
	FileBytes      int64   `json:"file_bytes"`
	DiskBytes      int64   `json:"disk_bytes"`  // st_blocks × 512, what du counts
	Rows           int64   `json:"rows"`        // in the samples table
	TracedRows     int64   `json:"traced_rows"` // in the trace table (also counted in Rows' samples)
	Frames         int64   `json:"frames"`
	Stacks         int64   `json:"stacks"` // stack dictionary entries
	Samples        int64   `json:"samples"`
	BytesPerSvcDay float64 `json:"bytes_per_service_day"`
	// UsedBytes is DuckDB's used blocks of the file (FileBytes less its
	// free blocks). CompactBytes is the size of the same data copied in one
	// go into a fresh file (COPY FROM DATABASE): the layout's own cost. The
	// exporter writes a batch per transaction and DuckDB checkpoints every
	// 16 MB of WAL, which leaves more used blocks than one bulk write, and
	// free ones.
	UsedBytes        int64   `json:"used_bytes"`
	CompactBytes     int64   `json:"compact_bytes"`
	WriteSeconds     float64 `json:"write_seconds"` // both tiers written concurrently
	Pushes           int     `json:"pushes"`
	DistinctPerSvcMn float64 `json:"distinct_stacks_per_service_minute"`
	// PushMillis is how long each push (ConsumeProfiles) took, in order:
	// whether writing slows down as the file grows shows in its first and
	// last tenths.
	PushMillis []float64 `json:"push_ms"`
	// Breakdown is the stack table's columns measured on their own.
	Breakdown []Part `json:"breakdown"`
}

// Query is one timed query.
type Query struct {
	Name    string    `json:"name"`
	SQL     string    `json:"sql"`
	File    string    `json:"file"`
	Rows    int64     `json:"rows"`
	Samples int64     `json:"samples"` // sum of the samples column, to check plausibility
	Want    int64     `json:"want_samples"`
	Millis  []float64 `json:"millis"` // every timed run, after one warm-up
}

// Result is the whole run.
type Result struct {
	Services       int     `json:"services"`
	SpanHours      float64 `json:"span_hours"`
	LocalSpanHours float64 `json:"local_span_hours"`
	Local          Tier    `json:"local"`
	Summary        Tier    `json:"summary"`
	Queries        []Query `json:"queries"`
	SummaryDay     int     `json:"summary_days_for_long_query"`
	LongFile       int64   `json:"long_file_bytes"`
	// Steady is the N-day file after the gateway's default retention ran
	// on it: what a gateway that has run N days holds.
	Steady Steady `json:"steady_state"`
	// LocalHour is a copy of the agent's file after the agent's default
	// retention (1 h) ran on it: the hour an agent holds. The local row
	// above divides LocalSpan's file by its hours, which spreads the stack
	// dictionary (most of the file) over them: the stacks of one hour are
	// over half of those of three.
	LocalHour Steady `json:"local_hour"`
}

// Steady is a file's size after the tier's default retention ran on it.
// At the gateway, DuckDB's used blocks are its data; free blocks (left by
// deletes and rewritten row groups) are reused by later writes, so they are
// reported but not counted. At the agent, one retention run deletes two
// thirds of the rows and of the stack dictionary, scattered over every row
// group, and DuckDB keeps deleted rows in their blocks: its used blocks are
// an upper bound there, and the compact copy, the layout's own cost for the
// hour, is the figure (BytesPerSvcHour).
type Steady struct {
	FileBytes int64 `json:"file_bytes"`
	UsedBytes int64 `json:"used_bytes"`
	FreeBytes int64 `json:"free_bytes"`
	// CompactBytes is the file after `hotpath compact` (a copy in one go).
	CompactBytes   int64   `json:"compact_bytes"`
	Rows           int64   `json:"rows"`
	TracedRows     int64   `json:"traced_rows"`
	TraceDays      float64 `json:"trace_days"` // span of trace-tagged rows kept
	BytesPerSvcDay float64 `json:"bytes_per_service_day"`
	Seconds        float64 `json:"retention_seconds"` // the retention run that made it
	Stacks         int64   `json:"stacks"`            // stack dictionary entries kept
	// KeptHours is the span of the sample rows kept: their distinct times
	// × the bucket width.
	KeptHours       float64 `json:"kept_hours"`
	BytesPerSvcHour float64 `json:"bytes_per_service_hour,omitempty"` // agent: compact copy ÷ services ÷ KeptHours
}

// Run writes the simulated span through both tiers, measures the files and
// times the queries.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	host, err := simday.NewHost(o.Host)
	if err != nil {
		return nil, err
	}
	localPath := filepath.Join(o.Dir, "local.duckdb")
	summaryPath := filepath.Join(o.Dir, "summary.duckdb")
	if o.LocalSpan <= 0 || o.LocalSpan > o.Span {
		o.LocalSpan = o.Span
	}
	res := &Result{Services: o.Host.Services, SpanHours: o.Span.Hours(), LocalSpanHours: o.LocalSpan.Hours(), SummaryDay: o.Days}

	local, err := startExporter(ctx, "local", localPath)
	if err != nil {
		return nil, err
	}
	summary, err := startExporter(ctx, "summary", summaryPath)
	if err != nil {
		_ = local.Shutdown(ctx)
		return nil, err
	}
	start := o.End.Add(-o.Span)
	perMinute := int(time.Minute / o.Host.Interval)
	if perMinute < 1 {
		perMinute = 1
	}
	// The two exporters write concurrently, as agent and gateway would on
	// two machines; each gets its batches through a channel.
	localCh, summaryCh := make(chan pprofile.Profiles, 8), make(chan pprofile.Profiles, 2)
	localDone := consume(ctx, local, localCh, &res.Local.PushMillis)
	summaryDone := consume(ctx, summary, summaryCh, &res.Summary.PushMillis)
	localStart := o.End.Add(-o.LocalSpan)
	// The probe trace is picked in the middle of the local span (so both
	// tiers hold it); a trace lasts a few samples of one service, so it
	// spans at most two intervals: counting every trace over the intervals
	// around the probe's gives its exact total.
	probeAt := localStart.Add(o.LocalSpan / 2).Truncate(o.Host.Interval)
	traceCounts := map[string]int64{}
	var probe []byte
	var minute []simday.Interval
	t0 := time.Now()
	for at := start; at.Before(o.End); at = at.Add(o.Host.Interval) {
		iv := host.Next(at)
		if d := at.Sub(probeAt); d >= -2*o.Host.Interval && d <= 2*o.Host.Interval {
			countTraces(iv, traceCounts)
			if d == 0 {
				probe = firstTrace(iv)
			}
		}
		if !at.Before(localStart) {
			localCh <- host.Profiles(iv)
			res.Local.Pushes++
		}
		minute = append(minute, iv)
		if len(minute) == perMinute {
			// The gateway's stackaggregator closes a minute and emits it at once.
			summaryCh <- host.Profiles(minute...)
			res.Summary.Pushes++
			minute = minute[:0]
			if n := res.Summary.Pushes; n%120 == 0 {
				o.Log("storage: %d simulated minutes written (%.0f%%)", n, 100*float64(at.Sub(start))/float64(o.Span))
			}
		}
	}
	if len(minute) > 0 {
		summaryCh <- host.Profiles(minute...)
		res.Summary.Pushes++
	}
	close(localCh)
	close(summaryCh)
	errL, errS := <-localDone, <-summaryDone
	elapsed := time.Since(t0).Seconds()
	errL = joinShutdown(ctx, local, errL)
	errS = joinShutdown(ctx, summary, errS)
	if errL != nil || errS != nil {
		return nil, fmt.Errorf("write simulated day: local: %v; summary: %v", errL, errS)
	}
	if probe == nil {
		return nil, fmt.Errorf("no trace-tagged sample at %s to look up (trace_share is %v)", probeAt, o.Host.TraceShare)
	}
	o.Trace = TraceProbe{TraceID: hex.EncodeToString(probe), Samples: traceCounts[string(probe)]}
	res.Local.WriteSeconds, res.Summary.WriteSeconds = elapsed, elapsed

	days := o.Span.Hours() / 24
	if err := measureTier(ctx, &res.Local, localPath, localTables, o.Host.Services, o.LocalSpan.Hours()/24); err != nil {
		return nil, err
	}
	// The agent's hour: its default retention on a copy, as early as
	// possible (the simulated span ends at o.End; retention cuts at the
	// real clock less 1 h), as the queries below need the whole file.
	localHourPath := filepath.Join(o.Dir, "local-hour.duckdb")
	if err := filecopy.Copy(localPath, localHourPath, 0o666); err != nil {
		return nil, err
	}
	if res.LocalHour, err = retained(ctx, "local", localTables, localHourPath, o.Host.Interval); err != nil {
		return nil, err
	}
	if h := res.LocalHour.KeptHours; h > 0 {
		res.LocalHour.BytesPerSvcHour = float64(res.LocalHour.CompactBytes) / float64(o.Host.Services) / h
	}
	o.Log("storage: agent file after its default retention: %.1f MB used, %.1f MB free, %.1f MB compacted, %d rows and %d stacks over %.2f h (retention took %.0f s)",
		float64(res.LocalHour.UsedBytes)/1e6, float64(res.LocalHour.FreeBytes)/1e6, float64(res.LocalHour.CompactBytes)/1e6,
		res.LocalHour.Rows, res.LocalHour.Stacks, res.LocalHour.KeptHours, res.LocalHour.Seconds)
	if err := measureTier(ctx, &res.Summary, summaryPath, summaryTables, o.Host.Services, days); err != nil {
		return nil, err
	}
	// Each table, and the columns of the samples table, on their own.
	for _, part := range []struct{ table, cols string }{
		{summaryTables.sampleRows, "*"},
		{summaryTables.sampleRows, "bucket_time"},
		{summaryTables.sampleRows, "series_id"},
		{summaryTables.sampleRows, "stack_id"},
		{summaryTables.sampleRows, "sample_count"},
		{summaryTables.sampleRows, "sample_period_ns"},
		{summaryTables.traceRows, "*"},
		{summaryTables.traceRows, "trace_id, span_id"},
		{summaryTables.stackDict, "*"},
		{summaryTables.series, "*"},
		{summaryTables.frames, "*"},
		{summaryTables.hourlyRows, "*"},
		{summaryTables.dailyRows, "*"},
	} {
		p, err := breakdown(ctx, o.Dir, summaryPath, part.table, []string{part.cols})
		if err != nil {
			return nil, err
		}
		res.Summary.Breakdown = append(res.Summary.Breakdown, p...)
	}
	o.Log("storage: local %d rows %.1f MB, summary %d rows %.1f MB", res.Local.Rows, float64(res.Local.FileBytes)/1e6, res.Summary.Rows, float64(res.Summary.FileBytes)/1e6)

	// Any one service: they are alike. The fourth, when there is one.
	probeService := host.Services[min(3, len(host.Services)-1)].Name
	qs, err := timeQueries(ctx, o, res, localPath, summaryPath, probeService)
	if err != nil {
		return nil, err
	}
	res.Queries = qs
	return res, nil
}

func firstTrace(iv simday.Interval) []byte {
	for _, ss := range iv.Samples {
		for _, s := range ss {
			if s.TraceID != nil {
				return s.TraceID
			}
		}
	}
	return nil
}

func countTraces(iv simday.Interval, counts map[string]int64) {
	for _, ss := range iv.Samples {
		for _, s := range ss {
			if s.TraceID != nil {
				counts[string(s.TraceID)]++
			}
		}
	}
}

// startExporter creates the exporter through its factory with the
// collector's defaults, except: no query endpoint (nothing to serve), no
// sending queue (so a push returns when the rows are in the file) and
// retention that cannot fire during the run (the simulated clock runs ahead
// of the real one).
func startExporter(ctx context.Context, tier, path string) (xexporter.Profiles, error) {
	return startExporterLogging(ctx, tier, path, nil, false, "")
}

// startExporterLogging is startExporter with the exporter's log also going
// to also (nil: none), at the levels also enables; defaultRetention keeps the
// tier's default retention (it runs at start); query, when not "", is where
// it serves queries.
func startExporterLogging(ctx context.Context, tier, path string, also zapcore.Core, defaultRetention bool, query string) (xexporter.Profiles, error) {
	f := duckdbprofileexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*duckdbprofileexporter.Config)
	cfg.Tier = tier
	cfg.Path = path
	cfg.Query.Enabled = query != ""
	cfg.Query.HTTP.NetAddr.Endpoint = query
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	if !defaultRetention {
		cfg.Retention = duckdbprofileexporter.RetentionConfig{Stacks: 400 * 24 * time.Hour, TraceStacks: 400 * 24 * time.Hour, Metadata: 400 * 24 * time.Hour, Interval: 1000 * time.Hour}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s exporter config: %w", tier, err)
	}
	set := exportertest.NewNopSettings(f.Type())
	set.ID = component.NewIDWithName(f.Type(), tier)
	if l, err := zap.NewProduction(zap.IncreaseLevel(zap.WarnLevel)); err == nil {
		set.Logger = l
	}
	if also != nil {
		set.Logger = zap.New(zapcore.NewTee(set.Logger.Core(), also))
	}
	exp, err := f.CreateProfiles(ctx, set, cfg)
	if err != nil {
		return nil, fmt.Errorf("create %s exporter: %w", tier, err)
	}
	if err := exp.Start(ctx, componenttest.NewNopHost()); err != nil {
		return nil, fmt.Errorf("start %s exporter: %w", tier, err)
	}
	return exp, nil
}

// consume pushes every batch from ch, timing each push into millis (read
// only after done fires).
func consume(ctx context.Context, exp xexporter.Profiles, ch <-chan pprofile.Profiles, millis *[]float64) <-chan error {
	done := make(chan error, 1)
	go func() {
		var first error
		for pd := range ch {
			if first != nil {
				continue // drain so the producer never blocks
			}
			t0 := time.Now()
			if err := exp.ConsumeProfiles(ctx, pd); err != nil {
				first = err
			}
			*millis = append(*millis, float64(time.Since(t0).Microseconds())/1000)
		}
		done <- first
	}()
	return done
}

func joinShutdown(ctx context.Context, exp xexporter.Profiles, err error) error {
	if serr := exp.Shutdown(ctx); serr != nil && err == nil {
		return serr
	}
	return err
}

// tierTables names a tier's tables and views (schema version 8): samples
// and traces are the views people query, sampleRows and traceRows (and the
// roll-ups' rows) the tables under them, whose bytes are measured.
type tierTables struct {
	samples, traces, stackDict, frames, timeCol string
	sampleRows, traceRows, series               string
	hourlyRows, dailyRows                       string
}

var (
	localTables = tierTables{samples: "stack_samples_local", traces: "trace_samples_local", stackDict: "profile_stack_dictionary_local",
		frames: "profile_frame_dictionary_local", timeCol: "timestamp",
		sampleRows: "stack_sample_rows_local", traceRows: "trace_sample_rows_local", series: "profile_series_dictionary_local"}
	summaryTables = tierTables{samples: "stack_summaries", traces: "trace_summaries", stackDict: "profile_stack_dictionary",
		frames: "profile_frame_dictionary", timeCol: "bucket_time",
		sampleRows: "stack_summary_rows", traceRows: "trace_summary_rows", series: "profile_series_dictionary",
		hourlyRows: "stack_summary_rows_hourly", dailyRows: "stack_summary_rows_daily"}
)

// measureTier checkpoints the file (so its size is its data, not a WAL),
// then counts what it holds.
func measureTier(ctx context.Context, t *Tier, path string, tb tierTables, services int, days float64) error {
	db, err := sql.Open("duckdb", path)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	q := fmt.Sprintf(`SELECT count(*), (SELECT count(*) FROM %[4]s), coalesce(sum(sample_count), 0),
  (SELECT count(*) FROM %[2]s), (SELECT count(*) FROM %[5]s),
  (SELECT avg(n) FROM (SELECT count(DISTINCT stack_id) AS n FROM %[1]s
     GROUP BY service_id, time_bucket(INTERVAL 1 MINUTE, %[3]s)))
FROM %[1]s`, tb.samples, tb.frames, tb.timeCol, tb.traces, tb.stackDict)
	if err := db.QueryRowContext(ctx, q).Scan(&t.Rows, &t.TracedRows, &t.Samples, &t.Frames, &t.Stacks, &t.DistinctPerSvcMn); err != nil {
		return fmt.Errorf("count rows of %s: %w", path, err)
	}
	var blockSize, used int64
	if err := db.QueryRowContext(ctx, "SELECT block_size, used_blocks FROM pragma_database_size()").Scan(&blockSize, &used); err != nil {
		return fmt.Errorf("blocks of %s: %w", path, err)
	}
	t.UsedBytes = blockSize * used
	if t.CompactBytes, err = compactSize(ctx, db, path+".compact"); err != nil {
		return fmt.Errorf("compact copy of %s: %w", path, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("size of %s: %w", path, err)
	}
	t.Path = path
	t.FileBytes = st.Size()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		t.DiskBytes = sys.Blocks * 512
	}
	if wal, err := os.Stat(path + ".wal"); err == nil {
		t.FileBytes += wal.Size() // normally gone after CHECKPOINT
	}
	t.BytesPerSvcDay = float64(t.FileBytes) / float64(services) / days
	return nil
}

// compactSize copies every table of db's file into a fresh file at dst in
// one go (dbcopy), and returns its size; the copy is removed.
func compactSize(ctx context.Context, db *sql.DB, dst string) (int64, error) {
	conn, err := db.Conn(ctx) // ATTACH is per connection
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	var name string
	if err := conn.QueryRowContext(ctx, "SELECT current_database()").Scan(&name); err != nil {
		return 0, err
	}
	defer os.Remove(dst)
	defer os.Remove(dst + ".wal")
	if _, err := dbcopy.Copy(ctx, conn, name, dst, 0); err != nil {
		return 0, err
	}
	return dbcopy.FileBytes(dst)
}
