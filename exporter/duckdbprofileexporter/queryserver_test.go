package duckdbprofileexporter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

func TestQueryEndpointServesReadOnlySQL(t *testing.T) {
	cfg := testConfig(t, "local")
	cfg.Query.MaxRows = 3
	cfg.Query.Timeout = 500 * time.Millisecond
	e := startExporter(t, cfg)
	populate(t, e)
	c := sqlquery.Client{Endpoint: e.server.Addr()}
	ctx := context.Background()

	res, err := c.Query(ctx, "SELECT function, samples FROM top_functions('api', utc_now() - INTERVAL 1 DAY, utc_now(), 2)")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 2 || res.Rows[0][0] != "encoding/json.Unmarshal" || res.Columns[1] != "samples" || res.Truncated != "" {
		t.Fatalf("result: %+v", res)
	}
	res, err = c.Query(ctx, "SELECT * FROM cpu_profile_samples_local")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3 || !strings.Contains(res.Truncated, "row limit 3") {
		t.Fatalf("row limit: %d rows, truncated %q", len(res.Rows), res.Truncated)
	}

	for stmt, want := range map[string]string{
		"DELETE FROM cpu_profile_samples_local":                "only a single read-only statement",
		"SELECT 1; DROP TABLE cpu_profile_samples_local":       "only a single read-only statement",
		"SELECT 1; SELECT 2":                                   "got 2 statements",
		"ATTACH '/tmp/x.duckdb' AS x":                          "only a single read-only statement",
		"SELECT * FROM read_csv('/etc/passwd')":                "file system operations are disabled",
		"SELEC 1":                                              "syntax error",
		"SELECT count(*) FROM range(1000000000000) a":          "timed out",
		"COPY cpu_profile_samples_local TO '/tmp/out.csv'":     "only a single read-only statement",
		"CREATE TABLE x AS SELECT 1":                           "only a single read-only statement",
		"SELECT * FROM query('DELETE FROM schema_version')":    "",
		"INSERT INTO schema_version VALUES (1, 'x', now())":    "only a single read-only statement",
		"PRAGMA enable_profiling":                              "only a single read-only statement",
		"SET threads = 1":                                      "only a single read-only statement",
		"CALL checkpoint()":                                    "only a single read-only statement",
		"SELECT setval('x', 1)":                                "",
		"EXPORT DATABASE '/tmp/x'":                             "only a single read-only statement",
		"DETACH DATABASE x":                                    "only a single read-only statement",
		"UPDATE schema_version SET version = 99":               "only a single read-only statement",
		"WITH d AS (DELETE FROM schema_version) SELECT 1":      "",
		"SELECT * FROM duckdb_tables() WHERE table_name = 'x'": "-",
	} {
		_, err := c.Query(ctx, stmt)
		switch want {
		case "-": // allowed
			if err != nil {
				t.Errorf("%s: %v", stmt, err)
			}
		case "": // any error will do: a statement that writes must be refused
			if err == nil {
				t.Errorf("%s was accepted: the endpoint must refuse every statement that writes", stmt)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err %v, want %q", stmt, err, want)
			}
		}
	}
	// Nothing was changed by any of the above.
	if got := rowsOf(t, e.w.DB(), "SELECT version FROM schema_version"); strings.Join(got, ",") != fmt.Sprint(schema.Version) {
		t.Fatalf("schema_version: %v", got)
	}
	if got := rowsOf(t, e.w.DB(), "SELECT count(*) > 0 FROM cpu_profile_samples_local"); strings.Join(got, ",") != "true" {
		t.Fatalf("rows gone: %v", got)
	}
}

func TestQueryEndpointToken(t *testing.T) {
	cfg := testConfig(t, "local")
	cfg.Query.Token = "s3cret"
	e := startExporter(t, cfg)
	ctx := context.Background()
	if _, err := (sqlquery.Client{Endpoint: e.server.Addr()}).Query(ctx, "SELECT 1"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without token: %v", err)
	}
	if _, err := (sqlquery.Client{Endpoint: e.server.Addr(), Token: "wrong"}).Query(ctx, "SELECT 1"); err == nil {
		t.Fatal("wrong token accepted")
	}
	if _, err := (sqlquery.Client{Endpoint: e.server.Addr(), Token: "s3cret"}).Query(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
}
