package duckdbprofileexporter

import (
	"compress/gzip"
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

const (
	buildV1 = "1f0e9d8c7b6a59483726150f1e2d3c4b5a697887"
	buildV2 = "2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d"
)

// populate pushes 50 minutes of an "api" service that deploys a new build
// (with a hashing regression) 25 minutes ago, plus a "db" service without a
// build ID, ending now: the cookbook's queries use utc_now().
func populate(t *testing.T, e *profilesExporter) {
	t.Helper()
	now := time.Now().UTC()
	serve := []string{"main.handle", "net/http.(*Server).Serve", "main.main"} // leaf first
	with := func(leaf ...string) []string { return append(append([]string{}, leaf...), serve...) }
	for m := 50; m >= 1; m-- {
		at := now.Add(-time.Duration(m) * time.Minute)
		build, hashing := buildV1, int64(2)
		if m <= 25 {
			build, hashing = buildV2, 9
		}
		b := newProfileBuilder()
		for _, pod := range []string{"api-1", "api-2"} {
			b.process(at, map[string]any{
				profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: pod,
				profileschema.AttrK8sPodUID: "uid-" + pod, profileschema.AttrContainerID: "cid-" + pod,
				profileschema.AttrBuildID: build, profileschema.AttrProcessExePath: "/usr/local/bin/api",
				profileschema.AttrBinaryHasDebugInfo: build == buildV1,
			})
			b.sample(5, with("encoding/json.Unmarshal"), nil, nil)
			b.sample(3, with("runtime.mallocgc", "encoding/json.Unmarshal"), nil, nil)
			b.sample(hashing, with("crypto/sha256.block", "main.hash"), nil, nil)
			b.sample(1, with("copy_user_generic_[k]", "do_syscall_64_[k]", "syscall.Syscall"), nil, nil)
			b.sample(2, with("encoding/json.Unmarshal"), traceA, spanA)
		}
		b.process(at, map[string]any{profileschema.AttrServiceName: "db", profileschema.AttrHostName: "db-host"})
		b.sample(4, []string{"btree.search", "db.query", "main.main"}, nil, nil)
		if err := e.push(context.Background(), b.pd); err != nil {
			t.Fatal(err)
		}
	}
}

var sqlBlock = regexp.MustCompile("(?s)```sql\n(.*?)```")

// TestCookbookQueriesRun runs every ```sql block of docs/sql.md through the
// same read-only path as the query endpoint, on the tier it is meant for
// ("-- tier: summary" marks summary-only blocks; blocks naming a *_local
// object are local-only; the rest run on both), and requires rows back.
func TestCookbookQueriesRun(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := sqlBlock.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) < 10 {
		t.Fatalf("found %d sql blocks in docs/sql.md", len(blocks))
	}
	local := startExporter(t, testConfig(t, "local"))
	summary := startExporter(t, testConfig(t, "summary"))
	populate(t, local)
	populate(t, summary)

	for i, m := range blocks {
		q := strings.TrimSpace(m[1])
		var tiers []*profilesExporter
		switch {
		case strings.HasPrefix(q, "-- tier: summary"):
			tiers = []*profilesExporter{summary}
		case strings.Contains(q, "_local"):
			tiers = []*profilesExporter{local}
		default:
			tiers = []*profilesExporter{local, summary}
		}
		for _, e := range tiers {
			res, err := sqlquery.Run(context.Background(), e.w.DB(), q, sqlquery.DefaultLimits)
			if err != nil {
				t.Errorf("block %d on %s tier failed: %v\n%s", i+1, e.cfg.Tier, err, q)
				continue
			}
			if len(res.Rows) == 0 {
				t.Errorf("block %d on %s tier returned no rows:\n%s", i+1, e.cfg.Tier, q)
			}
		}
	}
}

// TestMacrosAnswerCorrectly checks the macros' numbers, not just that they run.
func TestMacrosAnswerCorrectly(t *testing.T) {
	e := startExporter(t, testConfig(t, "local"))
	populate(t, e)
	db := e.w.DB()
	week := "utc_now() - INTERVAL 7 DAY, utc_now()"
	// 2 pods × 50 minutes × (5 + 2 traced) samples of the Unmarshal leaf stack.
	got := rowsOf(t, db, "SELECT * FROM folded_stacks('api', "+week+") WHERE folded = 'main.main;net/http.(*Server).Serve;main.handle;encoding/json.Unmarshal'")
	if strings.Join(got, ",") != "main.main;net/http.(*Server).Serve;main.handle;encoding/json.Unmarshal|700" {
		t.Fatalf("folded_stacks: %v", got)
	}
	got = rowsOf(t, db, "SELECT function, samples FROM top_functions('api', "+week+", 2)")
	// Unmarshal leaf 700; sha256: 2×(25×2 + 25×9) = 550.
	if strings.Join(got, ",") != "encoding/json.Unmarshal|700,crypto/sha256.block|550" {
		t.Fatalf("top_functions: %v", got)
	}
	got = rowsOf(t, db, "SELECT sum(samples) FROM stacks_containing('api', 'encoding/json.Unmarshal', "+week+")")
	if strings.Join(got, ",") != "1000" { // 700 + mallocgc 300
		t.Fatalf("stacks_containing: %v", got)
	}
	got = rowsOf(t, db, "SELECT function, samples_a, samples_b FROM compare_builds('api', '"+buildV1+"', '"+buildV2+"', "+week+") LIMIT 1")
	if strings.Join(got, ",") != "crypto/sha256.block|100|450" {
		t.Fatalf("compare_builds: %v", got)
	}
	got = rowsOf(t, db, "SELECT DISTINCT stack_frames[-1] FROM cpu_profile_samples_local_decoded WHERE folded LIKE '%syscall%'")
	if strings.Join(got, ",") != "copy_user_generic_[k]" {
		t.Fatalf("kernel leaf: %v", got)
	}
}

// TestCookbookAnswersSameAfterMigration runs every ```sql block of
// docs/sql.md on the schema version 2 files in testdata (as written, with
// their own version 2 macros) and again after the exporter upgraded them:
// the RFD names, now views, must give the same rows. "now" is the files'
// end. Blocks about the file itself (SHOW, DESCRIBE, schema_version) and
// the stack dictionary (version 4) are skipped.
func TestCookbookAnswersSameAfterMigration(t *testing.T) {
	doc, err := os.ReadFile("../../docs/sql.md")
	if err != nil {
		t.Fatal(err)
	}
	now := "TIMESTAMP '" + fixtureEnd.Format(time.DateTime) + "'"
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), tier+".duckdb")
			gunzip(t, filepath.Join("testdata", "v2-"+tier+".duckdb.gz"), path)
			var queries []string
			for _, m := range sqlBlock.FindAllStringSubmatch(string(doc), -1) {
				q := strings.TrimSpace(m[1])
				switch {
				case strings.HasPrefix(q, "-- tier: summary") && tier != "summary",
					strings.Contains(q, "_local") && tier != "local",
					strings.HasPrefix(q, "SHOW"), strings.HasPrefix(q, "DESCRIBE"),
					strings.Contains(q, "schema_version"), strings.Contains(q, "profile_stack_dictionary"),
					strings.Contains(q, "sample_period_ns"), // not in version 2
					strings.Contains(q, "stack_samples_local"), strings.Contains(q, "trace_samples_local"),
					strings.Contains(q, "samples_in"), strings.Contains(q, "rollup_progress"): // version 5
					continue
				}
				queries = append(queries, strings.ReplaceAll(q, "utc_now()", now))
			}
			if len(queries) < 8 {
				t.Fatalf("%d queries to compare", len(queries))
			}
			before := make([][]string, len(queries))
			db, err := sql.Open("duckdb", path)
			if err != nil {
				t.Fatal(err)
			}
			for i, q := range queries {
				before[i] = sortedRows(t, db, q)
				if len(before[i]) == 0 {
					t.Errorf("no rows on the version 2 file:\n%s", q)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig(t, tier)
			cfg.Path = path
			keep := 100 * 365 * 24 * time.Hour // the data is older than the tier's retention
			cfg.Retention = RetentionConfig{Stacks: keep, TraceStacks: keep, Metadata: keep}
			e := startExporter(t, cfg) // migrates
			for i, q := range queries {
				if got := sortedRows(t, e.w.DB(), q); strings.Join(got, "\n") != strings.Join(before[i], "\n") {
					t.Errorf("different answer after migration:\n%s\nbefore (%d rows): %v\nafter (%d rows): %v", q, len(before[i]), head(before[i]), len(got), head(got))
				}
			}
		})
	}
}

func head(rows []string) []string { return rows[:min(len(rows), 5)] }

func sortedRows(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows := rowsOf(t, db, q)
	sort.Strings(rows)
	return rows
}

func gunzip(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
