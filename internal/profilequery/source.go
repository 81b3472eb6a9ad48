// Package profilequery reads CPU profiles out of a hotpath DuckDB file (either
// tier, through a running collector's read-only SQL endpoint or the file
// itself) into an in-memory Profile of folded stacks, and derives what the
// CLI shows from it: folded text, top functions, differential profiles, the
// deploy gate's verdict and pprof.
package profilequery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/stacknames"
)

// Tier is which side of the pipeline a file belongs to ("local": the agent's
// 15 s samples, "summary": the gateway's 1-minute summaries).
type Tier string

const (
	Local   Tier = "local"
	Summary Tier = "summary"
)

// tables names a tier's tables. They mirror the exporter's schema package,
// which is internal to the exporter; the schema_version check in Open
// refuses files this code does not know.
type tables struct {
	// stacks holds every sample (version 4: the Samples table; before:
	// the RFD table, trace-tagged rows included), traces the trace-tagged
	// ones (version 4: the Traces table with binary IDs; before: stacks).
	stacks, traces, frames, binaries, timeCol string
	// stackDict is the stack dictionary rows point into by stack_id; ""
	// before version 4, when rows carried stack_frame_ids.
	stackDict string
	// period is the sampling period of a row in nanoseconds, NULL when
	// unknown (files before schema version 3 did not store it).
	period string
	// samplesIn: the file has samples_in(service, since, until), which
	// picks the coarsest tier answering a range (schema version 6).
	samplesIn bool
	// frameMeta: the frame dictionary has frame_type, file_name and
	// line_number (schema version 6).
	frameMeta bool
	// workload: the row tables and samples_in have container_id and
	// k8s_pod_uid (schema version 7; version 8 reads them through views
	// of the same names and columns).
	workload bool
	// uuidTraces: the trace tables hold trace_id as UUID and span_id as
	// UBIGINT (schema version 10; BLOB before).
	uuidTraces bool
}

func tablesFor(t Tier) tables {
	if t == Summary {
		return tables{stacks: "stack_summaries", traces: "trace_summaries", frames: "profile_frame_dictionary", binaries: "binary_metadata_registry",
			timeCol: "bucket_time", stackDict: "profile_stack_dictionary", period: "sample_period_ns"}
	}
	return tables{stacks: "stack_samples_local", traces: "trace_samples_local", frames: "profile_frame_dictionary_local", binaries: "binary_metadata_local",
		timeCol: "timestamp", stackDict: "profile_stack_dictionary_local", period: "sample_period_ns"}
}

// rfdStacks is the RFD name of a tier's stacks (a table before version 4,
// a view since).
func rfdStacks(t Tier) string {
	if t == Summary {
		return "cpu_profile_summaries"
	}
	return "cpu_profile_samples_local"
}

// tablesOf is tablesFor the source's tier and schema version.
func tablesOf(src Source) tables {
	tb := tablesFor(src.Tier())
	v, ok := src.(interface{ version() int64 })
	if !ok || v.version() >= 5 {
		tb.samplesIn = true
		tb.frameMeta = !ok || v.version() >= 6
		tb.workload = !ok || v.version() >= 7
		tb.uuidTraces = !ok || v.version() >= 10
		return tb
	}
	if v.version() == 4 {
		return tb
	}
	tb.stacks, tb.traces, tb.stackDict = rfdStacks(src.Tier()), rfdStacks(src.Tier()), ""
	if v.version() < 3 {
		tb.period = "NULL::BIGINT"
	}
	return tb
}

// traceWhere selects a trace's rows (id as ParseTraceID returns it).
func (tb tables) traceWhere(id string) string {
	switch {
	case tb.stackDict == "":
		return "trace_id = " + sqlquery.Quote(id)
	case tb.uuidTraces:
		return "trace_id = CAST(" + sqlquery.Quote(id) + " AS UUID)"
	}
	return "trace_id = unhex(" + sqlquery.Quote(id) + ")"
}

// spanHex is the span_id column as lowercase hex.
func (tb tables) spanHex() string {
	switch {
	case tb.stackDict == "":
		return "span_id"
	case tb.uuidTraces:
		return "printf('%016x', span_id)"
	}
	return "lower(hex(span_id))"
}

// stacksSQL sums the rows of table matching where per group columns, stack
// and sampling period. Its rows (columns part, id, the group columns, text,
// frame_type, file_name, line_number) are of three parts, in no set order:
//   - "g", a group: its number (id) and the group columns' values;
//   - "s", up to stackChunk stacks as text, separated by commas: the number
//     of its group, samples, cpu_ns, period ("-" when NULL) and the frame
//     IDs (stacknames.ListSQL), separated by single spaces (no character
//     JSON escapes, which would take the decoder's slow path);
//   - "f", a frame those stacks hold: frame_id (id), frame_name (text) and
//     what the file knows of it (frame_type, file_name, line_number).
//
// readStacks names the frames. Naming them in SQL built a list of names for
// every stack and sent each name again for every stack holding it: a 1 h
// profile of 9,165 stacks read 137,000 strings (6.7 MB) where it now reads
// 641 names and the ID lists. Stacks go as text a few thousand to a row:
// as a row each, a 30-day profile's 20,000 stacks were 206,000 values
// (3.3 MB of JSON) that the endpoint encoded one by one and the CLI decoded
// into as many Go values, about 110 ms of the CLI's CPU; as text they are
// 647 rows and 2.0 MB. It is one statement so the names come from the
// stacks' snapshot: the exporter gives the IDs of frames retention removed
// to new frames.
func (tb tables) stacksSQL(table, group, where string, fallback time.Duration) string {
	key, frames, join, nonEmpty := "stack_id", "s.stack_frame_ids", " JOIN "+tb.stackDict+" s USING (stack_id)", ""
	if tb.stackDict == "" {
		key, frames, join, nonEmpty = "stack_frame_ids", "agg.stack_frame_ids", "", " AND len(stack_frame_ids) > 0"
	}
	var aggGroup, nulls, same []string
	for _, c := range strings.Split(group, ", ") {
		aggGroup = append(aggGroup, "agg."+c)
		nulls = append(nulls, "NULL")
		same = append(same, "st."+c+" IS NOT DISTINCT FROM g."+c)
	}
	meta := "NULL, NULL, NULL"
	if tb.frameMeta {
		meta = "f.frame_type, f.file_name, f.line_number"
	}
	return fmt.Sprintf(`WITH agg AS (
    SELECT %[1]s, %[2]s, %[3]s AS period, sum(sample_count)::BIGINT AS samples, %[4]s AS cpu_ns
    FROM %[5]s WHERE %[6]s%[7]s
    GROUP BY ALL
), stacks AS MATERIALIZED (SELECT %[8]s, %[9]s AS frame_ids, agg.samples, agg.cpu_ns, agg.period FROM agg%[10]s),
stack_groups AS MATERIALIZED (SELECT %[1]s, (row_number() OVER (ORDER BY %[1]s) - 1)::BIGINT AS g FROM (SELECT DISTINCT %[1]s FROM stacks)),
stack_lines AS (
    SELECT (row_number() OVER () - 1) // %[15]d AS chunk,
           concat_ws(' ', g.g, st.samples, st.cpu_ns::VARCHAR, coalesce(st.period::VARCHAR, '-'), %[14]s) AS line
    FROM stacks st JOIN stack_groups g ON %[16]s)
SELECT 'g' AS part, g AS id, %[1]s, NULL::VARCHAR AS text, NULL::VARCHAR AS frame_type, NULL::VARCHAR AS file_name, NULL::INTEGER AS line_number
FROM stack_groups
UNION ALL
SELECT 's', chunk, %[11]s, string_agg(line, ','), NULL, NULL, NULL FROM stack_lines GROUP BY chunk
UNION ALL
SELECT 'f', f.frame_id, %[11]s, f.frame_name, %[12]s
FROM %[13]s f WHERE f.frame_id IN (SELECT unnest(frame_ids) FROM stacks)`,
		group, key, tb.period, cpuSQL(tb, fallback), table, where, nonEmpty,
		strings.Join(aggGroup, ", "), frames, join, strings.Join(nulls, ", "), meta, tb.frames,
		stacknames.ListSQL("st.frame_ids"), stackChunk, strings.Join(same, " AND "))
}

// stackChunk is how many stacks a row of stacksSQL's result carries:
// a few hundred kilobytes of text.
const stackChunk = 4096

// stackRow is one stack of a stacksSQL result, its frames named.
type stackRow struct {
	group   []string // the group columns' values (shared by the group's rows)
	frames  []string // root first
	samples int64
	cpu     float64
	period  any // int64 nanoseconds, nil when stored without one
	key     stackKey
}

// stackKey is the same for rows of the same group values and frames, and
// only for those: the rows of one stack stored at several sampling
// periods, or in several of the tiers samples_in reads. The stack's frame
// IDs as stored stand for its frames when the dictionary held every one:
// it names each frame once, so rows of one ID list hold the same frames,
// and comparing IDs spares joining every stack's names (20,000 stacks of
// a 30-day profile). Otherwise (distinct IDs then read the same name,
// stacknames.Missing) it is the names.
type stackKey struct {
	group int64 // the group's number in the result
	ids   string
	names string
}

// readStacks reads a stacksSQL result of ngroup group columns: its stacks,
// and what the file knows of the frames they hold by name (only frames it
// knows something of). A frame ID the dictionary does not hold reads
// stacknames.Missing, as in the SQL views.
func readStacks(res *sqlquery.Result, ngroup int) ([]stackRow, map[string]FrameInfo, error) {
	const part, id = 0, 1
	text := 2 + ngroup // frame_type, file_name, line_number follow
	names := &stacknames.Names{}
	info := map[string]FrameInfo{}
	groups := map[int64][]string{}
	var chunks []string
	for _, r := range res.Rows {
		if len(r) != text+4 {
			return nil, nil, fmt.Errorf("read stacks: %d columns, want %d", len(r), text+4)
		}
		n, err := asInt64(r[id])
		if err != nil {
			return nil, nil, fmt.Errorf("read stacks: id: %w", err)
		}
		switch asString(r[part]) {
		case "g":
			g := make([]string, ngroup)
			for i := range g {
				g[i] = asString(r[id+1+i])
			}
			groups[n] = g
		case "s":
			chunks = append(chunks, asString(r[text]))
		case "f":
			name := asString(r[text])
			names.Set(n, name)
			if r[text+1] == nil && r[text+2] == nil && r[text+3] == nil {
				continue
			}
			line, err := asInt64(r[text+3])
			if err != nil {
				return nil, nil, fmt.Errorf("read stacks: line_number: %w", err)
			}
			info[name] = FrameInfo{Type: asString(r[text+1]), File: asString(r[text+2]), Line: line}
		default:
			return nil, nil, fmt.Errorf("read stacks: unexpected part %v", r[part])
		}
	}
	nstacks, nframes := 0, 0
	for _, c := range chunks {
		nstacks += strings.Count(c, ",") + 1
		nframes += strings.Count(c, " ") // at least every frame
	}
	stacks := make([]stackRow, 0, nstacks)
	frames := make([]string, 0, nframes) // every stack's, one after another
	for _, c := range chunks {
		for text := range strings.SplitSeq(c, ",") {
			s, err := parseStack(text, groups, names, &frames)
			if err != nil {
				return nil, nil, fmt.Errorf("read stacks: %w in %.80q", err, text)
			}
			stacks = append(stacks, s)
		}
	}
	return stacks, info, nil
}

// parseStack reads one stack of a stacksSQL chunk, naming its frames at
// the end of frames.
func parseStack(text string, groups map[int64][]string, names *stacknames.Names, frames *[]string) (stackRow, error) {
	var f [4]string
	rest := text
	for i := range f {
		var ok bool
		if f[i], rest, ok = strings.Cut(rest, " "); !ok && i < len(f)-1 {
			return stackRow{}, fmt.Errorf("%d fields, want at least 4", i+1)
		}
	}
	g, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return stackRow{}, fmt.Errorf("group: %w", err)
	}
	group, ok := groups[g]
	if !ok {
		return stackRow{}, fmt.Errorf("group %d not in the result", g)
	}
	r := stackRow{group: group, key: stackKey{group: g}}
	if r.samples, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return stackRow{}, fmt.Errorf("samples: %w", err)
	}
	if r.cpu, err = strconv.ParseFloat(f[2], 64); err != nil {
		return stackRow{}, fmt.Errorf("cpu_ns: %w", err)
	}
	if f[3] != "-" {
		p, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			return stackRow{}, fmt.Errorf("period: %w", err)
		}
		r.period = p
	}
	start := len(*frames)
	all, complete, err := names.AppendList(*frames, rest)
	if err != nil {
		return stackRow{}, fmt.Errorf("frame_ids: %w", err)
	}
	*frames = all
	r.frames = all[start:len(all):len(all)]
	if complete {
		r.key.ids = rest
	} else {
		r.key.names = strings.Join(r.frames, "\x00")
	}
	return r, nil
}

// supportedVersions are the schema versions whose tables are read here.
var supportedVersions = map[int64]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 10: true}

// Default endpoints and files of `make run` (distributions/*/config.yaml).
const (
	AgentEndpoint   = sqlquery.DefaultAgentEndpoint
	GatewayEndpoint = sqlquery.DefaultGatewayEndpoint
)

// Source answers read-only SQL on one hotpath file.
type Source interface {
	Query(ctx context.Context, stmt string) (*sqlquery.Result, error)
	Tier() Tier
	// Describe says where the data comes from, for messages.
	Describe() string
	Close() error
}

// Target says where to look. DB is a file path or a collector's host:port;
// empty picks the defaults of the tier (endpoint first, then the file).
type Target struct {
	DB       string
	Token    string
	Local    bool   // the agent tier (15 s, 1 h) instead of the gateway's
	StateDir string // where the default files live; "" = $HOTPATH_STATE_DIR, ./var, /var/lib/hotpath
}

// IsEndpoint reports whether db names a host:port rather than a file.
func IsEndpoint(db string) bool {
	if strings.ContainsAny(db, `/\`) || strings.HasSuffix(db, ".duckdb") {
		return false
	}
	if _, err := os.Stat(db); err == nil {
		return false
	}
	_, port, err := net.SplitHostPort(db)
	return err == nil && port != ""
}

// collectorEndpoints are the query endpoints of the agent and the gateway:
// $HOTPATH_AGENT_QUERY and $HOTPATH_GATEWAY_QUERY, else those of the shipped
// configs.
func collectorEndpoints() (agent, gateway string) {
	agent, gateway = AgentEndpoint, GatewayEndpoint
	if v := os.Getenv("HOTPATH_AGENT_QUERY"); v != "" {
		agent = v
	}
	if v := os.Getenv("HOTPATH_GATEWAY_QUERY"); v != "" {
		gateway = v
	}
	return agent, gateway
}

// DefaultEndpoint is the query endpoint of the tier's collector: the
// agent's with local, else the gateway's ($HOTPATH_AGENT_QUERY,
// $HOTPATH_GATEWAY_QUERY, else the shipped configs').
func DefaultEndpoint(local bool) string {
	agent, gateway := collectorEndpoints()
	if local {
		return agent
	}
	return gateway
}

// NothingAnswers is the error of a command that found neither the tier's
// collector at ep nor its file: what to start or to point at instead.
func NothingAnswers(ep, file string, local bool) error {
	err := fmt.Errorf("no collector answers at %s and there is no file %s: start one with `make run`, or give --db FILE|HOST:PORT", ep, file)
	if !local {
		err = fmt.Errorf("%w (or --local for the agent's tier)", err)
	}
	return err
}

// CollectorEndpoints are the endpoints a file a collector holds is looked
// for at (sqlquery.ServedBy): the agent's and the gateway's.
func CollectorEndpoints() []string {
	agent, gateway := collectorEndpoints()
	return []string{agent, gateway}
}

// DefaultFile is the tier's file under the state directory used by
// `make run` ($HOTPATH_STATE_DIR, else ./var when it holds the file, else
// /var/lib/hotpath, the shipped configs' default).
func DefaultFile(local bool, stateDir string) string {
	name := "gateway.duckdb"
	if local {
		name = "agent.duckdb"
	}
	if stateDir == "" {
		stateDir = os.Getenv("HOTPATH_STATE_DIR")
	}
	if stateDir != "" {
		return filepath.Join(stateDir, name)
	}
	if _, err := os.Stat(filepath.Join("var", name)); err == nil {
		return filepath.Join("var", name)
	}
	return filepath.Join("/var/lib/hotpath", name)
}

// Open connects to the target and checks it holds a hotpath file of a known
// schema version. With no DB it tries the tier's endpoint, then its file.
func Open(ctx context.Context, t Target) (Source, error) {
	var src Source
	var err error
	switch {
	case t.DB != "" && IsEndpoint(t.DB):
		src = &endpointSource{c: sqlquery.Client{Endpoint: t.DB, Token: t.Token}}
	case t.DB != "":
		// A file a collector holds is read through its endpoint.
		if ep := sqlquery.ServedBy(ctx, t.DB, t.Token, CollectorEndpoints()...); ep != "" {
			src = &endpointSource{c: sqlquery.Client{Endpoint: ep, Token: t.Token}}
			break
		}
		src, err = openFile(t.DB)
	default:
		ep := DefaultEndpoint(t.Local)
		src = &endpointSource{c: sqlquery.Client{Endpoint: ep, Token: t.Token}}
		if _, qerr := src.Query(ctx, "SELECT 1"); errors.Is(qerr, sqlquery.ErrUnreachable) {
			file := DefaultFile(t.Local, t.StateDir)
			if _, serr := os.Stat(file); serr != nil {
				return nil, NothingAnswers(ep, file, t.Local)
			}
			src, err = openFile(file)
		}
	}
	if err != nil {
		return nil, err
	}
	tier, ver, err := detectTier(ctx, src)
	if err != nil {
		src.Close()
		return nil, err
	}
	if t.DB != "" && t.Local && tier != Local {
		src.Close()
		return nil, fmt.Errorf("--local asks for the agent tier but %s holds the %s tier", src.Describe(), tier)
	}
	switch s := src.(type) {
	case *endpointSource:
		s.tier, s.ver = tier, ver
	case *fileSource:
		s.tier, s.ver = tier, ver
	}
	return src, nil
}

func detectTier(ctx context.Context, src Source) (Tier, int64, error) {
	res, err := src.Query(ctx, "SELECT tier, version FROM schema_version")
	if err != nil {
		return "", 0, fmt.Errorf("read schema_version of %s (is it a hotpath file?): %w", src.Describe(), err)
	}
	if len(res.Rows) != 1 {
		return "", 0, fmt.Errorf("%s: schema_version has %d rows, want 1", src.Describe(), len(res.Rows))
	}
	tier := Tier(asString(res.Rows[0][0]))
	ver, _ := asInt64(res.Rows[0][1])
	if tier != Local && tier != Summary {
		return "", 0, fmt.Errorf("%s: unknown tier %q", src.Describe(), tier)
	}
	if !supportedVersions[ver] {
		return "", 0, fmt.Errorf("%s: schema version %d is not supported by this hotpath; upgrade hotpath", src.Describe(), ver)
	}
	return tier, ver, nil
}

type endpointSource struct {
	c    sqlquery.Client
	tier Tier
	ver  int64
}

func (s *endpointSource) version() int64 { return s.ver }

func (s *endpointSource) Query(ctx context.Context, stmt string) (*sqlquery.Result, error) {
	return s.c.Query(ctx, stmt)
}
func (s *endpointSource) Tier() Tier       { return s.tier }
func (s *endpointSource) Describe() string { return "collector at " + s.c.Endpoint }
func (s *endpointSource) Close() error     { return nil }

type fileSource struct {
	path  string
	run   func(ctx context.Context, stmt string) (*sqlquery.Result, error)
	close func() error
	tier  Tier
	ver   int64
}

func (s *fileSource) version() int64 { return s.ver }

// openFile opens path read-only. DuckDB lets one process hold a file, so
// this fails while a collector runs; the error says to use its endpoint.
func openFile(path string) (*fileSource, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db, closeDB, err := sqlquery.OpenReadOnly(path)
	if err == nil {
		err = db.Ping()
	}
	if err != nil {
		if closeDB != nil {
			closeDB()
		}
		if sqlquery.IsHeld(err) {
			return nil, fmt.Errorf("%w\n(a collector holds the file, and neither %s answers for it: query it through that collector's endpoint, --db HOST:PORT (its query.endpoint))", err, strings.Join(CollectorEndpoints(), " nor "))
		}
		return nil, err
	}
	// Profiles are aggregated in the query, so rows are distinct stacks;
	// the endpoint's row cap is a guard for people's ad hoc SQL, not this.
	lim := sqlquery.DefaultLimits
	lim.MaxRows = 10_000_000
	lim.MaxBytes = 2 << 30
	return &fileSource{
		path: path,
		run: func(ctx context.Context, stmt string) (*sqlquery.Result, error) {
			return sqlquery.Run(ctx, db, stmt, lim)
		},
		close: closeDB,
	}, nil
}

func (s *fileSource) Query(ctx context.Context, stmt string) (*sqlquery.Result, error) {
	return s.run(ctx, stmt)
}
func (s *fileSource) Tier() Tier       { return s.tier }
func (s *fileSource) Describe() string { return s.path }
func (s *fileSource) Close() error     { return s.close() }

// Tables are a tier's table names, for commands that write (symbolize).
type Tables struct {
	Frames, StackDict, Binaries string
	// Series is the series dictionary: series_id → service, [pod,] build,
	// container and pod UID.
	Series string
	// Rows are the tables whose rows point into StackDict by stack_id and
	// into Series by series_id.
	Rows []string
	// HasSymbolStorage: the gateway's binary registry records where
	// symbols were found.
	HasSymbolStorage bool
}

// WritableVersion is the schema version whose tables TablesOf names.
const WritableVersion = 10

// TablesOf returns the table names of tier t (schema version 10).
func TablesOf(t Tier) Tables {
	tb := tablesFor(t)
	if t == Summary {
		return Tables{Frames: tb.frames, StackDict: tb.stackDict, Binaries: tb.binaries, Series: "profile_series_dictionary",
			Rows: []string{"stack_summary_rows", "trace_summary_rows", "stack_summary_rows_hourly", "stack_summary_rows_daily"}, HasSymbolStorage: true}
	}
	return Tables{Frames: tb.frames, StackDict: tb.stackDict, Binaries: tb.binaries, Series: "profile_series_dictionary_local",
		Rows: []string{"stack_sample_rows_local", "trace_sample_rows_local"}}
}
