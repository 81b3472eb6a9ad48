package profilequery

import (
	"fmt"
	"io"
	"math"
	"sort"
)

// DiffLine is one stack of a differential profile: its samples in the
// baseline (A) and in the comparison (B), with A scaled to B's total so the
// two are shares of the same whole.
type DiffLine struct {
	Stack string
	A, B  int64
}

// Diff pairs the stacks of a (baseline) and b, as difffolded.pl -n does:
// A's counts are scaled to B's total, so a service that served twice the
// traffic in B does not look twice as slow everywhere. Stacks are compared
// without build annotations: comparing builds is the point.
func Diff(a, b *Profile) []DiffLine {
	sa, sb := plainSums(a), plainSums(b)
	ta, tb := a.Total(), b.Total()
	scale := 1.0
	if ta > 0 && tb > 0 {
		scale = float64(tb) / float64(ta)
	}
	keys := map[string]bool{}
	for k := range sa {
		keys[k] = true
	}
	for k := range sb {
		keys[k] = true
	}
	out := make([]DiffLine, 0, len(keys))
	for k := range keys {
		out = append(out, DiffLine{Stack: k, A: int64(math.Round(float64(sa[k]) * scale)), B: sb[k]})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].B != out[j].B {
			return out[i].B > out[j].B
		}
		if out[i].A != out[j].A {
			return out[i].A > out[j].A
		}
		return out[i].Stack < out[j].Stack
	})
	return out
}

func plainSums(p *Profile) map[string]int64 {
	sums := map[string]int64{}
	for _, s := range p.Stacks {
		sums[p.line(s)] += s.Count
	}
	return sums
}

// WriteDiff writes difffolded.pl's format, "stack count_a count_b", which
// flamegraph.pl renders as a differential flame graph.
func WriteDiff(w io.Writer, lines []DiffLine) error {
	for _, l := range lines {
		if _, err := fmt.Fprintf(w, "%s %d %d\n", l.Stack, l.A, l.B); err != nil {
			return err
		}
	}
	return nil
}
