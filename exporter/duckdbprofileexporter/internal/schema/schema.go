// Package schema owns the layout of a hotpath DuckDB file: the tables of each
// tier (RFD 072 plus RFD 078's trace columns), the decoding views and macros
// people query, and the schema_version bookkeeping that lets a newer exporter
// migrate an older file and makes any exporter refuse a file it does not know.
package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/stacknames"
)

// Tier is which side of the pipeline a file belongs to.
type Tier string

const (
	// Local is the agent tier: raw per-interval stacks, short retention.
	Local Tier = "local"
	// Summary is the gateway tier: per-bucket summaries, long retention.
	Summary Tier = "summary"
)

// Version is the schema version this code writes. History:
//
//	1: RFD 072 tables (no trace columns).
//	2: adds trace_id and span_id (RFD 078) to the stack tables.
//	3: adds sample_period_ns (the sampling period each row was taken at;
//	   NULL = unknown, as for every row written before).
//	4: a stack dictionary (one stack_id per distinct frame list) and rows of
//	   time, service, [pod,] build, stack_id, count, period; trace-tagged
//	   samples also in a narrow table keyed by binary trace ID. The RFD
//	   names (cpu_profile_samples_local, cpu_profile_summaries) become views
//	   answering what the tables did.
//	5: hourly and daily roll-ups of the summary tier's samples, written as
//	   hours and days close, and samples_in(), which reads the coarsest
//	   tier that answers a range exactly.
//	6: frame_type, file_name and line_number in the frame dictionary (what
//	   a frame is and where its code lives; NULL = unknown). Frames written
//	   before get the type their name's suffix says ("_[j]" jit, "_[k]"
//	   kernel), else NULL.
//	7: container_id and k8s_pod_uid on the row tables of both tiers and the
//	   roll-ups (the container and pod a sample's process ran in; '' =
//	   none, as for every row written before).
//	8: a series dictionary (one series_id per distinct service, [pod,]
//	   build, container and pod UID). The row tables hold series_id in
//	   place of those five strings and take new names (stack_summary_rows,
//	   ...); their names of version 7 (stack_summaries, ...) become views
//	   answering what the tables did. The stack dictionary loses its
//	   primary key (stack_id stays unique: the writer assigns it).
//	9: the frame dictionary loses frame_count. Retention finds the frames
//	   no stack names by reading the stack dictionary; keeping the counts
//	   cost every batch with new stacks an UPDATE of each of their frames
//	   (a third of a push's time at the storage bench's share of new
//	   stacks).
//	10: the trace tables hold trace_id as UUID (16 bytes) and span_id as
//	   UBIGINT (8 bytes), rows ordered by time, series, trace and span
//	   within a batch: equal IDs sit together and DuckDB stores them once
//	   per run. On the storage bench's simulated day the gateway's trace
//	   table went from 15.7 to 11.0 MB (BLOB IDs compress neither way).
//	   The RFD views still give both as lowercase hex.
const Version = 10

// IngestedBatches records the hotpath.batch.id of every batch stored, in
// the batch's own transaction, so a batch sent again is not stored twice.
// Both tiers have it; rows older than the retention's batch-id age go.
const IngestedBatches = "ingested_batches"

// ingestedBatchesDDL is additive: files of any version get it on open.
const ingestedBatchesDDL = `CREATE TABLE IF NOT EXISTS ` + IngestedBatches + ` (
    batch_id  VARCHAR   PRIMARY KEY,
    stored_at TIMESTAMP NOT NULL
)`

// Tables names the tables and views of one tier.
type Tables struct {
	Frames    string // frame dictionary
	StackDict string // stack dictionary: stack_id → frame IDs
	// Series is the series dictionary: series_id → service, [pod,] build,
	// container and pod UID, the strings every row would repeat.
	Series  string
	Samples string // every sample: time, series_id, stack_id, count, period
	Traces  string // trace-tagged samples again, with their trace and span ID
	// SamplesView and TracesView are Samples and Traces with the series'
	// columns in place of series_id, under the tables' names of version 7
	// (HourlyView and DailyView likewise for the roll-ups): what people's
	// SQL reads.
	SamplesView, TracesView string
	Stacks                  string // RFD view: stacks with frame IDs and hex trace IDs (a table before version 4)
	Binaries                string // binary metadata
	Decoded                 string // view decoding Stacks
	TimeCol                 string // time column of the row tables and views
	// Hourly and Daily are the summary tier's roll-ups of Samples ("" on
	// the local tier); Rollups records how far each is complete.
	Hourly, Daily, Rollups string
	HourlyView, DailyView  string
}

// TablesFor returns the table names of a tier.
func TablesFor(t Tier) Tables {
	if t == Summary {
		return Tables{
			Frames:      "profile_frame_dictionary",
			StackDict:   "profile_stack_dictionary",
			Series:      "profile_series_dictionary",
			Samples:     "stack_summary_rows",
			Traces:      "trace_summary_rows",
			SamplesView: "stack_summaries",
			TracesView:  "trace_summaries",
			Stacks:      "cpu_profile_summaries",
			Binaries:    "binary_metadata_registry",
			Decoded:     "cpu_profile_summaries_decoded",
			TimeCol:     "bucket_time",
			Hourly:      "stack_summary_rows_hourly",
			Daily:       "stack_summary_rows_daily",
			HourlyView:  "stack_summaries_hourly",
			DailyView:   "stack_summaries_daily",
			Rollups:     "rollup_progress",
		}
	}
	return Tables{
		Frames:      "profile_frame_dictionary_local",
		StackDict:   "profile_stack_dictionary_local",
		Series:      "profile_series_dictionary_local",
		Samples:     "stack_sample_rows_local",
		Traces:      "trace_sample_rows_local",
		SamplesView: "stack_samples_local",
		TracesView:  "trace_samples_local",
		Stacks:      "cpu_profile_samples_local",
		Binaries:    "binary_metadata_local",
		Decoded:     "cpu_profile_samples_local_decoded",
		TimeCol:     "timestamp",
	}
}

// RowTables are the tables whose rows reference the stack and series
// dictionaries.
func (tb Tables) RowTables() []string {
	if tb.Hourly != "" {
		return []string{tb.Samples, tb.Traces, tb.Hourly, tb.Daily}
	}
	return []string{tb.Samples, tb.Traces}
}

// rowViews pairs each row table with its view.
func (tb Tables) rowViews() [][2]string {
	out := [][2]string{{tb.Samples, tb.SamplesView}, {tb.Traces, tb.TracesView}}
	if tb.Hourly != "" {
		out = append(out, [2]string{tb.Hourly, tb.HourlyView}, [2]string{tb.Daily, tb.DailyView})
	}
	return out
}

// WorkloadColumns are the series' last columns, in table order: where the
// sampled process ran (container.id and k8s.pod.uid of its resource, from
// its cgroup; ” = none). Version 7 added them to the row tables.
const WorkloadColumns = "container_id, k8s_pod_uid"

// SeriesColumns are the series dictionary's columns after series_id, in
// table order.
func SeriesColumns(t Tier) string {
	return "service_id, " + podCol(t, "") + "build_id, " + WorkloadColumns
}

// podCol is the pod column of the tier's series, with a trailing comma and
// space ("" on the local tier, which has none).
func podCol(t Tier, prefix string) string {
	if t == Summary {
		return prefix + "pod_name, "
	}
	return ""
}

func framesDDL(t Tier) string {
	return `CREATE TABLE ` + TablesFor(t).Frames + ` (
    frame_id    INTEGER PRIMARY KEY,
    frame_name  VARCHAR UNIQUE NOT NULL,
    frame_type  VARCHAR, -- python, jit, native, kernel, go; NULL = unknown
    file_name   VARCHAR, -- source file of the function; NULL = unknown
    line_number INTEGER  -- line of the first sample seen, else the function's first line; NULL = unknown
)`
}

// v8FramesDDL is the frame dictionary of versions 6 to 8, which counted
// each frame's occurrences in the stack dictionary; the steps to those
// versions build it, and the step to 9 drops the count.
func v8FramesDDL(t Tier) string {
	return `CREATE TABLE ` + TablesFor(t).Frames + ` (
    frame_id    INTEGER PRIMARY KEY,
    frame_name  VARCHAR UNIQUE NOT NULL,
    frame_count BIGINT  NOT NULL DEFAULT 0,
    frame_type  VARCHAR,
    file_name   VARCHAR,
    line_number INTEGER
)`
}

// stackDictDDL has no key since version 8: stack_id is unique by
// construction (the writer's cache assigns it), nothing looks a stack up
// by it through an index (joins hash), and the key's ART index took 1.8 MB
// of file and of memory per 200,000 stacks, a tenth of an agent's file.
func stackDictDDL(t Tier) string {
	return `CREATE TABLE ` + TablesFor(t).StackDict + ` (
    stack_id        INTEGER   NOT NULL, -- unique (the writer assigns it)
    stack_frame_ids INTEGER[] NOT NULL  -- root first, leaf last
)`
}

func seriesDDL(t Tier) string {
	pod := ""
	if t == Summary {
		pod = "\n    pod_name     VARCHAR NOT NULL,"
	}
	return `CREATE TABLE ` + TablesFor(t).Series + ` (
    series_id    INTEGER PRIMARY KEY,
    service_id   VARCHAR NOT NULL,` + pod + `
    build_id     VARCHAR NOT NULL, -- '' when unknown
    container_id VARCHAR NOT NULL, -- '' = not in a container
    k8s_pod_uid  VARCHAR NOT NULL  -- '' = not in a Kubernetes pod
)`
}

// rowTablesDDL is Samples and Traces. A row is a few bytes after DuckDB's
// compression: the time is run-length encoded, series_id and stack_id are
// bit-packed small integers (see the writer's rowOrder), the period is one
// constant per row group.
func rowTablesDDL(t Tier) []string {
	tb := TablesFor(t)
	samples := `CREATE TABLE ` + tb.Samples + ` (
    ` + fmt.Sprintf("%-16s", tb.TimeCol) + ` TIMESTAMP NOT NULL,
    series_id        INTEGER   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    sample_count     INTEGER   NOT NULL, -- every sample, trace-tagged or not
    sample_period_ns BIGINT              -- CPU time per sample (1e9 / frequency), NULL = unknown
)`
	return []string{samples, tracesDDL(t, tb.Traces, "UUID", "UBIGINT")}
}

// tracesDDL is Traces under name with its ID columns of the given types:
// UUID and UBIGINT since version 10, BLOB and BLOB in versions 4 to 9 (the
// step to version 8 creates it so; the step to version 10 converts it).
func tracesDDL(t Tier, name, traceType, spanType string) string {
	return `CREATE TABLE ` + name + ` (
    ` + fmt.Sprintf("%-16s", TablesFor(t).TimeCol) + ` TIMESTAMP NOT NULL,
    series_id        INTEGER   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    trace_id         ` + fmt.Sprintf("%-9s", traceType) + ` NOT NULL, -- the 16-byte W3C trace ID
    span_id          ` + spanType + `, -- the 8-byte span ID (big-endian), NULL without span
    sample_count     INTEGER   NOT NULL,
    sample_period_ns BIGINT
)`
}

// TraceHex and SpanHex are Traces' ID columns (version 10) as the lowercase
// hex the RFD views, OTLP and W3C traceparent headers use.
func TraceHex(col string) string { return "replace(CAST(" + col + " AS VARCHAR), '-', '')" }

// SpanHex: see TraceHex.
func SpanHex(col string) string { return "printf('%016x', " + col + ")" }

// migrateTraceIDs rewrites Traces with UUID trace IDs and UBIGINT span IDs,
// in the order the writer appends (time, series, trace, span, stack), so
// a file written before compresses as a new one does. Every row is kept
// with its IDs' bytes. The new table is filled under another name and
// renamed, with no temp copy of the old one (on the storage bench's 30-day
// gateway file, 6.9 M trace rows: 7.8 s against 12.8 s with a copy; memory
// stays within DuckDB's memory_limit, spilling past it). A crash leaves
// version 9.
func migrateTraceIDs(t Tier) []string {
	tb := TablesFor(t)
	next := tb.Traces + "_v10"
	return []string{
		tracesDDL(t, next, "UUID", "UBIGINT"),
		fmt.Sprintf(`INSERT INTO %[1]s (%[2]s, series_id, stack_id, trace_id, span_id, sample_count, sample_period_ns)
SELECT %[2]s, series_id, stack_id, CAST(hex(trace_id) AS UUID), CAST('0x' || hex(span_id) AS UBIGINT), sample_count, sample_period_ns
FROM %[3]s ORDER BY %[2]s, series_id, trace_id, span_id, stack_id`, next, tb.TimeCol, tb.Traces),
		`DROP TABLE ` + tb.Traces,
		`ALTER TABLE ` + next + ` RENAME TO ` + tb.Traces,
	}
}

func binariesDDL(t Tier) string {
	binaries := `CREATE TABLE ` + TablesFor(t).Binaries + ` (
    build_id       VARCHAR PRIMARY KEY,
    service_id     VARCHAR   NOT NULL,
    binary_path    VARCHAR   NOT NULL,
    first_seen     TIMESTAMP NOT NULL,
    last_seen      TIMESTAMP NOT NULL,
    has_debug_info BOOLEAN   NOT NULL DEFAULT false`
	if t == Summary {
		binaries += `,
    symbol_storage VARCHAR`
	}
	return binaries + "\n)"
}

// Index and key choices were made by measurement (see README "Indexes" and
// writer.BenchmarkWrite): ART indexes on the row tables cost append
// throughput, growing with the table, while time-ordered appends already
// give DuckDB's zone maps (min/max per row group) what range queries need.
// The row tables therefore have no key or index. The frame and series
// dictionaries and the binary tables are small and written rarely; their
// keys protect ID uniqueness and make the bulk upserts possible. The stack
// dictionary is large and has none (stackDictDDL). Frame lists and stack
// IDs are unique in the stack dictionary, and series in the series
// dictionary, by construction (the writer's caches; DuckDB cannot index
// INTEGER[]); CheckIntegrity verifies it.
func tableDDL(t Tier) []string {
	out := []string{framesDDL(t), stackDictDDL(t), seriesDDL(t)}
	out = append(out, rowTablesDDL(t)...)
	out = append(out, binariesDDL(t))
	return append(out, rollupDDL(t)...)
}

// rollupDDL is the summary tier's roll-up tables: Samples summed per hour
// and per day (sample_count BIGINT: a day of a busy stack exceeds INTEGER),
// and rollup_progress, which says up to when each is complete.
func rollupDDL(t Tier) []string {
	if t != Summary {
		return nil
	}
	tb := TablesFor(t)
	var out []string
	for _, table := range []string{tb.Hourly, tb.Daily} {
		out = append(out, `CREATE TABLE `+table+` (
    bucket_time      TIMESTAMP NOT NULL,
    series_id        INTEGER   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    sample_count     BIGINT    NOT NULL,
    sample_period_ns BIGINT
)`)
	}
	return append(out, rollupProgressDDL)
}

const rollupProgressDDL = `CREATE TABLE rollup_progress (
    rollup       VARCHAR   PRIMARY KEY, -- 'hourly' or 'daily'
    rolled_until TIMESTAMP NOT NULL     -- every bucket before it is in the roll-up
)`

// v7RowTablesDDL is the row tables as versions 4 to 7 had them, under the
// names that are views since: the migrations from versions before 4 build
// them, and the step to version 8 moves them into the series dictionary.
func v7RowTablesDDL(t Tier) []string {
	tb := TablesFor(t)
	pod := ""
	if t == Summary {
		pod = "\n    pod_name         VARCHAR   NOT NULL,"
	}
	workload := `
    container_id     VARCHAR   DEFAULT '',
    k8s_pod_uid      VARCHAR   DEFAULT ''`
	samples := `CREATE TABLE ` + tb.SamplesView + ` (
    ` + fmt.Sprintf("%-16s", tb.TimeCol) + ` TIMESTAMP NOT NULL,
    service_id       VARCHAR   NOT NULL,` + pod + `
    build_id         VARCHAR   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    sample_count     INTEGER   NOT NULL,
    sample_period_ns BIGINT,` + workload + `
)`
	traces := `CREATE TABLE ` + tb.TracesView + ` (
    ` + fmt.Sprintf("%-16s", tb.TimeCol) + ` TIMESTAMP NOT NULL,
    service_id       VARCHAR   NOT NULL,` + pod + `
    build_id         VARCHAR   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    trace_id         BLOB      NOT NULL,
    span_id          BLOB,
    sample_count     INTEGER   NOT NULL,
    sample_period_ns BIGINT,` + workload + `
)`
	return []string{samples, traces}
}

// v7RollupDDL is the roll-ups as versions 5 to 7 had them.
func v7RollupDDL(t Tier) []string {
	if t != Summary {
		return nil
	}
	tb := TablesFor(t)
	var out []string
	for _, table := range []string{tb.HourlyView, tb.DailyView} {
		out = append(out, `CREATE TABLE `+table+` (
    bucket_time      TIMESTAMP NOT NULL,
    service_id       VARCHAR   NOT NULL,
    pod_name         VARCHAR   NOT NULL,
    build_id         VARCHAR   NOT NULL,
    stack_id         INTEGER   NOT NULL,
    sample_count     BIGINT    NOT NULL,
    sample_period_ns BIGINT,
    container_id     VARCHAR   DEFAULT '',
    k8s_pod_uid      VARCHAR   DEFAULT ''
)`)
	}
	return append(out, rollupProgressDDL)
}

// RollupMacros say up to when the roll-ups are complete, as constants, so
// a range query's bounds fold to constants and DuckDB prunes row groups by
// them. The writer replaces them when it advances a roll-up; zero times
// (none yet) are -infinity.
func RollupMacros(hourly, daily time.Time) []string {
	lit := func(t time.Time) string {
		if t.IsZero() {
			return "TIMESTAMP '-infinity'"
		}
		return "TIMESTAMP '" + t.UTC().Format("2006-01-02 15:04:05") + "'"
	}
	return []string{
		`CREATE OR REPLACE MACRO rolled_until_hourly() AS ` + lit(hourly),
		`CREATE OR REPLACE MACRO rolled_until_daily() AS ` + lit(daily),
	}
}

// samplesInSQL is the body of samples_in(service, since, until): the rows of
// one service in [since, until) from the coarsest tier that answers each
// part exactly, with the series' columns (DuckDB filters the series
// dictionary by service and joins the rows to the few series left). Whole
// days the daily roll-up holds come from it, whole hours the hourly one
// holds from that, the rest from Samples. Every bound is a constant when
// since and until are, so each part's scan skips the row groups outside it.
func samplesInSQL(t Tier) string {
	tb := TablesFor(t)
	if t != Summary {
		cols := "build_id, stack_id, sample_count, sample_period_ns, " + WorkloadColumns
		return fmt.Sprintf("SELECT %s FROM %s WHERE service_id = service AND %s >= since AND %s < until", cols, tb.SamplesView, tb.TimeCol, tb.TimeCol)
	}
	// Intervals as literals ('1 hour'): INTERVAL 1 HOUR is a function call
	// on a cast of a cast, and every call is bound anew wherever the bound
	// occurs (dozens of times in the five parts).
	ceil := func(unit, ts string) string {
		return fmt.Sprintf("date_trunc('%[1]s', %[2]s + INTERVAL '1 %[1]s' - INTERVAL '1 microsecond')", unit, ts)
	}
	hcLo, hcHi := ceil("hour", "since"), "least(date_trunc('hour', until), rolled_until_hourly())"
	hOK := "(" + hcLo + " < " + hcHi + ")"
	hLo := "(CASE WHEN " + hOK + " THEN " + hcLo + " ELSE until END)"
	hHi := "(CASE WHEN " + hOK + " THEN " + hcHi + " ELSE until END)"
	dcLo, dcHi := ceil("day", "since"), "least(date_trunc('day', until), rolled_until_daily())"
	dOK := "(" + dcLo + " < " + dcHi + ")"
	dLo := "(CASE WHEN " + dOK + " THEN " + dcLo + " ELSE " + hHi + " END)"
	dHi := "(CASE WHEN " + dOK + " THEN " + dcHi + " ELSE " + hHi + " END)"
	part := func(table, lo, hi string) string {
		return fmt.Sprintf("SELECT series_id, stack_id, sample_count, sample_period_ns FROM %s WHERE %s >= %s AND %s < %s", table, tb.TimeCol, lo, tb.TimeCol, hi)
	}
	// The parts read the row tables and are joined to the series
	// dictionary once: joining each part (through the row views) took
	// DuckDB 3 ms more to plan, a tenth of a 1 h flame graph.
	return fmt.Sprintf(`SELECT s.build_id, s.pod_name, r.stack_id, r.sample_count, r.sample_period_ns, s.container_id, s.k8s_pod_uid
FROM (%s) r
JOIN %s s ON s.series_id = r.series_id
WHERE s.service_id = service`, strings.Join([]string{
		part(tb.Daily, dLo, dHi),
		part(tb.Hourly, hLo, dLo), part(tb.Hourly, dHi, hHi),
		part(tb.Samples, "since", hLo), part(tb.Samples, hHi, "until"),
	}, "\nUNION ALL\n"), tb.Series)
}

// rfdRows is the RFD layout's rows with stack_id in place of the frame
// list and series_id in place of the series' columns: Samples minus its
// trace-tagged part as untraced rows, plus Traces with hex IDs. Rows of one
// key merge (the RFD table could hold several; every sum is the same).
func rfdRows(t Tier) string {
	tb := TablesFor(t)
	key := tb.TimeCol + ", series_id, stack_id, sample_period_ns"
	on := "a." + tb.TimeCol + " = r." + tb.TimeCol + " AND a.series_id = r.series_id AND a.stack_id = r.stack_id" +
		" AND a.sample_period_ns IS NOT DISTINCT FROM r.sample_period_ns"
	return fmt.Sprintf(`SELECT a.%[4]s, a.series_id, a.stack_id, (a.n - coalesce(r.n, 0))::INTEGER AS sample_count,
       NULL::VARCHAR AS trace_id, NULL::VARCHAR AS span_id, a.sample_period_ns
FROM (SELECT %[1]s, sum(sample_count) AS n FROM %[2]s GROUP BY ALL) a
LEFT JOIN (SELECT %[1]s, sum(sample_count) AS n FROM %[3]s GROUP BY ALL) r ON %[5]s
WHERE a.n > coalesce(r.n, 0)
UNION ALL
SELECT %[4]s, series_id, stack_id, sample_count, %[6]s, %[7]s, sample_period_ns
FROM %[3]s`, key, tb.Samples, tb.Traces, tb.TimeCol, on, TraceHex("trace_id"), SpanHex("span_id"))
}

// rowViewDDL is the view of a row table with the series' columns in place
// of series_id, in the table's column order of version 7.
func rowViewDDL(t Tier, table, view string) string {
	tb := TablesFor(t)
	series := "s.service_id, " + podCol(t, "s.") + "s.build_id"
	rest := "r.sample_count, r.sample_period_ns"
	if table == tb.Traces {
		rest = "r.trace_id, r.span_id, " + rest
	}
	return fmt.Sprintf(`CREATE OR REPLACE VIEW %s AS
SELECT r.%s, %s, r.stack_id, %s, s.container_id, s.k8s_pod_uid
FROM %s r JOIN %s s ON s.series_id = r.series_id`, view, tb.TimeCol, series, rest, table, tb.Series)
}

// namesSQL is the frame dictionary as one list indexed by frame ID
// (internal/stacknames), cross-joined as dict.
func namesSQL(tb Tables) string {
	return stacknames.DictSQL(tb.Frames)
}

// decodeSQL names the frames of the list expression ids.
func decodeSQL(ids string) string {
	return stacknames.DecodeSQL(ids)
}

// viewDDL returns the RFD views and the table macros. They are derived
// objects: recreated on every open, so a newer exporter's definitions win.
func viewDDL(t Tier) []string {
	tb := TablesFor(t)
	pct, decodedPct := "", ""
	if t == Summary {
		// The share of the service's samples in the bucket (every pod).
		pct = "100.0 * r.sample_count / sum(r.sample_count) OVER (PARTITION BY se.service_id, r.bucket_time) AS sample_percentage, "
		decodedPct = "se.pod_name, " + pct
	}
	var out []string
	for _, rv := range tb.rowViews() {
		out = append(out, rowViewDDL(t, rv[0], rv[1]))
	}
	rfd := fmt.Sprintf(`CREATE OR REPLACE VIEW %[1]s AS
WITH r AS (%[2]s)
SELECT r.%[3]s, se.service_id, %[4]sse.build_id, s.stack_frame_ids, r.sample_count, %[5]sr.trace_id, r.span_id, r.sample_period_ns
FROM r JOIN %[6]s s USING (stack_id) JOIN %[7]s se ON se.series_id = r.series_id`, tb.Stacks, rfdRows(t), tb.TimeCol, podCol(t, "se."), pct, tb.StackDict, tb.Series)
	decoded := fmt.Sprintf(`CREATE OR REPLACE VIEW %[1]s AS
WITH dict AS (%[2]s),
s AS (SELECT stack_id, stack_frame_ids, %[3]s AS stack_frames FROM %[4]s, dict),
r AS (%[5]s)
SELECT r.%[6]s, se.service_id, %[7]sse.build_id, s.stack_frame_ids, s.stack_frames,
       array_to_string(s.stack_frames, ';') AS folded,
       r.sample_count, r.trace_id, r.span_id, r.sample_period_ns
FROM r JOIN s USING (stack_id) JOIN %[8]s se ON se.series_id = r.series_id`, tb.Decoded, namesSQL(tb), decodeSQL("stack_frame_ids"), tb.StackDict, rfdRows(t), tb.TimeCol, decodedPct, tb.Series)
	out = append(out, rfd, decoded)

	// Every macro takes the service and a half-open time range [since, until)
	// and reads Samples: every sample once, trace-tagged or not. Stored times
	// are UTC; utc_now() is "now" on that clock, whatever the session's time
	// zone. Rows are summed per stack_id before any frame is decoded.
	// samples_in picks the tiers; the macros read through it.
	inRange := "true"
	rows := "samples_in(service, since, until)"
	macros := []string{
		`CREATE OR REPLACE MACRO samples_in(service, since, until) AS TABLE
` + samplesInSQL(t),
		`CREATE OR REPLACE MACRO utc_now() AS (now() AT TIME ZONE 'UTC')`,
		// Folded stacks (flamegraph.pl input): "root;...;leaf <count>" lines,
		// most samples first. Ties are in the order the file first stored
		// their stacks (the lowest stack_id of a line): ordering them by the
		// line itself made DuckDB sort 6.7 MB of text for a 1 h flame graph
		// of 9,101 stacks, a fifth to a third of the query (44-58 against
		// 31-49 ms, 4 interleaved rounds on each tier's file).
		fmt.Sprintf(`CREATE OR REPLACE MACRO folded_stacks(service, since, until) AS TABLE
WITH agg AS (
    SELECT stack_id, sum(sample_count)::BIGINT AS samples FROM %[1]s WHERE %[2]s GROUP BY stack_id
), s AS MATERIALIZED (
    SELECT s.stack_id, s.stack_frame_ids, agg.samples FROM agg JOIN %[5]s s USING (stack_id)
), dict AS (%[3]s)
SELECT array_to_string(%[4]s, ';') AS folded, sum(s.samples)::BIGINT AS samples
FROM s, dict
GROUP BY folded ORDER BY samples DESC, min(s.stack_id)`, rows, inRange, namesSQL(tb), decodeSQL("s.stack_frame_ids"), tb.StackDict),
		// Leaf (self time) functions ranked by samples.
		fmt.Sprintf(`CREATE OR REPLACE MACRO top_functions(service, since, until, n) AS TABLE
WITH agg AS (
    SELECT s.stack_frame_ids[-1] AS leaf, sum(a.samples)::BIGINT AS samples
    FROM (SELECT stack_id, sum(sample_count) AS samples FROM %[1]s WHERE %[2]s GROUP BY stack_id) a
    JOIN %[4]s s USING (stack_id)
    WHERE len(s.stack_frame_ids) > 0
    GROUP BY leaf
)
SELECT coalesce(f.frame_name, '[missing]') AS function, sum(agg.samples)::BIGINT AS samples,
       round(100.0 * sum(agg.samples) / sum(sum(agg.samples)) OVER (), 2) AS percent
FROM agg LEFT JOIN %[3]s f ON f.frame_id = agg.leaf
GROUP BY function ORDER BY samples DESC, function LIMIT n`, rows, inRange, tb.Frames, tb.StackDict),
		// Stacks passing through a function at any depth.
		fmt.Sprintf(`CREATE OR REPLACE MACRO stacks_containing(service, fn, since, until) AS TABLE
WITH matching AS (
    SELECT stack_id, stack_frame_ids FROM %[4]s
    WHERE list_has_any(stack_frame_ids, (SELECT list(frame_id) FROM %[3]s WHERE frame_name = fn))
), agg AS (
    SELECT stack_id, sum(sample_count)::BIGINT AS samples FROM %[1]s
    WHERE %[2]s AND stack_id IN (SELECT stack_id FROM matching)
    GROUP BY stack_id
), s AS MATERIALIZED (
    SELECT s.stack_id, s.stack_frame_ids, agg.samples FROM agg JOIN matching s USING (stack_id)
), dict AS (%[5]s)
SELECT array_to_string(%[6]s, ';') AS folded, sum(s.samples)::BIGINT AS samples
FROM s, dict
GROUP BY folded ORDER BY samples DESC, min(s.stack_id)`, rows, inRange, tb.Frames, tb.StackDict, namesSQL(tb), decodeSQL("s.stack_frame_ids")),
		// Inclusive share of samples per function in two builds (a function
		// counted once per stack even when recursive), largest change first.
		fmt.Sprintf(`CREATE OR REPLACE MACRO compare_builds(service, build_a, build_b, since, until) AS TABLE
WITH picked AS (
    SELECT build_id, stack_id, sum(sample_count) AS sample_count FROM %[1]s
    WHERE %[2]s AND build_id IN (build_a, build_b)
    GROUP BY build_id, stack_id
), dict AS (%[3]s),
s AS MATERIALIZED (
    SELECT stack_id, stack_frame_ids FROM %[5]s WHERE stack_id IN (SELECT stack_id FROM picked)
), fns AS (
    SELECT stack_id, list_distinct(%[4]s) AS fns FROM s, dict
), totals AS (
    SELECT sum(sample_count) FILTER (WHERE build_id = build_a) AS total_a,
           sum(sample_count) FILTER (WHERE build_id = build_b) AS total_b
    FROM picked
), per_fn AS (
    SELECT fn AS function,
           coalesce(sum(sample_count) FILTER (WHERE build_id = build_a), 0) AS a,
           coalesce(sum(sample_count) FILTER (WHERE build_id = build_b), 0) AS b
    FROM (SELECT p.build_id, p.sample_count, unnest(f.fns) AS fn FROM picked p JOIN fns f USING (stack_id))
    GROUP BY fn
)
SELECT function, a::BIGINT AS samples_a, b::BIGINT AS samples_b,
       round(coalesce(100.0 * a / nullif(total_a, 0), 0), 2) AS percent_a,
       round(coalesce(100.0 * b / nullif(total_b, 0), 0), 2) AS percent_b,
       round(coalesce(100.0 * b / nullif(total_b, 0), 0) - coalesce(100.0 * a / nullif(total_a, 0), 0), 2) AS percent_change
FROM per_fn, totals
ORDER BY abs(percent_change) DESC, function`, rows, inRange, namesSQL(tb), decodeSQL("s.stack_frame_ids"), tb.StackDict),
	}
	return append(out, macros...)
}

// migrations[v] moves a file from version v to v+1.
var migrations = map[int]func(t Tier) []string{
	1: func(t Tier) []string {
		tb := TablesFor(t)
		return []string{
			`ALTER TABLE ` + tb.Stacks + ` ADD COLUMN trace_id VARCHAR`,
			`ALTER TABLE ` + tb.Stacks + ` ADD COLUMN span_id VARCHAR`,
		}
	},
	// Rows written before did not record their period: unknown (NULL).
	2: func(t Tier) []string {
		return []string{`ALTER TABLE ` + TablesFor(t).Stacks + ` ADD COLUMN sample_period_ns BIGINT`}
	},
	3: migrateToStackDictionary,
	// The roll-ups start empty; the writer builds them from the samples
	// when it opens the file.
	4: v7RollupDDL,
	5: migrateFrameTypes,
	6: addWorkloadColumns,
	7: migrateToSeriesDictionary,
	8: migrateDropFrameCounts,
	9: migrateTraceIDs,
}

// addWorkloadColumns adds container_id and k8s_pod_uid to every row table:
// ” for every row written before (nobody knew). A column with a constant
// default is added without rewriting the rows. Tables an earlier step of
// this migration created (as this version writes them) have them already.
func addWorkloadColumns(t Tier) []string {
	tb := TablesFor(t)
	tables := []string{tb.SamplesView, tb.TracesView}
	if t == Summary {
		tables = append(tables, tb.HourlyView, tb.DailyView)
	}
	var out []string
	for _, table := range tables {
		out = append(out,
			`ALTER TABLE `+table+` ADD COLUMN IF NOT EXISTS container_id VARCHAR DEFAULT ''`,
			`ALTER TABLE `+table+` ADD COLUMN IF NOT EXISTS k8s_pod_uid VARCHAR DEFAULT ''`)
	}
	return out
}

// migrateFrameTypes adds what a frame is and where its code lives to the
// frame dictionary. Old frames only kept a name; the suffixes FrameName
// gave kernel and JIT frames still say their type. IDs, names and counts
// are copied as they are, so every total stays the same. The table is
// rebuilt rather than altered: DuckDB refuses to commit an ALTER of a table
// an earlier step of the same transaction updated (3 → 4 sets frame_count).
func migrateFrameTypes(t Tier) []string {
	f := TablesFor(t).Frames
	old := f + "_v5"
	return []string{
		`CREATE TEMP TABLE ` + old + ` AS SELECT * FROM ` + f,
		`DROP TABLE ` + f,
		v8FramesDDL(t),
		`INSERT INTO ` + f + ` (frame_id, frame_name, frame_count, frame_type)
SELECT frame_id, frame_name, frame_count, CASE
    WHEN suffix(frame_name, '` + profileschema.JITSuffix + `') THEN '` + profileschema.FrameTypeJIT + `'
    WHEN suffix(frame_name, '` + profileschema.KernelSuffix + `') THEN '` + profileschema.FrameTypeKernel + `' END
FROM ` + old,
		`DROP TABLE ` + old,
	}
}

// migrateToStackDictionary moves version 3's one table of frame lists into
// the stack dictionary and the row tables: every distinct frame list gets a
// stack_id, every row's samples go to Samples (merged per key, traced or
// not), trace-tagged rows also to Traces with binary IDs, frame_count
// becomes occurrences in the dictionary, and the old table is dropped (its
// name becomes the RFD view). It runs inside Ensure's transaction: a crash
// leaves version 3.
func migrateToStackDictionary(t Tier) []string {
	tb := TablesFor(t)
	old := tb.Stacks
	// The decoded view names the old table; it is recreated after.
	stmts := []string{`DROP VIEW IF EXISTS ` + tb.Decoded}
	stmts = append(stmts, stackDictDDL(t))
	stmts = append(stmts, v7RowTablesDDL(t)...)
	pod := podCol(t, "o.")
	return append(stmts,
		`INSERT INTO `+tb.StackDict+` SELECT (row_number() OVER (ORDER BY first_seen, stack_frame_ids))::INTEGER, stack_frame_ids
FROM (SELECT stack_frame_ids, min(`+tb.TimeCol+`) AS first_seen FROM `+old+` GROUP BY stack_frame_ids)`,
		// BY NAME: the tables are created as this version writes them,
		// with columns later versions added (and their defaults).
		fmt.Sprintf(`INSERT INTO %[1]s BY NAME
SELECT o.%[2]s, o.service_id, %[3]so.build_id, d.stack_id, least(sum(o.sample_count), 2147483647)::INTEGER AS sample_count, o.sample_period_ns
FROM %[4]s o JOIN %[5]s d ON d.stack_frame_ids = o.stack_frame_ids
GROUP BY ALL ORDER BY o.%[2]s`, tb.SamplesView, tb.TimeCol, pod, old, tb.StackDict),
		fmt.Sprintf(`INSERT INTO %[1]s BY NAME
SELECT o.%[2]s, o.service_id, %[3]so.build_id, d.stack_id, unhex(o.trace_id) AS trace_id, unhex(o.span_id) AS span_id, o.sample_count, o.sample_period_ns
FROM %[4]s o JOIN %[5]s d ON d.stack_frame_ids = o.stack_frame_ids
WHERE o.trace_id IS NOT NULL ORDER BY o.%[2]s`, tb.TracesView, tb.TimeCol, pod, old, tb.StackDict),
		`UPDATE `+tb.Frames+` SET frame_count = 0`,
		`UPDATE `+tb.Frames+` AS f SET frame_count = c.n
FROM (SELECT id, count(*) AS n FROM (SELECT unnest(stack_frame_ids) AS id FROM `+tb.StackDict+`) GROUP BY id) AS c
WHERE f.frame_id = c.id`,
		`DROP TABLE `+old,
	)
}

// migrateToSeriesDictionary rebuilds the stack dictionary without its
// key and moves version 7's row tables into the series dictionary: every distinct service, [pod,] build, container and pod UID
// of any row table gets a series_id (in the order they were first seen, as
// the writer assigns them), each row is copied with its series_id into the
// table of its new name (in the writer's row order: time, then stack), and
// the old table is dropped, its name becoming the row view. Totals per
// series, stack and bucket stay as they were. It runs inside Ensure's
// transaction: a crash leaves version 7.
func migrateToSeriesDictionary(t Tier) []string {
	tb := TablesFor(t)
	// The RFD views read the old tables; every view is recreated after.
	// The stack dictionary is rebuilt without its key.
	oldDict := tb.StackDict + "_v7"
	stmts := []string{`DROP VIEW IF EXISTS ` + tb.Decoded, `DROP VIEW IF EXISTS ` + tb.Stacks,
		`CREATE TEMP TABLE ` + oldDict + ` AS SELECT * FROM ` + tb.StackDict,
		`DROP TABLE ` + tb.StackDict,
		stackDictDDL(t),
		`INSERT INTO ` + tb.StackDict + ` SELECT stack_id, stack_frame_ids FROM ` + oldDict + ` ORDER BY stack_id`,
		`DROP TABLE ` + oldDict,
		seriesDDL(t)}
	// Traces as version 9 wrote it: the step to version 10 converts it.
	stmts = append(stmts, rowTablesDDL(t)[0], tracesDDL(t, tb.Traces, "BLOB", "BLOB"))
	stmts = append(stmts, rollupDDL(t)...)
	// rollup_progress is kept: rollupDDL's copy is not needed.
	if t == Summary {
		stmts = stmts[:len(stmts)-1]
	}
	old := tb.rowViews()
	seriesOf := func(table string) string {
		return fmt.Sprintf("SELECT service_id, %sbuild_id, coalesce(container_id, '') AS container_id, coalesce(k8s_pod_uid, '') AS k8s_pod_uid, min(%s) AS first_seen FROM %s GROUP BY ALL",
			podCol(t, ""), tb.TimeCol, table)
	}
	var all []string
	for _, o := range old {
		all = append(all, seriesOf(o[1]))
	}
	cols := SeriesColumns(t)
	stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s
SELECT (row_number() OVER (ORDER BY first_seen, %s))::INTEGER, %s
FROM (SELECT %s, min(first_seen) AS first_seen FROM (%s) GROUP BY ALL)`, tb.Series, cols, cols, cols, strings.Join(all, "\nUNION ALL\n")))
	on := "s.service_id = o.service_id AND s.build_id = o.build_id AND s.container_id = coalesce(o.container_id, '') AND s.k8s_pod_uid = coalesce(o.k8s_pod_uid, '')"
	if t == Summary {
		on += " AND s.pod_name = o.pod_name"
	}
	for _, o := range old {
		table, view := o[0], o[1]
		cols := "o." + tb.TimeCol + ", s.series_id, o.stack_id, o.sample_count, o.sample_period_ns"
		names := tb.TimeCol + ", series_id, stack_id, sample_count, sample_period_ns"
		if table == tb.Traces {
			cols += ", o.trace_id, o.span_id"
			names += ", trace_id, span_id"
		}
		order := "o." + tb.TimeCol + ", o.stack_id"
		if table == tb.Daily {
			order = "o." + tb.TimeCol + ", o.service_id, o.stack_id" // as closeRollups orders the daily roll-up
		}
		stmts = append(stmts,
			fmt.Sprintf("INSERT INTO %s (%s)\nSELECT %s FROM %s o JOIN %s s ON %s ORDER BY %s", table, names, cols, view, tb.Series, on, order),
			"DROP TABLE "+view)
	}
	return stmts
}

// migrateDropFrameCounts rebuilds the frame dictionary without
// frame_count, every frame kept with its ID, name, type, file and line.
// Rebuilt rather than altered, as migrateFrameTypes says: an earlier step
// of the same transaction may have updated the table. A crash leaves
// version 8.
func migrateDropFrameCounts(t Tier) []string {
	f := TablesFor(t).Frames
	old := f + "_v8"
	return []string{
		`CREATE TEMP TABLE ` + old + ` AS SELECT * FROM ` + f,
		`DROP TABLE ` + f,
		framesDDL(t),
		`INSERT INTO ` + f + ` (frame_id, frame_name, frame_type, file_name, line_number)
SELECT frame_id, frame_name, frame_type, file_name, line_number FROM ` + old + ` ORDER BY frame_id`,
		`DROP TABLE ` + old,
	}
}

// migrationFault, when set (tests only), runs before each migration
// statement of step v; an error fails the migration there.
var migrationFault func(v int) error

// ErrForeignFile is returned for a file that holds tables but no hotpath
// schema_version: it is not ours, and we do not touch it.
var ErrForeignFile = errors.New("file holds tables but no hotpath schema_version table")

// Ensure creates the schema of tier t in an empty file, migrates a file of an
// older version, and refuses a file of another tier, a newer version, or one
// that is not a hotpath file. Every change runs in one transaction, so an
// interrupted migration leaves the old version intact.
func Ensure(ctx context.Context, db *sql.DB, t Tier) error {
	return ensure(ctx, db, t, Version)
}

// ensure is Ensure, migrating only up to version target (tests build files
// of older versions with it; the views and macros are made for Version
// only).
func ensure(ctx context.Context, db *sql.DB, t Tier, target int) error {
	if t != Local && t != Summary {
		return fmt.Errorf("unknown tier %q", t)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()

	var nTables, nVersion int
	err = conn.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE table_name = 'schema_version')
		FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main'`).Scan(&nTables, &nVersion)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}

	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin schema transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit

	switch {
	case nVersion == 0 && nTables > 0:
		return fmt.Errorf("%w (%d tables); refusing to write to it", ErrForeignFile, nTables)
	case nVersion == 0:
		stmts := append(tableDDL(t),
			`CREATE TABLE schema_version (version INTEGER NOT NULL, tier VARCHAR NOT NULL, updated_at TIMESTAMP NOT NULL)`,
			fmt.Sprintf(`INSERT INTO schema_version VALUES (%d, '%s', now()::TIMESTAMP)`, Version, t))
		if err := execAll(ctx, tx, stmts); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	default:
		var ver int
		var fileTier string
		if err := tx.QueryRowContext(ctx, `SELECT version, tier FROM schema_version`).Scan(&ver, &fileTier); err != nil {
			return fmt.Errorf("read schema_version: %w", err)
		}
		if Tier(fileTier) != t {
			return fmt.Errorf("file holds the %q tier but the exporter is configured for %q; use another path", fileTier, t)
		}
		if ver > Version {
			return fmt.Errorf("file has schema version %d, newer than this hotpath (%d); upgrade hotpath", ver, Version)
		}
		for v := ver; v < target; v++ {
			step, ok := migrations[v]
			if !ok {
				return fmt.Errorf("no migration from schema version %d", v)
			}
			for _, stmt := range step(t) {
				if migrationFault != nil {
					if err := migrationFault(v); err != nil {
						return fmt.Errorf("migrate schema %d to %d: %w", v, v+1, err)
					}
				}
				if err := execAll(ctx, tx, []string{stmt}); err != nil {
					return fmt.Errorf("migrate schema %d to %d: %w", v, v+1, err)
				}
			}
		}
		if ver < target {
			if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?, updated_at = now()::TIMESTAMP`, target); err != nil {
				return fmt.Errorf("record schema version: %w", err)
			}
		}
	}
	if _, err := tx.ExecContext(ctx, ingestedBatchesDDL); err != nil {
		return fmt.Errorf("create %s: %w", IngestedBatches, err)
	}
	if target == Version {
		hourly, daily, err := readRollups(ctx, tx, t)
		if err != nil {
			return err
		}
		if err := execAll(ctx, tx, append(RollupMacros(hourly, daily), viewDDL(t)...)); err != nil {
			return fmt.Errorf("create views and macros: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}

// legacyStacksDDL is the stack table of versions 1 to 3 (version 1: without
// the trace and period columns).
func legacyStacksDDL(t Tier, version int) string {
	tb := TablesFor(t)
	pod, pct := "", ""
	if t == Summary {
		pod, pct = "\n    pod_name VARCHAR NOT NULL,", "\n    sample_percentage DOUBLE NOT NULL,"
	}
	ddl := `CREATE TABLE ` + tb.Stacks + ` (
    ` + tb.TimeCol + ` TIMESTAMP NOT NULL,
    service_id VARCHAR NOT NULL,` + pod + `
    build_id VARCHAR NOT NULL,
    stack_frame_ids INTEGER[] NOT NULL,
    sample_count INTEGER NOT NULL,` + pct
	if version >= 2 {
		ddl += "\n    trace_id VARCHAR,\n    span_id VARCHAR,"
	}
	if version >= 3 {
		ddl += "\n    sample_period_ns BIGINT,"
	}
	return strings.TrimSuffix(ddl, ",") + "\n)"
}

// LegacyV1 returns the DDL of a version-1 file; tests use it to check the
// migration path on a real old file.
func LegacyV1(t Tier) []string {
	frames := `CREATE TABLE ` + TablesFor(t).Frames + ` (
    frame_id    INTEGER PRIMARY KEY,
    frame_name  VARCHAR UNIQUE NOT NULL,
    frame_count BIGINT  NOT NULL DEFAULT 0
)`
	return []string{frames, legacyStacksDDL(t, 1), binariesDDL(t),
		`CREATE TABLE schema_version (version INTEGER NOT NULL, tier VARCHAR NOT NULL, updated_at TIMESTAMP NOT NULL)`,
		fmt.Sprintf(`INSERT INTO schema_version VALUES (1, '%s', now()::TIMESTAMP)`, t)}
}

// Rollups is how far the summary tier's roll-ups are complete (zero: not
// started, or the local tier).
func Rollups(ctx context.Context, q querier, t Tier) (hourly, daily time.Time, err error) {
	return readRollups(ctx, q, t)
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func readRollups(ctx context.Context, q querier, t Tier) (hourly, daily time.Time, err error) {
	if t != Summary {
		return
	}
	rows, err := q.QueryContext(ctx, `SELECT rollup, rolled_until FROM `+TablesFor(t).Rollups)
	if err != nil {
		return hourly, daily, fmt.Errorf("read roll-up progress: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var until time.Time
		if err := rows.Scan(&name, &until); err != nil {
			return hourly, daily, fmt.Errorf("read roll-up progress: %w", err)
		}
		switch name {
		case "hourly":
			hourly = until.UTC()
		case "daily":
			daily = until.UTC()
		}
	}
	return hourly, daily, rows.Err()
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func execAll(ctx context.Context, db execer, stmts []string) error {
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
			return fmt.Errorf("%s: %w", first, err)
		}
	}
	return nil
}
