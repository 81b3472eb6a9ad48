package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

const gateExamples = `  # canary vs the build it replaces (builds looked up over --since, default 30d)
  hotpath gate --service api --baseline 1f0e9d8c7b6a --candidate 2a3b4c5d6e7f --max-increase 5pp --html diff.html
  # the last hour against the same hour yesterday
  hotpath gate --service api --baseline "25h to 24h" --candidate 1h --min-samples 5000
  # in CI: exit code 3 fails the job, 4 means not enough data yet
  hotpath gate --service api --baseline "$OLD_BUILD" --candidate "$NEW_BUILD" || exit $?
`

// newGateCommand is the deploy gate: it compares a candidate's CPU shares
// with a baseline's and exits 3 on a regression (4 when the data cannot tell).
func newGateCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "gate --service S --baseline <build-id|range> --candidate <build-id|range> [--max-increase 5pp] [--min-samples N] [flags]",
		Short:   "deploy gate: exit 3 when a function's CPU share regressed between two builds or ranges",
		Long:    "Compares each function's share of the CPU samples between a baseline and a candidate (each a build ID or a time range) and fails on a regression.\n\n" + exitCodesHelp,
		Example: gateExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	target := addTargetFlags(fs)
	service := fs.String("service", "", "service name; required")
	pod := fs.String("pod", "", "only this pod (gateway tier): its UID (k8s.pod.uid) or pod_name (k8s.pod.name where a sender set it, else host.name; the agent reads no pod names)")
	baseline := fs.String("baseline", "", "baseline: a build ID (or prefix) or a range (\"2025-12-14 10:00 to 2025-12-14 11:00\", \"25h to 24h\", \"1h\")")
	candidate := fs.String("candidate", "", "candidate: a build ID (or prefix) or a range")
	since := fs.String("since", "30d", "where build IDs are looked up: from this time to now")
	tz := fs.String("tz", "UTC", "time zone of absolute times without an offset")
	maxIncrease := fs.String("max-increase", "5pp", "largest allowed growth of a function's share of CPU, in percentage points (5pp, 2.5)")
	minSamples := fs.Int64("min-samples", profilequery.DefaultGateOptions.MinSamples, "fewest samples each side needs; fewer gives INCONCLUSIVE (exit 4)")
	topN := fs.Int("top", profilequery.DefaultGateOptions.TopN, "fail when a function absent from the baseline enters the candidate's top N")
	alpha := fs.Float64("alpha", profilequery.DefaultGateOptions.Alpha, "significance level of the one-sided two-proportion z-test a change must pass")
	cum := fs.Bool("cum", false, "compare cumulative shares (function and callees) instead of self shares")
	htmlOut := fs.String("html", "", "also write the differential flame graph (baseline → candidate) to this HTML file")
	format := fs.String("format", "text", "report format: text or json")
	_ = cmd.RegisterFlagCompletionFunc("service", completeServices(target, nil))
	completeValues(cmd, "format", "text", "json")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		return gate(cmd.Context(), gateRequest{target: target, service: *service, pod: *pod, baseline: *baseline, candidate: *candidate,
			since: *since, tz: *tz, maxIncrease: *maxIncrease, htmlOut: *htmlOut, format: *format,
			options: profilequery.GateOptions{MinSamples: *minSamples, TopN: *topN, Alpha: *alpha, Cumulative: *cum}}, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

// gateRequest is the gate's command line.
type gateRequest struct {
	target                                       *targetFlags
	service, pod, baseline, candidate, since, tz string
	maxIncrease, htmlOut, format                 string
	options                                      profilequery.GateOptions
}

func gate(ctx context.Context, req gateRequest, stdout, stderr io.Writer) error {
	if req.service == "" || req.baseline == "" || req.candidate == "" {
		return usagef("--service, --baseline and --candidate are required")
	}
	if req.format != "text" && req.format != "json" {
		return fmt.Errorf("--format must be text or json, got %q", req.format)
	}
	inc, err := parsePP(req.maxIncrease)
	if err != nil {
		return err
	}
	loc, err := time.LoadLocation(req.tz)
	if err != nil {
		return fmt.Errorf("--tz %q: %w", req.tz, err)
	}
	now := time.Now()
	stopProgress := startProgress(stderr, "reading the baseline and the candidate", 0)
	defer stopProgress()
	src, err := req.target.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	load := func(role, spec string) (*profilequery.Profile, string, error) {
		sel := profilequery.Selector{Service: req.service, Pod: req.pod}
		if timerange.LooksLikeRange(spec, now, loc) {
			r, err := timerange.Parse(spec, now, loc)
			if err != nil {
				return nil, "", fmt.Errorf("--%s: %w", role, err)
			}
			sel.Range = r
		} else {
			r, err := timerange.New(req.since, "", now, loc)
			if err != nil {
				return nil, "", fmt.Errorf("--since: %w", err)
			}
			sel.Range, sel.BuildID = r, spec
		}
		p, err := loadInHugePages(ctx, src, sel)
		if err != nil {
			return nil, "", fmt.Errorf("%s: %w", role, err)
		}
		desc := sel.Range.String()
		if sel.BuildID != "" {
			ids := p.BuildIDs()
			if len(ids) > 1 {
				return nil, "", fmt.Errorf("--%s %q matches several builds (%s): give more of the build ID", role, spec, strings.Join(ids, ", "))
			}
			desc = "build " + ids[0] + " (samples in " + desc + ")"
		}
		return p, desc, nil
	}
	base, baseDesc, err := load("baseline", req.baseline)
	if err != nil {
		return err
	}
	cand, candDesc, err := load("candidate", req.candidate)
	if err != nil {
		return err
	}
	stopProgress()
	opt := req.options
	opt.MaxIncrease = inc
	rep := profilequery.Gate(base, cand, opt)

	if req.htmlOut != "" {
		w, closeOut, err := outputFile(req.htmlOut, stdout)
		if err != nil {
			return err
		}
		err = writeDiffGraph(w, "html", "hotpath gate: "+string(rep.Verdict), fmt.Sprintf("service %s: candidate %s vs baseline %s (scaled to the same total)", req.service, candDesc, baseDesc), profilequery.Diff(base, cand))
		if cerr := closeOut(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write --html: %w", err)
		}
	}
	if req.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Service   string `json:"service"`
			Baseline  string `json:"baseline"`
			Candidate string `json:"candidate"`
			profilequery.GateReport
		}{req.service, baseDesc, candDesc, rep}); err != nil {
			return err
		}
	} else {
		pal := profilequery.Palette{}
		if colourOn(stdout) {
			pal = profilequery.ANSI
		}
		if err := rep.WriteText(stdout, baseDesc, candDesc, pal); err != nil {
			return err
		}
	}
	switch rep.Verdict {
	case profilequery.Fail:
		return &exitError{exitGateFailed, fmt.Errorf("FAIL: %s", rep.Reason)}
	case profilequery.Inconclusive:
		return &exitError{exitInconclusive, fmt.Errorf("INCONCLUSIVE: %s", rep.Reason)}
	}
	return nil
}

// parsePP reads "5pp", "5%", "5" as 5 percentage points.
func parsePP(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "pp"), "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || v < 0 || v > 100 {
		return 0, fmt.Errorf("--max-increase %q: want percentage points between 0 and 100, e.g. 5pp", s)
	}
	return v, nil
}
