package duckdbprofileexporter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// BenchmarkPush measures the whole export path (OTLP → rows → DuckDB) in
// stack rows per second: 20 processes × 250 distinct stacks per request.
//
//	go test -run xxx -bench BenchmarkPush -benchtime 20x ./exporter/duckdbprofileexporter/
func BenchmarkPush(b *testing.B) {
	for _, tier := range []string{"local", "summary"} {
		b.Run(tier, func(b *testing.B) {
			cfg := createDefaultConfig()
			cfg.Tier = tier
			cfg.Path = b.TempDir() + "/bench.duckdb"
			cfg.Query.Enabled = false
			e := newProfilesExporter(cfg, exportertest.NewNopSettings(NewFactory().Type()).TelemetrySettings)
			if err := e.start(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
			defer e.shutdown(context.Background()) //nolint:errcheck

			r := rand.New(rand.NewPCG(3, 4))
			names := make([]string, 2000)
			for i := range names {
				names[i] = fmt.Sprintf("github.com/acme/svc/pkg%d.Func%d", i%50, i)
			}
			const procs, stacksPerProc = 20, 250
			pb := newProfileBuilder()
			for p := range procs {
				pb.process(time.Unix(1_700_000_000, 0), map[string]any{
					profileschema.AttrServiceName: fmt.Sprintf("svc-%d", p), profileschema.AttrBuildID: "0123456789abcdef",
					profileschema.AttrK8sPodName: fmt.Sprintf("pod-%d", p),
				})
				for range stacksPerProc {
					stack := make([]string, 8+r.IntN(17))
					for j := range stack {
						stack[j] = names[r.IntN(len(names))]
					}
					pb.sample(int64(1+r.IntN(20)), stack, nil, nil)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := e.push(context.Background(), pb.pd); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*procs*stacksPerProc)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
