package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/flamegraph"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
)

const traceProfileExamples = `  hotpath trace-profile 0af7651916cd43dd8448eb211c80319c
  hotpath trace-profile 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 --local   # a traceparent works too
  hotpath trace-profile 0af7651916cd43dd8448eb211c80319c --service payment-svc -n 20
  hotpath trace-profile 0af7651916cd43dd8448eb211c80319c --format folded | flamegraph.pl > trace.svg
  hotpath trace-profile 0af7651916cd43dd8448eb211c80319c --format html -o trace.html
`

// newTraceProfileCommand shows what ran on CPU while one trace was active,
// per service the trace touched (RFD 078).
func newTraceProfileCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "trace-profile <trace-id|traceparent> [--service S] [--format text|folded|json|svg|html] [--local] [--db FILE|HOST:PORT] [flags]",
		Short:   "CPU profile of one trace (RFD 078): per service, CPU time and hotspots; text, folded, json, svg or html",
		Example: traceProfileExamples,
		// Flags may come before or after the trace ID.
		Args: func(cmd *cobra.Command, args []string) error {
			switch len(args) {
			case 1:
				return nil
			case 0:
				return usagef("a trace ID is required")
			}
			return usagef("one trace ID expected, got %d arguments: %s", len(args), strings.Join(args, " "))
		},
	}
	fs := cmd.Flags()
	target := addTargetFlags(fs)
	service := fs.String("service", "", "only this service (service.name)")
	format := fs.String("format", "text", "text, folded (flamegraph.pl, one tower per service), json, svg or html (flame graph)")
	hz := fs.Float64("frequency", profilequery.DefaultFallbackHz, "sampling frequency in Hz of samples stored without one (files before schema version 3); others are converted at their stored frequency")
	n := fs.IntP("limit", "n", 10, "hotspots per service in text and json (0 = all)")
	out := fs.StringP("output", "o", "", "write to this file instead of standard output")
	title := fs.String("title", "", "flame graph title")
	_ = cmd.RegisterFlagCompletionFunc("service", completeServices(target, nil))
	completeValues(cmd, "format", "text", "folded", "json", "svg", "html")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		return traceProfile(cmd.Context(), traceProfileRequest{target: target, trace: args[0], service: *service, format: *format,
			hz: *hz, n: *n, out: *out, title: *title}, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

// traceProfileRequest is trace-profile's command line.
type traceProfileRequest struct {
	target                             *targetFlags
	trace, service, format, out, title string
	hz                                 float64
	n                                  int
}

func traceProfile(ctx context.Context, req traceProfileRequest, stdout, stderr io.Writer) error {
	switch req.format {
	case "text", "folded", "json", "svg", "html":
	default:
		return fmt.Errorf("--format must be text, folded, json, svg or html, got %q", req.format)
	}
	if req.hz <= 0 || req.hz > 10000 {
		return fmt.Errorf("--frequency must be a sampling frequency in Hz (for samples stored without one; %d by default), got %g", profilequery.DefaultFallbackHz, req.hz)
	}
	traceID, err := profilequery.ParseTraceID(req.trace)
	if err != nil {
		return err
	}

	stopProgress := startProgress(stderr, "reading the samples of trace "+traceID, 0)
	defer stopProgress()
	src, err := req.target.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	tp, err := profilequery.LoadTrace(ctx, src, traceID, req.service, profilequery.TraceHints{FrequencyHz: req.hz})
	if err != nil {
		return err
	}

	stopProgress()
	w, closeOut, err := outputFile(req.out, stdout)
	if err != nil {
		return err
	}
	switch req.format {
	case "folded":
		for _, l := range tp.Folded() {
			if _, err = fmt.Fprintf(w, "%s %d\n", l.Stack, l.Count); err != nil {
				break
			}
		}
	case "json":
		err = writeTraceJSON(w, tp, req.n)
	case "svg", "html":
		err = writeTraceGraph(w, tp, req.format, req.title)
	default:
		err = writeTraceText(w, tp, req.n, src.Describe())
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	return err
}

// frequencies says at which frequencies samples were taken: "19 Hz, 52.6ms
// per sample", or "19, 49 and 99 Hz" when nodes differed.
func frequencies(hz []float64) string {
	switch len(hz) {
	case 0:
		return "no samples"
	case 1:
		return fmt.Sprintf("%g Hz, %s per sample", hz[0], profilequery.FormatCPUTime(profilequery.PeriodAt(hz[0])))
	}
	sorted := append([]float64(nil), hz...)
	sort.Float64s(sorted)
	parts := make([]string, len(sorted))
	for i, f := range sorted {
		parts[i] = fmt.Sprintf("%g", f)
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1] + " Hz"
}

// storedWhen says when a trace's samples were stored: "at" one time, or
// "from" the first "to" the last, the last with its date when it is on
// another day (a request across midnight).
func storedWhen(first, last time.Time) string {
	const day, clock = "2006-01-02 15:04:05", "15:04:05"
	if !last.After(first) {
		return "at " + first.Format(day)
	}
	end := clock
	if first.Format(time.DateOnly) != last.Format(time.DateOnly) {
		end = day
	}
	return "from " + first.Format(day) + " to " + last.Format(end)
}

// writeTraceText prints RFD 078's example: per service, its CPU time and
// where it went.
//
//	Top CPU Hotspots (payment-svc, trace abc123def456):
//	  93.3%  4.2s  validateSignature → crypto/rsa.VerifyPKCS1v15
func writeTraceText(w io.Writer, tp *profilequery.TraceProfile, n int, from string) error {
	var b strings.Builder
	total := tp.Total()
	plural := "s"
	if len(tp.Services) == 1 {
		plural = ""
	}
	fmt.Fprintf(&b, "trace %s: %d service%s, %d samples, ~%s CPU (%s; %s tier on %s)\n",
		tp.TraceID, len(tp.Services), plural, total, profilequery.FormatCPUTime(tp.CPU()), frequencies(tp.Frequencies()), tp.Tier, from)
	if len(tp.Services) > 1 {
		b.WriteString("\n")
		for _, s := range tp.Services {
			fmt.Fprintf(&b, "  %-24s %8s  %5.1f%% of the trace's CPU\n", s.Service, profilequery.FormatCPUTime(s.CPU()), 100*float64(s.CPU())/float64(tp.CPU()))
		}
	}
	for _, s := range tp.Services {
		fmt.Fprintf(&b, "\nTop CPU Hotspots (%s, trace %s):\n", s.Service, tp.TraceID)
		spans := fmt.Sprintf("%d spans", s.Spans)
		if s.Spans == 1 {
			spans = "1 span"
		}
		// Stored times are window starts (15 s agent, 1 min gateway).
		fmt.Fprintf(&b, "  %d samples, ~%s CPU, %s, stored %s UTC\n", s.Total(), profilequery.FormatCPUTime(s.CPU()), spans, storedWhen(s.Range.Since, s.Range.Until))
		for _, h := range s.Hotspots(n) {
			fn := h.Function
			if h.Caller != "" {
				fn = h.Caller + " → " + fn
			}
			fmt.Fprintf(&b, "  %5.1f%%  %8s  %s\n", 100*h.Share, profilequery.FormatCPUTime(h.CPU), fn)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeTraceJSON(w io.Writer, tp *profilequery.TraceProfile, n int) error {
	type hotspot struct {
		profilequery.Hotspot
		CPUTimeMs float64 `json:"cpu_time_ms"`
	}
	type stack struct {
		BuildID string   `json:"build_id"`
		Frames  []string `json:"frames"`
		Samples int64    `json:"samples"`
	}
	type service struct {
		Service   string    `json:"service"`
		Samples   int64     `json:"samples"`
		CPUTimeMs float64   `json:"cpu_time_ms"`
		Share     float64   `json:"share"` // of the trace's samples
		Spans     []string  `json:"span_ids"`
		FirstSeen time.Time `json:"first_seen"`
		LastSeen  time.Time `json:"last_seen"`
		BuildIDs  []string  `json:"build_ids"`
		Hotspots  []hotspot `json:"hotspots"`
		Stacks    []stack   `json:"stacks"`
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	// frequency_hz and sample_period_ms are those of most samples;
	// frequencies_hz lists all when nodes sampled at different rates.
	hzs := tp.Frequencies()
	doc := struct {
		TraceID        string    `json:"trace_id"`
		Tier           string    `json:"tier"`
		FrequencyHz    float64   `json:"frequency_hz"`
		SamplePeriodMs float64   `json:"sample_period_ms"`
		FrequenciesHz  []float64 `json:"frequencies_hz"`
		Samples        int64     `json:"total_samples"`
		CPUTimeMs      float64   `json:"cpu_time_ms"`
		Services       []service `json:"services"`
	}{tp.TraceID, string(tp.Tier), hzs[0], 1000 / hzs[0], hzs, tp.Total(), ms(tp.CPU()), nil}
	for _, s := range tp.Services {
		sv := service{Service: s.Service, Samples: s.Total(), CPUTimeMs: ms(s.CPU()), Share: float64(s.Total()) / float64(tp.Total()),
			Spans: s.SpanIDs, FirstSeen: s.Range.Since, LastSeen: s.Range.Until, BuildIDs: s.BuildIDs()}
		if sv.Spans == nil {
			sv.Spans = []string{}
		}
		for _, h := range s.Hotspots(n) {
			sv.Hotspots = append(sv.Hotspots, hotspot{h, ms(h.CPU)})
		}
		for _, st := range s.Stacks {
			sv.Stacks = append(sv.Stacks, stack{st.BuildID, s.DisplayFrames(st), st.Count})
		}
		doc.Services = append(doc.Services, sv)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// writeTraceGraph draws one flame graph with a tower per service.
func writeTraceGraph(w io.Writer, tp *profilequery.TraceProfile, format, title string) error {
	root := flamegraph.NewRoot()
	for _, s := range tp.Services {
		for _, l := range s.Folded() {
			root.Add(append([]string{s.Service}, splitFolded(l.Stack)...), float64(l.Count), 0)
		}
	}
	if title == "" {
		title = "trace " + tp.TraceID
	}
	var parts []string
	for _, s := range tp.Services {
		parts = append(parts, fmt.Sprintf("%s %s", s.Service, profilequery.FormatCPUTime(s.CPU())))
	}
	types := make([]func(string) string, len(tp.Services))
	for i, s := range tp.Services {
		types[i] = s.FrameTypes()
	}
	frameType := func(name string) string {
		for _, t := range types {
			if typ := t(name); typ != "" {
				return typ
			}
		}
		return ""
	}
	opt := flamegraph.Options{Title: title, Subtitle: fmt.Sprintf("%d samples (%s): %s", tp.Total(), frequencies(tp.Frequencies()), strings.Join(parts, ", ")), FrameType: frameType}
	if format == "svg" {
		return flamegraph.WriteSVG(w, root, opt)
	}
	return flamegraph.WriteHTML(w, root, opt)
}
