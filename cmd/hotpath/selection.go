package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// Exit codes; documented in `hotpath --help` and cmd/hotpath/README.md.
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
  2  usage: unknown command or flag, missing argument, no command
  3  gate: FAIL, a regression beyond the rules
  4  gate: INCONCLUSIVE, too few samples for a verdict`

// targetFlags say where the profiles are.
type targetFlags struct {
	db, token string
	local     bool
}

func addTargetFlags(fs *pflag.FlagSet) *targetFlags {
	t := &targetFlags{}
	fs.StringVar(&t.db, "db", os.Getenv("HOTPATH_DB"), "DuckDB file (one a running collector holds is read through its endpoint), or HOST:PORT of a collector's query endpoint\n(default: the gateway at "+profilequery.GatewayEndpoint+", else its file under $HOTPATH_STATE_DIR, ./var or /var/lib/hotpath;\nwith --local the agent at "+profilequery.AgentEndpoint+" and agent.duckdb)")
	fs.StringVar(&t.token, "token", os.Getenv("HOTPATH_QUERY_TOKEN"), "bearer token of the query endpoint, when it has one")
	fs.BoolVar(&t.local, "local", false, "read the agent's local tier (15 s resolution, last hour) instead of the gateway's 1-minute summaries")
	return t
}

func (t *targetFlags) open(ctx context.Context) (profilequery.Source, error) {
	return profilequery.Open(ctx, profilequery.Target{DB: t.db, Token: t.token, Local: t.local})
}

// selectFlags pick a profile: service, pod, build, time range.
type selectFlags struct {
	service, pod, container, buildID, since, until, tz string
}

func addSelectFlags(fs *pflag.FlagSet) *selectFlags {
	s := &selectFlags{}
	fs.StringVar(&s.service, "service", "", "service name (service.name); required")
	fs.StringVar(&s.pod, "pod", "", "only this pod: its UID (k8s.pod.uid, either tier), or on the gateway its pod_name (k8s.pod.name where a sender set it, else host.name; the agent reads no pod names)")
	fs.StringVar(&s.container, "container", "", "only this container: its ID (container.id) or a prefix of it, as docker ps and crictl ps print it")
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
	return profilequery.Selector{Service: s.service, Pod: s.pod, Container: s.container, BuildID: s.buildID, Range: r}, nil
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
	return fmt.Errorf("--service is required; services with samples in %s: %s", r, profilequery.ListServices(svcs))
}

// loadProfile opens the target and loads the selection, with a progress
// indicator on progressTo (a 30-day range takes a while).
func loadProfile(ctx context.Context, t *targetFlags, s *selectFlags, now time.Time, progressTo io.Writer) (*profilequery.Profile, error) {
	sel, err := s.selector(now)
	if err != nil {
		return nil, err
	}
	defer startProgress(progressTo, "reading profiles of "+sel.Range.String(), 0)()
	src, err := t.open(ctx)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	if sel.Service == "" {
		return nil, needService(ctx, src, sel.Range)
	}
	return loadInHugePages(ctx, src, sel)
}

// completeServices completes --service with the services that have samples
// in the database the command line points at (--db, --local, --token):
// over the selected range when --since is given, else over the last 30
// days (the gateway's retention). A database that does not answer within
// a few seconds completes nothing rather than hanging the shell.
func completeServices(t *targetFlags, s *selectFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		now := time.Now()
		r := timerange.Range{Since: now.Add(-30 * 24 * time.Hour), Until: now}
		if s != nil && cmd.Flags().Changed("since") {
			if sel, err := s.selector(now); err == nil {
				r = sel.Range
			}
		}
		src, err := t.open(ctx)
		if err != nil {
			cobra.CompDebugln("hotpath: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer src.Close()
		svcs, err := profilequery.Services(ctx, src, r)
		if err != nil {
			cobra.CompDebugln("hotpath: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, svc := range svcs {
			if strings.HasPrefix(svc.Service, toComplete) {
				out = append(out, cobra.CompletionWithDesc(svc.Service, fmt.Sprintf("%d samples", svc.Samples)))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeValues completes a flag with a fixed list (formats).
func completeValues(cmd *cobra.Command, flag string, values ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
}

// colourOn decides colour: only on a terminal, and never with NO_COLOR.
func colourOn(w io.Writer) bool {
	return os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(w)
}

// outputFile opens -o, or returns stdout.
// The writer is buffered (close flushes it): the folded format writes a
// line at a time, and unbuffered that was a write system call per stack,
// 9,166 for an hour's profile.
func outputFile(path string, stdout io.Writer) (io.Writer, func() error, error) {
	if path == "" || path == "-" {
		bw := bufio.NewWriter(stdout)
		return bw, bw.Flush, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, nil, fmt.Errorf("create output: %w", err)
	}
	bw := bufio.NewWriter(f)
	return bw, func() error { return errors.Join(bw.Flush(), f.Close()) }, nil
}
