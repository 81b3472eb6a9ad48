package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
)

const captureExamples = `  hotpath capture --service api --duration 30s --frequency 99 > api.folded
  hotpath capture --pid 4242 --duration 10s --frequency 499 --format html -o hot.html
  hotpath capture --list                         # processes the agent can capture
`

// newCaptureCommand asks the running agent for an on-demand high-frequency
// capture (RFD 070/072): the target is sampled at --frequency for --duration
// on top of continuous sampling, which keeps its rate.
func newCaptureCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "capture (--pid N | --service S) [--duration 30s] [--frequency 99] [flags]",
		Short:   "ask the running agent to profile a pid or service at high frequency for a while",
		Example: captureExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	endpoint := fs.String("endpoint", envOr("HOTPATH_AGENT_CONTROL", controlapi.DefaultEndpoint), "the agent's control endpoint (receiver control.endpoint; env HOTPATH_AGENT_CONTROL)")
	token := fs.String("token", os.Getenv("HOTPATH_CONTROL_TOKEN"), "bearer token of the control endpoint (receiver control.token; env HOTPATH_CONTROL_TOKEN)")
	pid := fs.Int("pid", 0, "process to capture")
	service := fs.String("service", "", "capture every running process of this service")
	duration := fs.Duration("duration", 30*time.Second, "how long to capture (at most 300s)")
	frequency := fs.Int("frequency", 99, "samples per second (at most 1000)")
	format := fs.String("format", "folded", "folded (flamegraph.pl), json, pprof, svg or html")
	out := fs.StringP("output", "o", "", "write to this file instead of standard output")
	list := fs.Bool("list", false, "list the processes the agent can capture, and exit")
	completeValues(cmd, "format", "folded", "json", "pprof", "svg", "html")
	// The agent knows which services it can capture: complete from it.
	_ = cmd.RegisterFlagCompletionFunc("service", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		targets, err := controlapi.Client{Endpoint: *endpoint, Token: *token}.Targets(ctx)
		if err != nil {
			cobra.CompDebugln("hotpath: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		seen := map[string]bool{}
		var names []cobra.Completion
		for _, t := range targets {
			if !seen[t.Service] && strings.HasPrefix(t.Service, toComplete) {
				seen[t.Service] = true
				names = append(names, t.Service)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		return capture(cmd.Context(), captureRequest{client: controlapi.Client{Endpoint: *endpoint, Token: *token}, list: *list,
			pid: *pid, service: *service, duration: *duration, frequency: *frequency, format: *format, out: *out},
			cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

// captureRequest is capture's command line.
type captureRequest struct {
	client               controlapi.Client
	list                 bool
	pid, frequency       int
	service, format, out string
	duration             time.Duration
}

func capture(ctx context.Context, req captureRequest, stdout, stderr io.Writer) error {
	client := req.client
	if req.list {
		targets, err := client.Targets(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tSERVICE\tUNWINDING\tSTACKS ENDED EARLY\tEXECUTABLE")
		for _, t := range targets {
			unwinding := t.Unwinding
			if t.UnwindPending {
				unwinding += " (pending)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", t.PID, t.Service, unwinding, endedEarly(t.StacksEndedEarly), t.Executable)
		}
		return tw.Flush()
	}
	switch {
	case (req.pid == 0) == (req.service == ""):
		return fmt.Errorf("give exactly one of --pid and --service (--list shows what the agent can capture)")
	case req.duration <= 0 || req.duration > 300*time.Second:
		return fmt.Errorf("--duration must be between 1s and 300s, got %s", req.duration)
	case req.frequency < 1 || req.frequency > 1000:
		return fmt.Errorf("--frequency must be between 1 and 1000 Hz, got %d", req.frequency)
	}
	switch req.format {
	case "folded", "json", "pprof", "svg", "html":
	default:
		return fmt.Errorf("--format must be folded, json, pprof, svg or html, got %q", req.format)
	}
	if req.format == "pprof" && req.out == "" && isTerminal(stdout) {
		return fmt.Errorf("--format pprof is binary: give -o FILE or redirect standard output")
	}

	started := time.Now()
	stopProgress := startProgress(stderr, "capturing", req.duration)
	res, err := client.Capture(ctx, controlapi.CaptureRequest{
		PID: req.pid, Service: req.service, Duration: req.duration.String(), FrequencyHz: req.frequency,
	})
	stopProgress()
	if err != nil {
		return err
	}
	if res.Samples == 0 {
		return fmt.Errorf("the capture took no samples: the target used no CPU in %s at %d Hz", res.Duration, res.FrequencyHz)
	}
	name := req.service
	if name == "" && len(res.Targets) > 0 {
		name = res.Targets[0].Service
	}
	p := &profilequery.Profile{Service: name, Range: timerange.Range{Since: started, Until: time.Now()}}
	for _, l := range res.Folded {
		p.Stacks = append(p.Stacks, profilequery.Stack{Frames: strings.Split(l.Stack, ";"), Count: l.Count})
	}
	fmt.Fprintf(stderr, "captured %d samples of %s at %d Hz over %s", res.Samples, describeTargets(res.Targets), res.FrequencyHz, res.Duration)
	if res.Lost > 0 {
		fmt.Fprintf(stderr, " (%d lost: capture maps full)", res.Lost)
	}
	fmt.Fprintln(stderr)

	w, closeOut, err := outputFile(req.out, stdout)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("capture of %s at %d Hz", describeTargets(res.Targets), res.FrequencyHz)
	err = writeProfile(w, p, req.format, title)
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	return err
}

// endedEarly prints stack-end counts as "truncated=3 unreadable_memory=1",
// "-" when every sampled stack reached its outermost frame.
func endedEarly(m map[string]uint64) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func describeTargets(ts []controlapi.Target) string {
	if len(ts) == 1 {
		return fmt.Sprintf("%s (pid %d)", ts[0].Service, ts[0].PID)
	}
	if len(ts) > 1 {
		return fmt.Sprintf("%s (%d processes)", ts[0].Service, len(ts))
	}
	return "nothing"
}
