package benchfmt

import (
	"math"
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor
cpu: Intel(R) Xeon(R)
BenchmarkMerge-2   	    2000	    512000 ns/op	   3900000 merges/s	         0.01 allocs/merge
BenchmarkMerge-2   	    2000	    498000 ns/op	   4100000 merges/s	         0.01 allocs/merge
BenchmarkWrite/appender-2 	       5	 100000000 ns/op	     50000 rows/s
BenchmarkSymbolizeInterval-2   	     100	   2000000 ns/op	    300.0 stacks/op	   81.88 %resolved	  1024 B/op	  3 allocs/op
    bench_test.go:42: a log line that mentions BenchmarkMerge 1 2
PASS
ok  	github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor	3.1s
`

func TestParse(t *testing.T) {
	r, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Get("BenchmarkMerge", "merges/s"); len(got) != 2 || got[0] != 3.9e6 || got[1] != 4.1e6 {
		t.Fatalf("merges/s = %v", got)
	}
	if got := r.Get("BenchmarkWrite/appender", "rows/s"); len(got) != 1 || got[0] != 50000 {
		t.Fatalf("rows/s = %v", got)
	}
	if got := r.Get("BenchmarkSymbolizeInterval", "%resolved"); len(got) != 1 || got[0] != 81.88 {
		t.Fatalf("%%resolved = %v", got)
	}
	if _, err := Parse(strings.NewReader("BenchmarkX-2 10 5 ns/op 7\n")); err == nil {
		t.Fatal("unpaired value: want an error")
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 3, 2, 4})
	if s.N != 5 || s.Min != 1 || s.Max != 5 || s.Median != 3 || s.Mean != 3 {
		t.Fatalf("got %+v", s)
	}
	if Summarize(nil).N != 0 {
		t.Fatal("empty sample must have N 0")
	}
	sorted := []float64{10, 20, 30, 40}
	if got := Percentile(sorted, 50); got != 25 {
		t.Fatalf("p50 = %v, want 25", got)
	}
	if got := Percentile(sorted, 100); got != 40 {
		t.Fatalf("p100 = %v, want 40", got)
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Fatal("percentile of nothing must be NaN")
	}
}
