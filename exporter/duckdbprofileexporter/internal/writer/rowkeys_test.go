package writer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// rowKeys orders a batch's rows as rowOrder does, in both directions: a
// time of its own per row (the local tier), a few times (the summary
// tier's buckets), times before 1970, and stack IDs up to the largest;
// and it leaves to rowOrder what it cannot pack. Each row appears once.
func TestRowKeysOrderRowsAsRowOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		name         string
		rows, times  int
		maxStack     int32
		wantFallback bool
	}{
		{"one time", 5000, 1, 400, false},
		{"few times", 5000, 4, 1 << 20, false},
		{"a time per row", 3000, 3000, 50, false},
		{"largest stack IDs", 1000, 7, math.MaxInt32, false},
		{"two rows", 2, 2, 3, false},
		{"too many times and rows to pack", 140_000, 140_000, 1000, true},
	} {
		for _, descending := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/descending=%v", c.name, descending), func(t *testing.T) {
				times := make([]time.Time, c.times)
				for i := range times {
					// Around the epoch: negative and positive UnixNano.
					times[i] = time.Unix(0, 0).Add(time.Duration(r.Int64N(2e15) - 1e15))
				}
				rows := make([]StackRow, c.rows)
				agg := make([]aggRow, c.rows)
				for i := range agg {
					rows[i].Time = times[r.IntN(len(times))]
					agg[i] = aggRow{r: &rows[i], stack: r.Int32N(c.maxStack), count: int64(i)}
				}
				agg[0].stack = c.maxStack - 1
				keys := rowKeys(agg, descending, nil)
				if c.wantFallback {
					if keys != nil {
						t.Fatal("packed keys for a batch whose ranks and indices need more than 33 bits")
					}
					return
				}
				if keys == nil {
					t.Fatal("no keys")
				}
				p := preparedRows{agg: agg, keys: keys}
				order := rowOrder(descending)
				seen := make([]bool, len(agg))
				for i := range agg {
					g := p.sample(i)
					if seen[g.count] {
						t.Fatalf("row %d appears twice", g.count)
					}
					seen[g.count] = true
					if i > 0 && order(*p.sample(i - 1), *g) > 0 {
						prev := p.sample(i - 1)
						t.Fatalf("position %d: (%s, stack %d) after (%s, stack %d)", i, g.r.Time, g.stack, prev.r.Time, prev.stack)
					}
				}
			})
		}
	}
	if rowKeys([]aggRow{{r: &StackRow{Time: t0}, stack: -1}, {r: &StackRow{Time: t0}, stack: 2}}, false, nil) != nil {
		t.Error("packed keys for a negative stack ID")
	}
}
