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

const sqlExamples = `  hotpath sql "SELECT * FROM folded_stacks('api', utc_now() - INTERVAL 1 DAY, utc_now())"
  hotpath sql --local "SELECT * FROM top_functions('api', utc_now() - INTERVAL 1 HOUR, utc_now(), 10)"
  hotpath sql --db var/agent.duckdb --format json "SELECT * FROM schema_version"
  echo "SELECT tier, version FROM schema_version" | hotpath sql --db 127.0.0.1:7072`

// newSQLCommand asks the database the other commands read: the gateway's
// (or with --local the agent's) endpoint, else its file, or --db. It asked
// the agent by default, the one command that did, so `hotpath sql --local`
// was an unknown flag and `hotpath sql` read another tier than
// `hotpath top` beside it. DuckDB lets one process hold a file, so a file
// is only opened when no collector answers for it. --endpoint, kept for
// scripts, is an endpoint asked first with --db as the file to open when it
// does not answer.
func newSQLCommand() *cobra.Command {
	var (
		endpoint, format string
		noHeader         bool
		timeout          time.Duration
		maxRows          int
	)
	cmd := &cobra.Command{
		Use:         "sql [flags] \"SELECT ...\"",
		Short:       "run a read-only SQL query on a profile database",
		Long:        "Runs a read-only SQL query (the query as arguments, or on standard input) on the gateway's database, or with --local the agent's: through the collector's query endpoint, else on its file opened read-only, as the other commands read them. --db names the one place to ask instead: a file, or HOST:PORT of a collector's endpoint. Tables and columns: docs/sql.md.",
		Example:     sqlExamples,
		Annotations: map[string]string{flagsBeforeArgs: "true"},
	}
	fs := cmd.Flags()
	// The query is every argument after the flags, as it was with the
	// standard flag package: "SELECT a - -1" stays one statement.
	fs.SetInterspersed(false)
	target := addTargetFlags(fs)
	fs.StringVar(&endpoint, "endpoint", os.Getenv("HOTPATH_QUERY_ENDPOINT"), "query endpoint to ask first (exporter query.endpoint); with --db, the file to open when it does not answer")
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
		flags := cmd.Flags()
		if target.local && (flags.Changed("db") || flags.Changed("endpoint")) {
			return usagef("--local asks the agent's endpoint and file; give it without --db and --endpoint, which name the place themselves")
		}

		dbPath, defaults := target.db, false
		switch {
		case target.local || endpoint == "" && dbPath == "":
			// The tier's collector, else its file: where `hotpath top`
			// and the others look (an explicit --local wins over
			// $HOTPATH_DB and $HOTPATH_QUERY_ENDPOINT).
			endpoint = profilequery.DefaultEndpoint(target.local)
			dbPath = profilequery.DefaultFile(target.local, "")
			defaults = true
		case endpoint == "" || flags.Changed("db") && !flags.Changed("endpoint"):
			// --db alone is the one place asked (not after
			// $HOTPATH_QUERY_ENDPOINT): a collector's endpoint, or a
			// file, through the endpoint of the collector holding it.
			asked := profilequery.CollectorEndpoints()
			if endpoint != "" {
				asked = append([]string{endpoint}, asked...)
			}
			if profilequery.IsEndpoint(dbPath) {
				endpoint, dbPath = dbPath, ""
			} else if endpoint = sqlquery.ServedBy(cmd.Context(), dbPath, target.token, asked...); endpoint != "" {
				dbPath = ""
			}
		}
		res, err := query(cmd.Context(), stmt, endpoint, target.token, dbPath, sqlquery.Limits{Timeout: timeout, MaxRows: maxRows, MaxBytes: sqlquery.DefaultLimits.MaxBytes})
		if defaults && errors.Is(err, os.ErrNotExist) {
			return profilequery.NothingAnswers(endpoint, dbPath, target.local)
		}
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
