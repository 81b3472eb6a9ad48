package profilequery

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// GateOptions are the deploy gate's rules.
type GateOptions struct {
	// MaxIncrease is the largest allowed growth of a function's share of CPU,
	// in percentage points (5 = from 10% to 15%).
	MaxIncrease float64 `json:"max_increase_pp"`
	// MinSamples is the fewest samples either side needs for a verdict;
	// below it the gate is inconclusive rather than guessing.
	MinSamples int64 `json:"min_samples"`
	// TopN: a function absent from the baseline that enters the candidate's
	// top TopN (by the chosen share) fails the gate.
	TopN int `json:"top_n"`
	// Alpha is the one-sided significance level of the two-proportion
	// z-test a change must pass to count (0.01 = 1% false alarms per
	// function under independent sampling).
	Alpha float64 `json:"alpha"`
	// Cumulative compares inclusive (cum) shares instead of self shares.
	Cumulative bool `json:"cumulative"`
}

// DefaultGateOptions are the CLI's defaults.
var DefaultGateOptions = GateOptions{MaxIncrease: 5, MinSamples: 1000, TopN: 10, Alpha: 0.01}

// Verdict is the gate's outcome.
type Verdict string

const (
	Pass         Verdict = "PASS"
	Fail         Verdict = "FAIL"
	Inconclusive Verdict = "INCONCLUSIVE"
)

// Finding is one function's change between baseline and candidate.
type Finding struct {
	Function    string  `json:"function"`
	Kind        string  `json:"kind,omitempty"` // "regression", "new in top N", or "" when within the rules
	Base        int64   `json:"baseline_samples"`
	Cand        int64   `json:"candidate_samples"`
	BaseShare   float64 `json:"baseline_percent"`
	CandShare   float64 `json:"candidate_percent"`
	DeltaPP     float64 `json:"change_pp"`
	Z           float64 `json:"z"`
	P           float64 `json:"p_value"`
	Significant bool    `json:"significant"`
	CandRank    int     `json:"candidate_rank"` // 1-based, 0 when absent
}

// GateReport is the gate's verdict and its evidence.
type GateReport struct {
	Options   GateOptions `json:"options"`
	Verdict   Verdict     `json:"verdict"`
	Reason    string      `json:"reason"`
	BaseTotal int64       `json:"baseline_samples"`
	CandTotal int64       `json:"candidate_samples"`
	Failures  []Finding   `json:"failures"`
	Movers    []Finding   `json:"largest_changes"` // biggest share changes, for context
}

// Gate compares the candidate's function shares with the baseline's. Shares,
// not counts: canary and baseline serve different traffic. A change fails
// only when it is both larger than the threshold and significant, so a
// small profile's noise does not block a deploy.
func Gate(base, cand *Profile, opt GateOptions) GateReport {
	rep := GateReport{Options: opt, BaseTotal: base.Total(), CandTotal: cand.Total(), Verdict: Pass}
	if rep.BaseTotal < opt.MinSamples || rep.CandTotal < opt.MinSamples {
		rep.Verdict = Inconclusive
		rep.Reason = fmt.Sprintf("too few samples for a verdict: baseline %d, candidate %d, need %d each (--min-samples)", rep.BaseTotal, rep.CandTotal, opt.MinSamples)
		return rep
	}
	value := func(f FunctionShare) int64 {
		if opt.Cumulative {
			return f.Cum
		}
		return f.Self
	}
	baseFns := map[string]FunctionShare{}
	for _, f := range base.Functions() {
		baseFns[f.Name] = f
	}
	candFns := cand.Functions()
	if opt.Cumulative {
		SortByCum(candFns)
	}
	rank := map[string]int{}
	for i, f := range candFns {
		rank[f.Name] = i + 1
	}
	zCrit := zForAlpha(opt.Alpha)
	var all []Finding
	seen := map[string]bool{}
	add := func(name string, b, c int64) {
		f := Finding{Function: name, Base: b, Cand: c, CandRank: rank[name]}
		if c == 0 {
			f.CandRank = 0
		}
		f.BaseShare = 100 * float64(b) / float64(rep.BaseTotal)
		f.CandShare = 100 * float64(c) / float64(rep.CandTotal)
		f.DeltaPP = f.CandShare - f.BaseShare
		f.Z = twoProportionZ(b, rep.BaseTotal, c, rep.CandTotal)
		f.P = 0.5 * math.Erfc(f.Z/math.Sqrt2)
		f.Significant = f.Z >= zCrit
		_, inBase := baseFns[name]
		switch {
		case f.DeltaPP > opt.MaxIncrease && f.Significant:
			f.Kind = "regression"
		case !inBase && f.CandRank > 0 && f.CandRank <= opt.TopN && c > 0 && f.Significant && !strings.HasPrefix(name, "[build_id:"):
			// Unresolved frames carry their build ID, so every new build
			// would "introduce" them; they are left to the share rule.
			f.Kind = fmt.Sprintf("new in top %d", opt.TopN)
		}
		all = append(all, f)
	}
	for _, f := range candFns {
		seen[f.Name] = true
		add(f.Name, value(baseFns[f.Name]), value(f))
	}
	for name, f := range baseFns {
		if !seen[name] {
			add(name, value(f), 0)
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if math.Abs(all[i].DeltaPP) != math.Abs(all[j].DeltaPP) {
			return math.Abs(all[i].DeltaPP) > math.Abs(all[j].DeltaPP)
		}
		return all[i].Function < all[j].Function
	})
	for _, f := range all {
		if f.Kind != "" {
			rep.Failures = append(rep.Failures, f)
		}
	}
	rep.Movers = all[:min(len(all), 10)]
	if len(rep.Failures) > 0 {
		rep.Verdict = Fail
		rep.Reason = fmt.Sprintf("%d function(s) broke the rules", len(rep.Failures))
	} else {
		rep.Reason = "no significant share increase above the threshold and no new function in the top"
	}
	return rep
}

// twoProportionZ is the z statistic of p2 − p1 with the pooled proportion
// (positive when the candidate's share is larger). Profile samples are not
// strictly independent (bursts), so this understates noise somewhat; the pp
// threshold is the primary guard, the test stops tiny profiles tripping it.
func twoProportionZ(x1, n1, x2, n2 int64) float64 {
	if n1 == 0 || n2 == 0 {
		return 0
	}
	p1, p2 := float64(x1)/float64(n1), float64(x2)/float64(n2)
	p := float64(x1+x2) / float64(n1+n2)
	se := math.Sqrt(p * (1 - p) * (1/float64(n1) + 1/float64(n2)))
	if se == 0 {
		return 0
	}
	return (p2 - p1) / se
}

// zForAlpha is the one-sided critical z for significance alpha (inverse of
// the normal tail by bisection: no stats dependency for one number).
func zForAlpha(alpha float64) float64 {
	if alpha <= 0 || alpha >= 1 {
		alpha = 0.01
	}
	lo, hi := -10.0, 10.0
	for range 100 {
		mid := (lo + hi) / 2
		if 0.5*math.Erfc(mid/math.Sqrt2) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// Palette colours a report; the zero value writes plain text (no TTY).
type Palette struct{ Red, Green, Yellow, Bold, Reset string }

// ANSI is the palette for terminals.
var ANSI = Palette{Red: "\x1b[31m", Green: "\x1b[32m", Yellow: "\x1b[33m", Bold: "\x1b[1m", Reset: "\x1b[0m"}

// WriteText writes the report for a CI log: the verdict first, then what
// broke the rules, then the largest movers for context.
func (r GateReport) WriteText(w io.Writer, baseDesc, candDesc string, pal Palette) error {
	var b strings.Builder
	colour := pal.Green
	switch r.Verdict {
	case Fail:
		colour = pal.Red
	case Inconclusive:
		colour = pal.Yellow
	}
	metric := "self"
	if r.Options.Cumulative {
		metric = "cumulative"
	}
	fmt.Fprintf(&b, "%s%shotpath gate: %s%s — %s\n", pal.Bold, colour, r.Verdict, pal.Reset, r.Reason)
	fmt.Fprintf(&b, "baseline:  %s (%d samples)\n", baseDesc, r.BaseTotal)
	fmt.Fprintf(&b, "candidate: %s (%d samples)\n", candDesc, r.CandTotal)
	fmt.Fprintf(&b, "rules:     %s share may grow at most %.1f pp; no new function in the top %d; changes count when significant (one-sided two-proportion z-test, alpha %g); at least %d samples each side\n",
		metric, r.Options.MaxIncrease, r.Options.TopN, r.Options.Alpha, r.Options.MinSamples)
	row := func(f Finding) string {
		return fmt.Sprintf("%7.2f%% %7.2f%% %+8.2f pp %8.2f  %s", f.BaseShare, f.CandShare, f.DeltaPP, f.Z, f.Function)
	}
	header := fmt.Sprintf("%8s %8s %11s %8s  %s", "baseline", "candidate", "change", "z", "function")
	if len(r.Failures) > 0 {
		fmt.Fprintf(&b, "\n%sfailures:%s\n  %s\n", pal.Red, pal.Reset, header)
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "  %s%s%s  [%s]\n", pal.Red, row(f), pal.Reset, f.Kind)
		}
	}
	if len(r.Movers) > 0 {
		fmt.Fprintf(&b, "\nlargest changes (%s share):\n  %s\n", metric, header)
		for _, f := range r.Movers {
			sig := ""
			if f.DeltaPP > 0 && !f.Significant {
				sig = "  (not significant)"
			}
			fmt.Fprintf(&b, "  %s%s\n", row(f), sig)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
