package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
)

const captureExamples = `  hotpath capture --service api --duration 30s --frequency 99 > api.folded
  hotpath capture --pid 4242 --duration 10s --frequency 499 --format html -o hot.html
  hotpath capture --list                         # processes the agent can capture
`

// runCapture asks the running agent for an on-demand high-frequency capture
// (RFD 070/072): the target is sampled at --frequency for --duration on top
// of continuous sampling, which keeps its rate.
func runCapture(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("capture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", envOr("HOTPATH_AGENT_CONTROL", controlapi.DefaultEndpoint), "the agent's control endpoint (receiver control.endpoint; env HOTPATH_AGENT_CONTROL)")
	token := fs.String("token", os.Getenv("HOTPATH_CONTROL_TOKEN"), "bearer token of the control endpoint (receiver control.token; env HOTPATH_CONTROL_TOKEN)")
	pid := fs.Int("pid", 0, "process to capture")
	service := fs.String("service", "", "capture every running process of this service")
	duration := fs.Duration("duration", 30*time.Second, "how long to capture (at most 300s)")
	frequency := fs.Int("frequency", 99, "samples per second (at most 1000)")
	format := fs.String("format", "folded", "folded (flamegraph.pl), json, pprof, svg or html")
	out := fs.String("o", "", "write to this file instead of standard output")
	list := fs.Bool("list", false, "list the processes the agent can capture, and exit")
	fs.Usage = usageFunc(fs, stderr, "hotpath capture (--pid N | --service S) [--duration 30s] [--frequency 99] [flags]", captureExamples)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	client := controlapi.Client{Endpoint: *endpoint, Token: *token}
	if *list {
		targets, err := client.Targets(ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tSERVICE\tUNWINDING\tSTACKS ENDED EARLY\tEXECUTABLE")
		for _, t := range targets {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", t.PID, t.Service, t.Unwinding, endedEarly(t.StacksEndedEarly), t.Executable)
		}
		return tw.Flush()
	}
	switch {
	case (*pid == 0) == (*service == ""):
		return fmt.Errorf("give exactly one of --pid and --service (--list shows what the agent can capture)")
	case *duration <= 0 || *duration > 300*time.Second:
		return fmt.Errorf("--duration must be between 1s and 300s, got %s", *duration)
	case *frequency < 1 || *frequency > 1000:
		return fmt.Errorf("--frequency must be between 1 and 1000 Hz, got %d", *frequency)
	}
	switch *format {
	case "folded", "json", "pprof", "svg", "html":
	default:
		return fmt.Errorf("--format must be folded, json, pprof, svg or html, got %q", *format)
	}
	if *format == "pprof" && *out == "" && isTerminal(stdout) {
		return fmt.Errorf("--format pprof is binary: give -o FILE or redirect standard output")
	}

	started := time.Now()
	stopProgress := progress(stderr, *duration)
	res, err := client.Capture(ctx, controlapi.CaptureRequest{
		PID: *pid, Service: *service, Duration: duration.String(), FrequencyHz: *frequency,
	})
	stopProgress()
	if err != nil {
		return err
	}
	if res.Samples == 0 {
		return fmt.Errorf("the capture took no samples: the target used no CPU in %s at %d Hz", res.Duration, res.FrequencyHz)
	}
	name := *service
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

	w, closeOut, err := outputFile(*out, stdout)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("capture of %s at %d Hz", describeTargets(res.Targets), res.FrequencyHz)
	err = writeProfile(w, p, *format, title)
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

// progress draws a progress bar on a terminal until stop is called; off a
// terminal it prints nothing.
func progress(w io.Writer, total time.Duration) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			elapsed := time.Since(start)
			frac := min(1, elapsed.Seconds()/total.Seconds())
			const width = 30
			n := int(frac * width)
			fmt.Fprintf(w, "\rcapturing [%s%s] %3.0f%% %s/%s ", strings.Repeat("#", n), strings.Repeat(".", width-n),
				100*frac, elapsed.Round(time.Second), total)
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}
