package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

// exitError carries a specific exit code (see exitCodes).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit codes; documented in `hotpath --help` and the README.
const (
	exitOK           = 0
	exitError1       = 1 // bad input, unreachable database, failed query
	exitUsage        = 2 // wrong flags or arguments
	exitGateFailed   = 3 // gate: a regression beyond the rules
	exitInconclusive = 4 // gate: too few samples for a verdict
)

const exitCodesHelp = `exit codes:
  0  success (gate: PASS)
  1  error: bad input, no data, database unreachable
  2  usage: unknown command or flag
  3  gate: FAIL, a regression beyond the rules
  4  gate: INCONCLUSIVE, too few samples for a verdict`

// targetFlags say where the profiles are.
type targetFlags struct {
	db, token string
	local     bool
}

func addTargetFlags(fs *flag.FlagSet) *targetFlags {
	t := &targetFlags{}
	fs.StringVar(&t.db, "db", os.Getenv("HOTPATH_DB"), "DuckDB file, or HOST:PORT of a running collector's query endpoint\n(default: the gateway at "+profilequery.GatewayEndpoint+", else its file under $HOTPATH_STATE_DIR, ./var or /var/lib/hotpath;\nwith --local the agent at "+profilequery.AgentEndpoint+" and agent.duckdb)")
	fs.StringVar(&t.token, "token", os.Getenv("HOTPATH_QUERY_TOKEN"), "bearer token of the query endpoint, when it has one")
	fs.BoolVar(&t.local, "local", false, "read the agent's local tier (15 s resolution, last hour) instead of the gateway's 1-minute summaries")
	return t
}

func (t *targetFlags) open(ctx context.Context) (profilequery.Source, error) {
	return profilequery.Open(ctx, profilequery.Target{DB: t.db, Token: t.token, Local: t.local})
}

// selectFlags pick a profile: service, pod, build, time range.
type selectFlags struct {
	service, pod, buildID, since, until, tz string
}

func addSelectFlags(fs *flag.FlagSet) *selectFlags {
	s := &selectFlags{}
	fs.StringVar(&s.service, "service", "", "service name (service.name); required")
	fs.StringVar(&s.pod, "pod", "", "only this pod (gateway tier)")
	fs.StringVar(&s.buildID, "build-id", "", "only this build ID (or a prefix of it)")
	fs.StringVar(&s.since, "since", "1h", "start: a duration before now (15m, 2h, 7d), \"2025-12-15 14:00:00\" or RFC 3339")
	fs.StringVar(&s.until, "until", "", "end, same forms as --since (default now)")
	fs.StringVar(&s.tz, "tz", "UTC", "time zone of absolute times without an offset (e.g. Europe/Berlin, Local)")
	return s
}

func (s *selectFlags) location() (*time.Location, error) {
	loc, err := time.LoadLocation(s.tz)
	if err != nil {
		return nil, fmt.Errorf("--tz %q: %w", s.tz, err)
	}
	return loc, nil
}

func (s *selectFlags) selector(now time.Time) (profilequery.Selector, error) {
	loc, err := s.location()
	if err != nil {
		return profilequery.Selector{}, err
	}
	r, err := timerange.New(s.since, s.until, now, loc)
	if err != nil {
		return profilequery.Selector{}, err
	}
	return profilequery.Selector{Service: s.service, Pod: s.pod, BuildID: s.buildID, Range: r}, nil
}

// needService explains a missing --service by listing the services that
// have samples, which is what a new user wants to see.
func needService(ctx context.Context, src profilequery.Source, r timerange.Range) error {
	svcs, err := profilequery.Services(ctx, src, r)
	if err != nil {
		return fmt.Errorf("--service is required: %w", err)
	}
	if len(svcs) == 0 {
		return fmt.Errorf("--service is required (no service has samples in %s on %s)", r, src.Describe())
	}
	var parts []string
	for _, s := range svcs {
		parts = append(parts, fmt.Sprintf("%s (%d samples)", s.Service, s.Samples))
	}
	return fmt.Errorf("--service is required; services with samples in %s: %s", r, strings.Join(parts, ", "))
}

// loadProfile opens the target and loads the selection.
func loadProfile(ctx context.Context, t *targetFlags, s *selectFlags, now time.Time) (*profilequery.Profile, error) {
	sel, err := s.selector(now)
	if err != nil {
		return nil, err
	}
	src, err := t.open(ctx)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if sel.Service == "" {
		return nil, needService(ctx, src, sel.Range)
	}
	return profilequery.Load(ctx, src, sel)
}

// parseFlags parses args; -h prints the usage and returns errUsage too (so
// the exit code is 2, as for flag errors). Positional arguments are refused.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// usageFunc prints a subcommand's synopsis, examples and flags.
func usageFunc(fs *flag.FlagSet, w io.Writer, synopsis, examples string) func() {
	return func() {
		fmt.Fprintf(w, "usage: %s\n\nexamples:\n%s\nflags:\n", synopsis, examples)
		fs.PrintDefaults()
	}
}

// colourOn decides colour: only on a terminal, and never with NO_COLOR.
func colourOn(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(w)
}

// outputFile opens -o, or returns stdout.
func outputFile(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("create output: %w", err)
	}
	return f, f.Close, nil
}
