package writer

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

// benchBatch builds n stacks of 8–24 frames drawn from 2,000 function names
// over 20 services, like an agent's 15 s interval on a busy host.
func benchBatch(n int, at time.Time) *Batch {
	r := rand.New(rand.NewPCG(1, 2))
	names := make([]string, 2000)
	for i := range names {
		names[i] = fmt.Sprintf("github.com/acme/svc/pkg%d.(*Type%d).Method%d", i%50, i%13, i)
	}
	rows := make([]StackRow, n)
	for i := range rows {
		depth := 8 + r.IntN(17)
		frames := make([]string, depth)
		for j := range frames {
			frames[j] = names[r.IntN(len(names))]
		}
		rows[i] = StackRow{Time: at, ServiceID: fmt.Sprintf("svc-%d", i%20), PodName: "pod", BuildID: "0123456789abcdef0123456789abcdef01234567", Frames: frames, Count: int64(1 + r.IntN(50))}
	}
	return &Batch{Rows: rows}
}

// BenchmarkWrite reports stack rows/s of the write path (stack dictionary
// lookups, one Appender per table) on a file that already knows the stacks,
// as in steady state.
//
//	go test -run xxx -bench BenchmarkWrite -benchtime 5x ./exporter/duckdbprofileexporter/internal/writer/
func BenchmarkWrite(b *testing.B) {
	const rowsPerBatch = 5000
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		b.Run(string(tier), func(b *testing.B) {
			ctx := context.Background()
			w, err := Open(ctx, filepath.Join(b.TempDir(), "bench.duckdb"), tier)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			// writeTx is called directly below, without write, which
			// waits for the dictionaries Open loads in the background.
			w.mu.Lock()
			err = w.awaitDicts()
			w.mu.Unlock()
			if err != nil {
				b.Fatal(err)
			}
			batches := make([]*Batch, 4)
			for i := range batches {
				batches[i] = benchBatch(rowsPerBatch, time.Unix(1_700_000_000+int64(i)*15, 0))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each batch is a new interval, as from an agent.
				batch := batches[i%len(batches)]
				at := time.Unix(1_700_000_000+int64(i)*15, 0)
				for j := range batch.Rows {
					batch.Rows[j].Time = at
				}
				err := w.conn.Raw(func(dc any) error {
					return w.writeTx(ctx, dc.(driver.Conn), batch.ID, nil, func() *Batch { return batch })
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*rowsPerBatch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
