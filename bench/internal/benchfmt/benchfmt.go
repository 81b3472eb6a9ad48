// Package benchfmt reads `go test -bench` output and summarizes repeated
// runs (-count N) of each benchmark metric, and holds the small statistics
// the bench report uses (median, percentiles, range).
package benchfmt

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Results maps "BenchmarkName/sub" (without the -GOMAXPROCS suffix) to
// unit ("ns/op", "rows/s", ...) to one value per run.
type Results map[string]map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

// Parse reads benchmark result lines; other lines (pkg:, PASS, ok ...) are
// skipped.
func Parse(r io.Reader) (Results, error) {
	res := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue // a benchmark's own log line, not a result
		}
		name := procSuffix.ReplaceAllString(f[0], "")
		if (len(f)-2)%2 != 0 {
			return nil, fmt.Errorf("parse benchmark line %q: values and units do not pair up", sc.Text())
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("parse benchmark line %q: %w", sc.Text(), err)
			}
			if res[name] == nil {
				res[name] = map[string][]float64{}
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, sc.Err()
}

// Get returns the runs of one benchmark metric.
func (r Results) Get(name, unit string) []float64 { return r[name][unit] }

// Summary is a sample's center and spread.
type Summary struct {
	N                int
	Min, Median, Max float64
	Mean             float64
}

// Summarize a sample; N is 0 for an empty one.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Sorted(slices.Values(xs))
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{N: len(s), Min: s[0], Max: s[len(s)-1], Median: Percentile(s, 50), Mean: sum / float64(len(s))}
}

// Percentile of an ascending sample, interpolating between ranks (the
// usual "linear" definition); NaN for an empty sample.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	if len(sorted) == 1 {
		return sorted[0]
	}
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	return sorted[lo] + (pos-float64(lo))*(sorted[hi]-sorted[lo])
}
