package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotpath-dev/hotpath/internal/profilequery"
)

const topExamples = `  hotpath top --service api --since 1h
  hotpath top --service api --local --since 15m -n 30 --cum
  hotpath top --service api --since 7d --build-id 1f0e9d8c7b6a --format json
`

// newTopCommand lists the functions with the largest self (or cumulative)
// share, as `go tool pprof -top` does on the same profile.
func newTopCommand() *cobra.Command {
	var (
		n      int
		cum    bool
		format string
	)
	cmd := &cobra.Command{
		Use:     "top --service S [--since 1h] [-n 20] [--cum] [flags]",
		Short:   "top functions by self and cumulative share of CPU",
		Example: topExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	target := addTargetFlags(fs)
	sel := addSelectFlags(fs)
	fs.IntVarP(&n, "limit", "n", 20, "number of functions (0 = all)")
	fs.BoolVar(&cum, "cum", false, "sort by cumulative share (the function and what it calls) instead of self")
	fs.StringVar(&format, "format", "table", "table, csv or json")
	_ = cmd.RegisterFlagCompletionFunc("service", completeServices(target, sel))
	completeValues(cmd, "format", "table", "csv", "json")
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		return writeTop(cmd.Context(), target, sel, n, cum, format, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

func writeTop(ctx context.Context, target *targetFlags, sel *selectFlags, n int, cum bool, format string, stdout, stderr io.Writer) error {
	if format != "table" && format != "csv" && format != "json" {
		return fmt.Errorf("--format must be table, csv or json, got %q", format)
	}
	p, err := loadProfile(ctx, target, sel, time.Now(), stderr)
	if err != nil {
		return err
	}
	fns := p.Functions()
	if cum {
		profilequery.SortByCum(fns)
	}
	if n > 0 && len(fns) > n {
		fns = fns[:n]
	}
	switch format {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Service   string                       `json:"service"`
			Range     string                       `json:"range"`
			Samples   int64                        `json:"total_samples"`
			Functions []profilequery.FunctionShare `json:"functions"`
		}{p.Service, p.Range.String(), p.Total(), fns})
	case "csv":
		cw := csv.NewWriter(stdout)
		_ = cw.Write([]string{"function", "self_samples", "self_percent", "cum_samples", "cum_percent"})
		for _, f := range fns {
			_ = cw.Write([]string{f.Name, strconv.FormatInt(f.Self, 10), fmt.Sprintf("%.2f", 100*f.SelfShare), strconv.FormatInt(f.Cum, 10), fmt.Sprintf("%.2f", 100*f.CumShare)})
		}
		cw.Flush()
		return cw.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "service %s, %s, %d samples\n", p.Service, p.Range, p.Total())
	bold, reset := "", ""
	if colourOn(stdout) {
		bold, reset = profilequery.ANSI.Bold, profilequery.ANSI.Reset
	}
	fmt.Fprintf(&b, "%s%10s %7s %7s %10s %7s  %s%s\n", bold, "self", "self%", "sum%", "cum", "cum%", "function", reset)
	var sum float64
	for _, f := range fns {
		sum += f.SelfShare
		fmt.Fprintf(&b, "%10d %6.2f%% %6.2f%% %10d %6.2f%%  %s\n", f.Self, 100*f.SelfShare, 100*sum, f.Cum, 100*f.CumShare, f.Name)
	}
	if raw, builds := p.Unsymbolized(); raw > 0 && p.Total() > 0 {
		short := make([]string, len(builds))
		for i, id := range builds {
			short[i] = profilequery.ShortBuildID(id)
		}
		which := "build "
		if len(short) > 1 {
			which = "builds "
		}
		fmt.Fprintf(&b, "%.1f%% of samples pass through frames of %s that had no symbols when sampled ([build_id:…] 0x…): "+
			"hotpath symbolize --debuginfod names them from a debuginfod server, --symbols FILE from a debug file\n",
			100*float64(raw)/float64(p.Total()), which+strings.Join(short, ", "))
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}
