package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/flamegraph"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

const profileExamples = `  hotpath profile --service api --since 1h > cpu.folded      # flamegraph.pl input
  hotpath profile --service api --since 1h --format html -o cpu.html
  hotpath profile --service api --since "2025-12-15 14:00:00" --until "2025-12-15 15:00:00" --tz Europe/Berlin
  hotpath profile --service api --local --since 15m --format pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz
  hotpath profile --service api --since 1h --compare-with "2025-12-14 14:00:00 to 2025-12-14 15:00:00" --format svg -o diff.svg
  hotpath profile --service api --since 1h --compare-with "25h to 24h" > diff.folded   # difffolded.pl format
`

// newProfileCommand writes the profile of a service over a range, or with
// --compare-with the differential profile against another range.
func newProfileCommand() *cobra.Command {
	var format, out, compare, title string
	cmd := &cobra.Command{
		Use:     "profile --service S [--since 1h] [--until T] [--format folded|json|pprof|svg|html] [flags]",
		Short:   "profile of a service over a range: folded, json, pprof, svg or html; --compare-with for a diff",
		Example: profileExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	target := addTargetFlags(fs)
	sel := addSelectFlags(fs)
	fs.StringVar(&format, "format", "folded", "folded (flamegraph.pl), json, pprof (gzipped profile.proto), svg or html (flame graph)")
	fs.StringVarP(&out, "output", "o", "", "write to this file instead of standard output")
	fs.StringVar(&compare, "compare-with", "", "baseline range \"A to B\" (or a single time, meaning \"A to now\"): output the difference from it,\nnormalized to share of total (folded: \"stack baseline current\" as difffolded.pl -n; svg/html: red grew, blue shrank)")
	fs.StringVar(&title, "title", "", "flame graph title")
	_ = cmd.RegisterFlagCompletionFunc("service", completeServices(target, sel))
	completeValues(cmd, "format", "folded", "json", "pprof", "svg", "html")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		ctx, stdout, stderr := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
		switch format {
		case "folded", "json", "pprof", "svg", "html":
		default:
			return fmt.Errorf("--format must be folded, json, pprof, svg or html, got %q", format)
		}
		if format == "pprof" && out == "" && isTerminal(stdout) {
			return fmt.Errorf("--format pprof is binary: give -o FILE or redirect standard output")
		}
		now := time.Now()
		cur, err := loadProfile(ctx, target, sel, now, stderr)
		if err != nil {
			return err
		}
		if compare != "" {
			return writeComparison(ctx, target, sel, cur, compare, format, out, title, now, stdout, stderr)
		}

		w, closeOut, err := outputFile(out, stdout)
		if err != nil {
			return err
		}
		err = writeProfile(w, cur, format, title)
		if cerr := closeOut(); err == nil {
			err = cerr
		}
		return err
	})
	return cmd
}

func writeProfile(w io.Writer, p *profilequery.Profile, format, title string) error {
	switch format {
	case "json":
		return p.WriteJSON(w)
	case "pprof":
		pp, err := p.Pprof()
		if err != nil {
			return err
		}
		return pp.Write(w)
	case "svg", "html":
		root := flamegraph.NewRoot()
		for _, l := range p.Folded() {
			root.Add(splitFolded(l.Stack), float64(l.Count), 0)
		}
		opt := flamegraph.Options{Title: title, Subtitle: subtitle(p), FrameType: p.FrameTypes()}
		if format == "svg" {
			return flamegraph.WriteSVG(w, root, opt)
		}
		return flamegraph.WriteHTML(w, root, opt)
	}
	return p.WriteFolded(w)
}

func subtitle(p *profilequery.Profile) string {
	s := fmt.Sprintf("service %s, %s, %d samples", p.Service, p.Range, p.Total())
	if ids := p.BuildIDs(); len(ids) > 1 {
		s += fmt.Sprintf(", %d builds", len(ids))
	} else if len(ids) == 1 && ids[0] != "" {
		s += ", build " + profilequery.ShortBuildID(ids[0])
	}
	return s
}

// splitFolded splits a folded stack into frames. A "[build_id:...] "
// annotation becomes its own root frame, so each build is one tower.
func splitFolded(stack string) []string {
	var frames []string
	if strings.HasPrefix(stack, "[build_id:") {
		// "[build_id:x] 0x1a2b" alone is an unresolved frame, not a prefix.
		if i := strings.Index(stack, "] "); i > 0 && !strings.HasPrefix(stack[i+2:], "0x") {
			frames = append(frames, stack[:i+1])
			stack = stack[i+2:]
		}
	}
	start := 0
	for i := 0; i < len(stack); i++ {
		if stack[i] == ';' {
			frames = append(frames, stack[start:i])
			start = i + 1
		}
	}
	return append(frames, stack[start:])
}

func writeComparison(ctx context.Context, target *targetFlags, sel *selectFlags, cur *profilequery.Profile, spec, format, out, title string, now time.Time, stdout, stderr io.Writer) error {
	loc, err := sel.location()
	if err != nil {
		return err
	}
	r, err := timerange.Parse(spec, now, loc)
	if err != nil {
		return fmt.Errorf("--compare-with: %w", err)
	}
	// Same selection, other range.
	stopProgress := startProgress(stderr, "reading the baseline "+r.String(), 0)
	defer stopProgress()
	src, err := target.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	s, err := sel.selector(now)
	if err != nil {
		return err
	}
	s.Range = r
	base, err := loadInHugePages(ctx, src, s)
	if err != nil {
		return fmt.Errorf("baseline (--compare-with): %w", err)
	}
	lines := profilequery.Diff(base, cur)
	stopProgress()

	w, closeOut, err := outputFile(out, stdout)
	if err != nil {
		return err
	}
	switch format {
	case "folded":
		err = profilequery.WriteDiff(w, lines)
	case "svg", "html":
		err = writeDiffGraph(w, format, title, fmt.Sprintf("service %s: %s (%d samples) vs baseline %s (%d samples, scaled to the same total)", cur.Service, cur.Range, cur.Total(), base.Range, base.Total()), lines)
	case "json":
		type line struct {
			Stack    string `json:"stack"`
			Baseline int64  `json:"baseline"`
			Current  int64  `json:"current"`
		}
		doc := struct {
			Service         string `json:"service"`
			Baseline        string `json:"baseline_range"`
			Current         string `json:"current_range"`
			BaselineSamples int64  `json:"baseline_samples"`
			CurrentSamples  int64  `json:"current_samples"`
			Note            string `json:"note"`
			Stacks          []line `json:"stacks"`
		}{cur.Service, base.Range.String(), cur.Range.String(), base.Total(), cur.Total(), "baseline counts are scaled to the current total", nil}
		for _, l := range lines {
			doc.Stacks = append(doc.Stacks, line{l.Stack, l.A, l.B})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(doc)
	default:
		err = fmt.Errorf("--compare-with writes folded, json, svg or html; for pprof write both profiles and use go tool pprof -diff_base")
	}
	if cerr := closeOut(); err == nil {
		err = cerr
	}
	return err
}

func writeDiffGraph(w io.Writer, format, title, sub string, lines []profilequery.DiffLine) error {
	root := flamegraph.NewRoot()
	for _, l := range lines {
		root.Add(splitFolded(l.Stack), float64(l.B), float64(l.A))
	}
	opt := flamegraph.Options{Title: title, Subtitle: sub, Diff: true}
	if format == "svg" {
		return flamegraph.WriteSVG(w, root, opt)
	}
	return flamegraph.WriteHTML(w, root, opt)
}
