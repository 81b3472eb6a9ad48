// Command hotpath is the command-line side of hotpath. Subcommands:
//
//	hotpath sql [flags] "SELECT ..."   query a profile database
//	hotpath profile --service S        folded stacks, JSON, pprof or a flame graph
//	hotpath top --service S            top functions by self and cumulative share
//	hotpath gate --service S ...       deploy gate: fail on a CPU share regression
//	hotpath web --service S            the pprof web UI for a range
//	hotpath symbolize --build-id B ... resolve stored raw addresses with a debug file
//	hotpath capture --pid N            on-demand high-frequency capture by the agent
//	hotpath trace-profile TRACE_ID     per-service CPU profile of one request (RFD 078)
//	hotpath completion bash            shell completion
//
// It uses the standard flag package, one FlagSet per subcommand; a new
// subcommand is one more entry in commands.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"sql":       {summary: "run a read-only SQL query on a profile database", run: runSQL},
	"profile":   {summary: "profile of a service over a range: folded, json, pprof, svg or html; --compare-with for a diff", run: runProfile},
	"top":       {summary: "top functions by self and cumulative share of CPU", run: runTop},
	"gate":      {summary: "deploy gate: exit 3 when a function's CPU share regressed between two builds or ranges", run: runGate},
	"web":       {summary: "open the pprof web UI (graph, flame graph, top) for a range on a loopback port", run: runWeb},
	"symbolize": {summary: "resolve stored raw addresses of a build ID with a debug/symbol file", run: runSymbolize},
	"capture":   {summary: "ask the running agent to profile a pid or service at high frequency for a while", run: runCapture},
}

// completion reads the table, so it joins it at init (a literal entry would
// be an initialization cycle).
func init() {
	commands["completion"] = command{summary: "print a shell completion script (bash)", run: runCompletion}
}

// commandNames lists the commands, sorted.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "hotpath: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	if err := cmd.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, errUsage) {
			return exitUsage
		}
		fmt.Fprintf(stderr, "hotpath %s: %v\n", args[0], err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return exitError1
	}
	return exitOK
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: hotpath <command> [flags]     (hotpath <command> --help for flags and examples)\n\ncommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprint(w, `
examples:
  hotpath profile --service api --since 1h > cpu.folded
  hotpath profile --service api --since 1h --format html -o cpu.html
  hotpath top --service api --since 1h
  hotpath gate --service api --baseline OLD_BUILD_ID --candidate NEW_BUILD_ID --max-increase 5pp
  hotpath web --service api --since 1h

Data: the gateway's 1-minute summaries (127.0.0.1:7073, or its file), or with
--local the agent's 15 s samples of the last hour (127.0.0.1:7072); --db
FILE|HOST:PORT points anywhere else. Times are UTC unless --tz.

`)
	fmt.Fprintln(w, exitCodesHelp)
}
