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

// BenchmarkWrite reports stack rows/s for the Appender path and the
// row-at-a-time INSERT path side by side, and the Appender path on a table
// carrying the RFD's ART indexes (the measurement behind "no index"). The
// RFD's primary key cannot be measured: DuckDB 1.5 refuses INTEGER[] as an
// index key ("Invalid type for index key").
//
//	go test -run xxx -bench BenchmarkWrite -benchtime 5x ./exporter/duckdbprofileexporter/internal/writer/
func BenchmarkWrite(b *testing.B) {
	const rowsPerBatch = 5000
	cases := []struct {
		name     string
		rowByRow bool
		indexes  []string
	}{
		{name: "appender"},
		{name: "appender_rfd_indexes", indexes: []string{
			"CREATE INDEX idx_ts ON cpu_profile_samples_local (timestamp)",
			"CREATE INDEX idx_svc ON cpu_profile_samples_local (service_id)",
			"CREATE INDEX idx_build ON cpu_profile_samples_local (build_id)",
		}},
		{name: "insert_row_at_a_time", rowByRow: true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			w, err := Open(ctx, filepath.Join(b.TempDir(), "bench.duckdb"), schema.Local)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			for _, s := range tc.indexes {
				if _, err := w.DB().Exec(s); err != nil {
					b.Fatal(err)
				}
			}
			batches := make([]*Batch, 4)
			for i := range batches {
				batches[i] = benchBatch(rowsPerBatch, time.Unix(1_700_000_000+int64(i)*15, 0))
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Each batch is a new interval, as from an agent, so keyed
				// variants see no duplicates.
				batch := batches[i%len(batches)]
				at := time.Unix(1_700_000_000+int64(i)*15, 0)
				for j := range batch.Rows {
					batch.Rows[j].Time = at
				}
				err := w.conn.Raw(func(dc any) error { return w.writeTx(ctx, dc.(driver.Conn), batch, tc.rowByRow) })
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*rowsPerBatch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
