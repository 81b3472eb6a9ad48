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
const Version = 3

// Tables names the tables of one tier.
type Tables struct {
	Frames   string // frame dictionary
	Stacks   string // samples (local) or summaries (summary)
	Binaries string // binary metadata
	Decoded  string // view decoding Stacks
	TimeCol  string // time column of Stacks
}

// TablesFor returns the table names of a tier.
func TablesFor(t Tier) Tables {
	if t == Summary {
		return Tables{
			Frames:   "profile_frame_dictionary",
			Stacks:   "cpu_profile_summaries",
			Binaries: "binary_metadata_registry",
			Decoded:  "cpu_profile_summaries_decoded",
			TimeCol:  "bucket_time",
		}
	}
	return Tables{
		Frames:   "profile_frame_dictionary_local",
		Stacks:   "cpu_profile_samples_local",
		Binaries: "binary_metadata_local",
		Decoded:  "cpu_profile_samples_local_decoded",
		TimeCol:  "timestamp",
	}
}

// Index and key choices were made by measurement (see README "Indexes" and
// writer.BenchmarkWrite): the RFD's three ART indexes cost 10–20% of append
// throughput, growing with the table, and its primary key cannot be built
// (DuckDB refuses INTEGER[] index keys), while time-ordered appends already
// give DuckDB's zone maps (min/max per row group) what range queries need.
// The stack tables therefore have no PK or index. The frame dictionary
// and the binary tables are small and written rarely; their keys protect ID
// uniqueness and make the bulk upserts possible.
func tableDDL(t Tier) []string {
	tb := TablesFor(t)
	frames := `CREATE TABLE ` + tb.Frames + ` (
    frame_id    INTEGER PRIMARY KEY,
    frame_name  VARCHAR UNIQUE NOT NULL,
    frame_count BIGINT  NOT NULL DEFAULT 0 -- occurrences in stored stacks; 0 = removable
)`
	var stacks, binaries string
	if t == Summary {
		stacks = `CREATE TABLE ` + tb.Stacks + ` (
    bucket_time       TIMESTAMP NOT NULL,
    service_id        VARCHAR   NOT NULL,
    pod_name          VARCHAR   NOT NULL,
    build_id          VARCHAR   NOT NULL, -- '' when unknown
    stack_frame_ids   INTEGER[] NOT NULL, -- root first, leaf last
    sample_count      INTEGER   NOT NULL,
    sample_percentage DOUBLE    NOT NULL, -- share of the service's samples in the bucket
    trace_id          VARCHAR,            -- 32 lowercase hex chars, NULL without trace
    span_id           VARCHAR,            -- 16 lowercase hex chars, NULL without trace
    sample_period_ns  BIGINT              -- CPU time per sample (1e9 / frequency), NULL = unknown
)`
		binaries = `CREATE TABLE ` + tb.Binaries + ` (
    build_id       VARCHAR PRIMARY KEY,
    service_id     VARCHAR   NOT NULL,
    binary_path    VARCHAR   NOT NULL,
    first_seen     TIMESTAMP NOT NULL,
    last_seen      TIMESTAMP NOT NULL,
    has_debug_info BOOLEAN   NOT NULL DEFAULT false,
    symbol_storage VARCHAR
)`
	} else {
		stacks = `CREATE TABLE ` + tb.Stacks + ` (
    timestamp       TIMESTAMP NOT NULL,
    service_id      VARCHAR   NOT NULL,
    build_id        VARCHAR   NOT NULL, -- '' when unknown
    stack_frame_ids INTEGER[] NOT NULL, -- root first, leaf last
    sample_count    INTEGER   NOT NULL,
    trace_id         VARCHAR,            -- 32 lowercase hex chars, NULL without trace
    span_id          VARCHAR,            -- 16 lowercase hex chars, NULL without trace
    sample_period_ns BIGINT              -- CPU time per sample (1e9 / frequency), NULL = unknown
)`
		binaries = `CREATE TABLE ` + tb.Binaries + ` (
    build_id       VARCHAR PRIMARY KEY,
    service_id     VARCHAR   NOT NULL,
    binary_path    VARCHAR   NOT NULL,
    first_seen     TIMESTAMP NOT NULL,
    last_seen      TIMESTAMP NOT NULL,
    has_debug_info BOOLEAN   NOT NULL DEFAULT false
)`
	}
	return []string{frames, stacks, binaries}
}

// viewDDL returns the decoding view and the table macros. They are derived
// objects: recreated on every open, so a newer exporter's definitions win.
func viewDDL(t Tier) []string {
	tb := TablesFor(t)
	extra := ""
	if t == Summary {
		extra = "s.pod_name, s.sample_percentage, "
	}
	// One map from the whole dictionary, looked up per frame: a join per
	// array element would re-sort every stack.
	view := fmt.Sprintf(`CREATE OR REPLACE VIEW %[1]s AS
WITH dict AS (SELECT map(list(frame_id), list(frame_name)) AS names FROM %[2]s)
SELECT s.%[4]s, s.service_id, %[5]ss.build_id, s.stack_frame_ids,
       list_transform(s.stack_frame_ids, lambda f: coalesce(dict.names[f], '[missing]')) AS stack_frames,
       array_to_string(list_transform(s.stack_frame_ids, lambda f: coalesce(dict.names[f], '[missing]')), ';') AS folded,
       s.sample_count, s.trace_id, s.span_id, s.sample_period_ns
FROM %[3]s s, dict`, tb.Decoded, tb.Frames, tb.Stacks, tb.TimeCol, extra)

	// Every macro takes the service and a half-open time range [since, until).
	// Stored times are UTC; utc_now() is "now" on that clock, whatever the
	// session's time zone.
	macros := []string{
		`CREATE OR REPLACE MACRO utc_now() AS (now() AT TIME ZONE 'UTC')`,
		// Folded stacks (flamegraph.pl input): "root;...;leaf <count>" lines.
		fmt.Sprintf(`CREATE OR REPLACE MACRO folded_stacks(service, since, until) AS TABLE
WITH agg AS (
    SELECT stack_frame_ids, sum(sample_count)::BIGINT AS samples
    FROM %[1]s
    WHERE service_id = service AND %[2]s >= since AND %[2]s < until
    GROUP BY stack_frame_ids
), dict AS (SELECT map(list(frame_id), list(frame_name)) AS names FROM %[3]s)
SELECT array_to_string(list_transform(agg.stack_frame_ids, lambda f: coalesce(dict.names[f], '[missing]')), ';') AS folded,
       sum(agg.samples)::BIGINT AS samples
FROM agg, dict
GROUP BY folded ORDER BY samples DESC, folded`, tb.Stacks, tb.TimeCol, tb.Frames),
		// Leaf (self time) functions ranked by samples.
		fmt.Sprintf(`CREATE OR REPLACE MACRO top_functions(service, since, until, n) AS TABLE
WITH agg AS (
    SELECT stack_frame_ids[-1] AS leaf, sum(sample_count)::BIGINT AS samples
    FROM %[1]s
    WHERE service_id = service AND %[2]s >= since AND %[2]s < until AND len(stack_frame_ids) > 0
    GROUP BY leaf
)
SELECT coalesce(f.frame_name, '[missing]') AS function, sum(agg.samples)::BIGINT AS samples,
       round(100.0 * sum(agg.samples) / sum(sum(agg.samples)) OVER (), 2) AS percent
FROM agg LEFT JOIN %[3]s f ON f.frame_id = agg.leaf
GROUP BY function ORDER BY samples DESC, function LIMIT n`, tb.Stacks, tb.TimeCol, tb.Frames),
		// Stacks passing through a function at any depth.
		fmt.Sprintf(`CREATE OR REPLACE MACRO stacks_containing(service, fn, since, until) AS TABLE
WITH agg AS (
    SELECT stack_frame_ids, sum(sample_count)::BIGINT AS samples
    FROM %[1]s
    WHERE service_id = service AND %[2]s >= since AND %[2]s < until
      AND list_has_any(stack_frame_ids, (SELECT list(frame_id) FROM %[3]s WHERE frame_name = fn))
    GROUP BY stack_frame_ids
), dict AS (SELECT map(list(frame_id), list(frame_name)) AS names FROM %[3]s)
SELECT array_to_string(list_transform(agg.stack_frame_ids, lambda f: coalesce(dict.names[f], '[missing]')), ';') AS folded,
       sum(agg.samples)::BIGINT AS samples
FROM agg, dict
GROUP BY folded ORDER BY samples DESC, folded`, tb.Stacks, tb.TimeCol, tb.Frames),
		// Inclusive share of samples per function in two builds (a function
		// counted once per stack even when recursive), largest change first.
		fmt.Sprintf(`CREATE OR REPLACE MACRO compare_builds(service, build_a, build_b, since, until) AS TABLE
WITH picked AS (
    SELECT build_id, sample_count, stack_frames FROM %[1]s
    WHERE service_id = service AND %[2]s >= since AND %[2]s < until AND build_id IN (build_a, build_b)
), totals AS (
    SELECT sum(sample_count) FILTER (WHERE build_id = build_a) AS total_a,
           sum(sample_count) FILTER (WHERE build_id = build_b) AS total_b
    FROM picked
), per_fn AS (
    SELECT fn AS function,
           coalesce(sum(sample_count) FILTER (WHERE build_id = build_a), 0) AS a,
           coalesce(sum(sample_count) FILTER (WHERE build_id = build_b), 0) AS b
    FROM (SELECT build_id, sample_count, unnest(list_distinct(stack_frames)) AS fn FROM picked)
    GROUP BY fn
)
SELECT function, a::BIGINT AS samples_a, b::BIGINT AS samples_b,
       round(coalesce(100.0 * a / nullif(total_a, 0), 0), 2) AS percent_a,
       round(coalesce(100.0 * b / nullif(total_b, 0), 0), 2) AS percent_b,
       round(coalesce(100.0 * b / nullif(total_b, 0), 0) - coalesce(100.0 * a / nullif(total_a, 0), 0), 2) AS percent_change
FROM per_fn, totals
ORDER BY abs(percent_change) DESC, function`, tb.Decoded, tb.TimeCol),
	}
	return append([]string{view}, macros...)
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
}

// ErrForeignFile is returned for a file that holds tables but no hotpath
// schema_version: it is not ours, and we do not touch it.
var ErrForeignFile = errors.New("file holds tables but no hotpath schema_version table")

// Ensure creates the schema of tier t in an empty file, migrates a file of an
// older version, and refuses a file of another tier, a newer version, or one
// that is not a hotpath file. Every change runs in one transaction, so an
// interrupted migration leaves the old version intact.
func Ensure(ctx context.Context, db *sql.DB, t Tier) error {
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
		for v := ver; v < Version; v++ {
			step, ok := migrations[v]
			if !ok {
				return fmt.Errorf("no migration from schema version %d", v)
			}
			if err := execAll(ctx, tx, step(t)); err != nil {
				return fmt.Errorf("migrate schema %d to %d: %w", v, v+1, err)
			}
		}
		if ver < Version {
			if _, err := tx.ExecContext(ctx, `UPDATE schema_version SET version = ?, updated_at = now()::TIMESTAMP`, Version); err != nil {
				return fmt.Errorf("record schema version: %w", err)
			}
		}
	}
	if err := execAll(ctx, tx, viewDDL(t)); err != nil {
		return fmt.Errorf("create views and macros: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit schema: %w", err)
	}
	return nil
}

// LegacyV1 returns the DDL of a version-1 file; tests use it to check the
// migration path on a real old file.
func LegacyV1(t Tier) []string {
	stmts := tableDDL(t)
	for i, s := range stmts {
		// Drop the two trailing trace columns added in version 2.
		if j := strings.Index(s, ",\n    trace_id"); j >= 0 {
			stmts[i] = s[:j] + "\n)"
		}
	}
	return append(stmts,
		`CREATE TABLE schema_version (version INTEGER NOT NULL, tier VARCHAR NOT NULL, updated_at TIMESTAMP NOT NULL)`,
		fmt.Sprintf(`INSERT INTO schema_version VALUES (1, '%s', now()::TIMESTAMP)`, t))
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
