package duckdbprofileexporter

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/retention"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/simday"
)

// BenchmarkPush measures the whole export path (OTLP → rows → DuckDB) in
// stack rows per second, as a collector that has run a while sees it:
// each request holds 20 processes × 250 distinct stacks, of which a share
// are new to the file and the rest were stored before (the file holds the
// first request's stacks before the timer starts). <tier>: 6.5 % new, the
// storage bench's simulated day (200,000 stacks stored over 3.07 M summary
// rows); <tier>-known: none new, the cost of the rows alone.
//
// The timed work ends with a CHECKPOINT: DuckDB moves committed rows into
// the database file's blocks only at a checkpoint, which a COMMIT runs once
// the log passes the tier's threshold (4 MB local, about 20 pushes; 16 MiB
// summary, about 80). Without it a run of 20 pushes left out the summary
// tier's checkpoints altogether; with it every row's checkpoint is counted.
// A run shorter than the tier's cycle counts the checkpoint's fixed cost
// (5-10 ms) more often than a running collector pays it: make bench runs
// 20 pushes on the local tier and 80 on the summary tier.
// checkpoint-ms is that last CHECKPOINT.
//
//	go test -run xxx -bench 'BenchmarkPush/summary$' -benchtime 80x ./exporter/duckdbprofileexporter/
func BenchmarkPush(b *testing.B) {
	const stacksPerProc = 250
	// A request is procs processes (services) of 250 stacks: 20 make the
	// 5,000 rows of an agent's or a small gateway's push. A gateway writes
	// one push per minute with every agent's stacks of that minute, so a
	// fleet of 200 services makes pushes of 50,000 rows (fleet-minute).
	for _, bc := range []struct {
		tier, name string
		newShare   float64
		procs      int
	}{
		{"local", "local", 0.065, 20}, {"summary", "summary", 0.065, 20},
		{"local", "local-known", 0, 20}, {"summary", "summary-known", 0, 20},
		{"summary", "summary-fleet-minute", 0.065, 200},
	} {
		tier, procs := bc.tier, bc.procs
		newPerProc := int(math.Round(bc.newShare * stacksPerProc))
		b.Run(bc.name, func(b *testing.B) {
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
			randomStack := func() []string {
				stack := make([]string, 8+r.IntN(17))
				for j := range stack {
					stack[j] = names[r.IntN(len(names))]
				}
				return stack
			}
			known := make([][][]string, procs)
			for p := range known {
				for range stacksPerProc {
					known[p] = append(known[p], randomStack())
				}
			}
			// request i replaces newPerProc of each process's stacks (i = 0:
			// none) with random ones, which no earlier request had.
			request := func(i int) pprofile.Profiles {
				pb := newProfileBuilder()
				for p := range procs {
					pb.process(time.Unix(1_700_000_000, 0), map[string]any{
						profileschema.AttrServiceName: fmt.Sprintf("svc-%d", p), profileschema.AttrBuildID: "0123456789abcdef",
						profileschema.AttrK8sPodName: fmt.Sprintf("pod-%d", p),
					})
					for k, stack := range known[p] {
						if i > 0 && k < newPerProc {
							stack = randomStack()
						}
						pb.sample(int64(1+r.IntN(20)), stack, nil, nil)
					}
				}
				return pb.pd
			}
			if err := e.push(context.Background(), request(0)); err != nil {
				b.Fatal(err)
			}
			reqs := make([]pprofile.Profiles, b.N)
			for i := range reqs {
				reqs[i] = request(1 + i)
			}
			stacksBefore := e.w.StackCount()
			checkpoint := func() {
				if _, err := e.w.DB().Exec("CHECKPOINT"); err != nil {
					b.Fatal(err)
				}
			}
			// The first request's rows and dictionaries are checkpointed
			// before the timer: the timed CHECKPOINT is the timed pushes'.
			checkpoint()
			runtime.GC() // the requests' garbage is not the push's
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := e.push(context.Background(), reqs[i]); err != nil {
					b.Fatal(err)
				}
			}
			checkpointStart := time.Now()
			checkpoint()
			b.StopTimer()
			b.ReportMetric(float64(time.Since(checkpointStart).Microseconds())/1e3, "checkpoint-ms")
			b.ReportMetric(float64(b.N*procs*stacksPerProc)/b.Elapsed().Seconds(), "rows/s")
			newRows := float64(e.w.StackCount()-stacksBefore) / float64(b.N*procs*stacksPerProc)
			if want := float64(newPerProc) / stacksPerProc; math.Abs(newRows-want) > 0.01 {
				b.Fatalf("%.3f of the rows brought a new stack, want %.3f", newRows, want)
			}
		})
	}
}

// BenchmarkLocalTierUptime runs an agent's local tier for b.N simulated
// hours, after two of warm-up, on the storage bench's simulated host
// (internal/simday: 10 services, a push per 15 s carrying its window's batch
// id as the stackaggregator sets it). The exporter's clock is the simulated
// one, and the retention policy the exporter runs (retentionPolicy) is
// applied at its interval of simulated time. It reports what an agent that
// has run that long keeps, per service and hour of samples held: the file's
// used blocks and its whole size after a CHECKPOINT, and the batch ids kept;
// and the most it held on the way: the write-ahead log's size after a push,
// DuckDB's memory after a retention run. ns/op is the writes and retention
// of one simulated hour.
//
//	go test -run xxx -bench BenchmarkLocalTierUptime -benchtime 22x ./exporter/duckdbprofileexporter/
func BenchmarkLocalTierUptime(b *testing.B) {
	ctx := context.Background()
	cfg := createDefaultConfig()
	cfg.Tier = "local"
	cfg.Path = filepath.Join(b.TempDir(), "agent.duckdb")
	cfg.Query.Enabled = false
	params := simday.Default()
	host, err := simday.NewHost(params)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var clock atomic.Int64 // the retention runner reads it from its goroutine
	clock.Store(start.UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()).UTC() }
	e := newProfilesExporter(cfg, exportertest.NewNopSettings(NewFactory().Type()).TelemetrySettings)
	e.setClock(now)
	if err := e.start(ctx, nil); err != nil {
		b.Fatal(err)
	}
	defer e.shutdown(ctx) //nolint:errcheck
	policy, every := cfg.retentionPolicy()
	var walPeak, memPeak int64
	window := 0
	run := func(d time.Duration) {
		for end := now().Add(d); now().Before(end); {
			at := now()
			pd := host.Profiles(host.Next(at))
			window++
			rps := pd.ResourceProfiles()
			for i := range rps.Len() {
				rps.At(i).Resource().Attributes().PutStr(profileschema.AttrBatchID, fmt.Sprintf("3f9a0c1d5e7b2468-%d", window))
			}
			// The window is emitted when it closes.
			clock.Store(at.Add(params.Interval).UnixNano())
			if err := e.push(ctx, pd); err != nil {
				b.Fatal(err)
			}
			if fi, err := os.Stat(cfg.Path + ".wal"); err == nil {
				walPeak = max(walPeak, fi.Size())
			}
			if now().Sub(start)%every == 0 {
				if _, err := retention.Apply(ctx, e.w, policy, now()); err != nil {
					b.Fatal(err)
				}
				var mem int64
				if err := e.w.DB().QueryRowContext(ctx, "SELECT sum(memory_usage_bytes) FROM duckdb_memory()").Scan(&mem); err != nil {
					b.Fatal(err)
				}
				memPeak = max(memPeak, mem)
			}
		}
	}
	run(2 * time.Hour)
	b.ResetTimer()
	run(time.Duration(b.N) * time.Hour)
	b.StopTimer()

	db := e.w.DB()
	if _, err := db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		b.Fatal(err)
	}
	sp, err := e.w.Space(ctx)
	if err != nil {
		b.Fatal(err)
	}
	var buckets, ids int64
	if err := db.QueryRowContext(ctx, "SELECT (SELECT count(DISTINCT timestamp) FROM stack_sample_rows_local), (SELECT count(*) FROM ingested_batches)").Scan(&buckets, &ids); err != nil {
		b.Fatal(err)
	}
	hoursKept := float64(buckets) * params.Interval.Hours()
	if hoursKept == 0 {
		b.Fatal("the file holds no samples")
	}
	per := float64(params.Services) * hoursKept * 1e6
	b.ReportMetric(float64(sp.FileBytes-sp.FreeBytes)/per, "MB-used/svc-h")
	b.ReportMetric(float64(sp.FileBytes)/per, "MB-file/svc-h")
	b.ReportMetric(float64(ids), "batch-ids")
	b.ReportMetric(float64(walPeak)/1e6, "MB-wal-peak")
	b.ReportMetric(float64(memPeak)/1e6, "MB-duckdb-mem-peak")
}
