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
//	hotpath completion bash|zsh|fish   shell completion
//
// The command tree is cobra's: each command is a *cobra.Command built by a
// new…Command function in its own file; a new subcommand is one more entry
// in newRootCommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hotpath-dev/hotpath/internal/duckdballoc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const rootLong = `hotpath reads the CPU profiles that the hotpath collectors store.

Data: the gateway's 1-minute summaries (127.0.0.1:7073, or its file), or with
--local the agent's 15 s samples of the last hour (127.0.0.1:7072); --db
FILE|HOST:PORT points anywhere else. Times are UTC unless --tz.

` + exitCodesHelp

const rootExamples = `  hotpath profile --service api --since 1h > cpu.folded
  hotpath profile --service api --since 1h --format html -o cpu.html
  hotpath top --service api --since 1h
  hotpath gate --service api --baseline OLD_BUILD_ID --candidate NEW_BUILD_ID --max-increase 5pp
  hotpath web --service api --since 1h
  source <(hotpath completion bash)`

// newRootCommand builds the command tree; output goes to stdout, messages
// and progress to stderr.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "hotpath",
		Short:         "query and compare the CPU profiles hotpath stores",
		Long:          rootLong,
		Example:       rootExamples,
		Version:       versionInfo().String(),
		SilenceErrors: true, // run prints errors once, with the command's name
		SilenceUsage:  true, // a failed query is not a usage mistake
		// Without a command: the usage on stderr, exit 2.
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprint(cmd.ErrOrStderr(), cmd.UsageString())
			return errNoCommand
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &usageError{err.Error()}
	})
	root.AddCommand(
		newSQLCommand(),
		newProfileCommand(),
		newTopCommand(),
		newGateCommand(),
		newWebCommand(),
		newSymbolizeCommand(),
		newCompactCommand(),
		newCaptureCommand(),
		newTraceProfileCommand(),
	)
	for _, c := range root.Commands() {
		c.Example = strings.TrimRight(c.Example, "\n")
	}
	return root
}

// noArgs refuses positional arguments (exit 2), naming the first.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unexpected argument %q", args[0])
	}
	return nil
}

// run executes one command line and returns its exit code (exitCodes);
// tests call it in-process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// A command that reads a file pays for every page of memory DuckDB
	// touches, all of it fresh in a new process: huge pages make that a
	// third faster (internal/duckdballoc). Without them (a DuckDB build
	// without jemalloc, a kernel without transparent huge pages) commands
	// run as before, so an error here is not the user's concern.
	_ = duckdballoc.AdviseHugePages()
	root := newRootCommand(stdout, stderr)
	root.SetArgs(goFlagStyle(root, args))
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errNoCommand) {
		return exitUsage
	}
	if cmd == nil {
		cmd = root
	}
	name := cmd.CommandPath()
	var fail *commandFailed
	if !errors.As(err, &fail) {
		// cobra refused the command line (unknown command or flag, bad
		// value), or the command found its arguments incomplete.
		fmt.Fprintf(stderr, "%s: %v\nUsage:\n  %s\nRun '%s --help' for examples and flags.\n", name, err, cmd.UseLine(), name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, fail.err)
	var ee *exitError
	if errors.As(fail.err, &ee) {
		return ee.code
	}
	return exitError1
}

// flagsBeforeArgs is the annotation of a command whose flags all come
// before its arguments (cobra.Command.Annotations).
const flagsBeforeArgs = "hotpath/flags-before-args"

// errNoCommand: hotpath alone printed its usage.
var errNoCommand = errors.New("no command")

// usageError is a command line a command cannot run (exit 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// commandFailed marks an error of a command that ran (exit 1, or the
// exitError's code), as opposed to one cobra returns for the command line.
type commandFailed struct{ err error }

func (e *commandFailed) Error() string { return e.err.Error() }
func (e *commandFailed) Unwrap() error { return e.err }

// action adapts a command's body to cobra's RunE: its errors are failures
// of the command, except usage errors, which stay usage errors.
func action(body func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := body(cmd, args)
		var ue *usageError
		if err == nil || errors.As(err, &ue) {
			return err
		}
		return &commandFailed{err}
	}
}

// goFlagStyle keeps the command lines of the CLI's first version working:
// it was built on the standard flag package, which takes a long flag with
// one dash (-service api) and a one-letter flag with two (--o file). pflag
// reads -service as -s -e -r…, so such arguments are rewritten to the form
// pflag expects, for the flags the command has. Arguments after "--" and
// values are left alone.
func goFlagStyle(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	cmd.InitDefaultHelpFlag()
	cmd.InitDefaultVersionFlag()
	lookup := func(name string) *pflag.Flag {
		if f := cmd.Flags().Lookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().Lookup(name)
	}
	shorthand := func(name string) *pflag.Flag {
		if f := cmd.Flags().ShorthandLookup(name); f != nil {
			return f
		}
		return cmd.InheritedFlags().ShorthandLookup(name)
	}
	// The words of the command's path ("sql") come first among the
	// non-flag arguments; after them, a command whose flags precede its
	// arguments (sql) takes the rest as they are.
	names := strings.Fields(cmd.CommandPath())[1:]
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if len(names) > 0 && a == names[0] {
				names = names[1:]
			} else if cmd.Annotations[flagsBeforeArgs] != "" {
				break
			}
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		switch {
		case strings.HasPrefix(a, "--") && len(name) == 1:
			if f = shorthand(name); f != nil {
				out[i] = a[1:]
			}
		case !strings.HasPrefix(a, "--") && len(name) > 1:
			if f = lookup(name); f != nil {
				out[i] = "-" + a
			}
		default:
			f = lookup(name)
			if f == nil && len(name) == 1 {
				f = shorthand(name)
			}
		}
		// The next argument is this flag's value: skip it.
		if f != nil && !hasValue && f.NoOptDefVal == "" {
			i++
		}
	}
	return out
}
