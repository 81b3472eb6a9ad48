package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/sqlquery"
)

var errUsage = errors.New("usage")

// runSQL queries through the running collector's endpoint; when none
// answers, it opens --db read-only (DuckDB lets one process hold a file, so
// the file is only reachable directly when no collector runs).
func runSQL(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sql", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", envOr("HOTPATH_QUERY_ENDPOINT", sqlquery.DefaultAgentEndpoint), "query endpoint of a running collector (exporter query.endpoint)")
	token := fs.String("token", os.Getenv("HOTPATH_QUERY_TOKEN"), "bearer token of the endpoint (exporter query.token)")
	dbPath := fs.String("db", os.Getenv("HOTPATH_DB"), "DuckDB file to open read-only when no collector serves it")
	format := fs.String("format", "", "output: table, csv or json (default: table on a terminal, csv otherwise)")
	noHeader := fs.Bool("no-header", false, "omit the header line (table, csv)")
	timeout := fs.Duration("timeout", 30*time.Second, "query timeout when opening the file directly")
	maxRows := fs.Int("max-rows", sqlquery.DefaultLimits.MaxRows, "row limit when opening the file directly")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: hotpath sql [flags] \"SELECT ...\"   (or the query on stdin)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	stmt := strings.Join(fs.Args(), " ")
	if strings.TrimSpace(stmt) == "" {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("read query from stdin: %w", err)
		}
		stmt = string(b)
	}
	if strings.TrimSpace(stmt) == "" {
		fs.Usage()
		return errUsage
	}
	if *format == "" {
		*format = "csv"
		if isTerminal(stdout) {
			*format = "table"
		}
	}
	if *format != "table" && *format != "csv" && *format != "json" {
		return fmt.Errorf("--format must be table, csv or json, got %q", *format)
	}

	res, err := query(ctx, stmt, *endpoint, *token, *dbPath, sqlquery.Limits{Timeout: *timeout, MaxRows: *maxRows, MaxBytes: sqlquery.DefaultLimits.MaxBytes})
	if err != nil {
		return err
	}
	if err := write(stdout, res, *format, !*noHeader); err != nil {
		return err
	}
	if res.Truncated != "" {
		fmt.Fprintf(stderr, "hotpath sql: result truncated: %s\n", res.Truncated)
	}
	return nil
}

func query(ctx context.Context, stmt, endpoint, token, dbPath string, lim sqlquery.Limits) (*sqlquery.Result, error) {
	if endpoint != "" {
		res, err := sqlquery.Client{Endpoint: endpoint, Token: token}.Query(ctx, stmt)
		if err == nil || !errors.Is(err, sqlquery.ErrUnreachable) {
			return res, err
		}
		if dbPath == "" {
			return nil, fmt.Errorf("no collector answers at %s and no --db file was given: %w", endpoint, err)
		}
	}
	if dbPath == "" {
		return nil, errors.New("give --db FILE or --endpoint HOST:PORT")
	}
	if _, err := os.Stat(dbPath); err != nil {
		return nil, fmt.Errorf("open %s: %w", dbPath, err)
	}
	db, closeDB, err := sqlquery.OpenReadOnly(dbPath)
	if err != nil {
		if strings.Contains(err.Error(), "lock") {
			return nil, fmt.Errorf("%w\n(a collector holds the file; query it through its endpoint: --endpoint = the exporter's query.endpoint)", err)
		}
		return nil, err
	}
	defer closeDB()
	return sqlquery.Run(ctx, db, stmt, lim)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
