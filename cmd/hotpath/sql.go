package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

const sqlExamples = `  hotpath sql "SELECT * FROM top_functions('api', utc_now() - INTERVAL 1 HOUR, utc_now(), 10)"
  hotpath sql --endpoint 127.0.0.1:7073 "SELECT * FROM folded_stacks('api', utc_now() - INTERVAL 1 DAY, utc_now())"
  hotpath sql --db var/agent.duckdb --format json "SELECT * FROM schema_version"
  echo "SELECT tier, version FROM schema_version" | hotpath sql --db var/agent.duckdb`

// newSQLCommand queries through the running collector's endpoint; when none
// answers, it opens --db read-only (DuckDB lets one process hold a file, so
// the file is only reachable directly when no collector runs). A --db given
// without --endpoint is the one place asked, as in the other commands: a
// collector's HOST:PORT, or a file, read through the endpoint of the
// collector holding it (sqlquery.ServedBy) or opened. The default endpoint
// is the agent's, and asked first it answered for whichever file --db named
// (the gateway's file got the agent's rows).
func newSQLCommand() *cobra.Command {
	var (
		endpoint, token, dbPath, format string
		noHeader                        bool
		timeout                         time.Duration
		maxRows                         int
	)
	cmd := &cobra.Command{
		Use:         "sql [flags] \"SELECT ...\"",
		Short:       "run a read-only SQL query on a profile database",
		Long:        "Runs a read-only SQL query (the query as arguments, or on standard input) through a running collector's query endpoint, or on --db opened read-only when none answers. --db without --endpoint is the only place asked: a file, or HOST:PORT of a collector's endpoint. Tables and columns: docs/sql.md.",
		Example:     sqlExamples,
		Annotations: map[string]string{flagsBeforeArgs: "true"},
	}
	fs := cmd.Flags()
	// The query is every argument after the flags, as it was with the
	// standard flag package: "SELECT a - -1" stays one statement.
	fs.SetInterspersed(false)
	fs.StringVar(&endpoint, "endpoint", envOr("HOTPATH_QUERY_ENDPOINT", sqlquery.DefaultAgentEndpoint), "query endpoint of a running collector (exporter query.endpoint)")
	fs.StringVar(&token, "token", os.Getenv("HOTPATH_QUERY_TOKEN"), "bearer token of the endpoint (exporter query.token)")
	fs.StringVar(&dbPath, "db", os.Getenv("HOTPATH_DB"), "DuckDB file to open read-only when no collector serves it, or HOST:PORT of a collector's endpoint\n(given without --endpoint, the only place asked)")
	fs.StringVar(&format, "format", "", "output: table, csv or json (default: table on a terminal, csv otherwise)")
	fs.BoolVar(&noHeader, "no-header", false, "omit the header line (table, csv)")
	fs.DurationVar(&timeout, "timeout", 30*time.Second, "query timeout when opening the file directly")
	fs.IntVar(&maxRows, "max-rows", sqlquery.DefaultLimits.MaxRows, "row limit when opening the file directly")
	completeValues(cmd, "format", "table", "csv", "json")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
		stmt := strings.Join(args, " ")
		if strings.TrimSpace(stmt) == "" {
			b, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("read query from stdin: %w", err)
			}
			stmt = string(b)
		}
		if strings.TrimSpace(stmt) == "" {
			return usagef("no query: give it as arguments or on standard input")
		}
		if format == "" {
			format = "csv"
			if isTerminal(stdout) {
				format = "table"
			}
		}
		if format != "table" && format != "csv" && format != "json" {
			return fmt.Errorf("--format must be table, csv or json, got %q", format)
		}

		if cmd.Flags().Changed("db") && !cmd.Flags().Changed("endpoint") {
			// --db alone is the one place asked: a collector's endpoint,
			// or a file, through the endpoint of the collector holding it.
			if profilequery.IsEndpoint(dbPath) {
				endpoint, dbPath = dbPath, ""
			} else if endpoint = sqlquery.ServedBy(cmd.Context(), dbPath, token, append([]string{endpoint}, profilequery.CollectorEndpoints()...)...); endpoint != "" {
				dbPath = ""
			}
		}
		res, err := query(cmd.Context(), stmt, endpoint, token, dbPath, sqlquery.Limits{Timeout: timeout, MaxRows: maxRows, MaxBytes: sqlquery.DefaultLimits.MaxBytes})
		if err != nil {
			return err
		}
		if err := write(stdout, res, format, !noHeader); err != nil {
			return err
		}
		if res.Truncated != "" {
			fmt.Fprintf(stderr, "hotpath sql: result truncated: %s\n", res.Truncated)
		}
		return nil
	})
	return cmd
}

func query(ctx context.Context, stmt, endpoint, token, dbPath string, lim sqlquery.Limits) (*sqlquery.Result, error) {
	if endpoint != "" {
		res, err := sqlquery.Client{Endpoint: endpoint, Token: token}.Query(ctx, stmt)
		if err == nil || !errors.Is(err, sqlquery.ErrUnreachable) {
			return res, err
		}
		if dbPath == "" {
			return nil, fmt.Errorf("no collector answers at %s, and there is no --db file to open instead: %w", endpoint, err)
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
		if sqlquery.IsHeld(err) {
			return nil, fmt.Errorf("%w\n(a collector holds the file, and no endpoint asked answers for it: query it through that collector's endpoint, --db HOST:PORT (its query.endpoint))", err)
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
