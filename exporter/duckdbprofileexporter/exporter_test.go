package duckdbprofileexporter

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// t0 is recent (retention would delete older rows while a test runs): the
// start of the current hour plus 15 s, so its minute bucket is the hour.
var t0 = time.Now().UTC().Truncate(time.Hour).Add(15 * time.Second)

// at formats t0 plus d as DuckDB prints a TIMESTAMP.
func at(d time.Duration) string { return t0.Add(d).Format(time.DateTime) }

var (
	traceA = []byte{0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89}
	spanA  = []byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08}
)

func testConfig(t *testing.T, tier string) *Config {
	cfg := createDefaultConfig()
	cfg.Tier = tier
	cfg.Path = filepath.Join(t.TempDir(), tier+".duckdb")
	cfg.Query.HTTP.NetAddr.Endpoint = "127.0.0.1:0"
	return cfg
}

// startExporter starts the exporter core without the helper's queue, so a
// test sees push errors directly (TestFactoryExporterRunsThroughHelper covers
// the assembled component).
func startExporter(t *testing.T, cfg *Config) *profilesExporter {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e := newProfilesExporter(cfg, exportertest.NewNopSettings(NewFactory().Type()).TelemetrySettings)
	if err := e.start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.shutdown(context.Background()) })
	return e
}

func rowsOf(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	res, err := sqlquery.Run(context.Background(), db, q, sqlquery.DefaultLimits)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var out []string
	for _, r := range res.Rows {
		parts := make([]string, len(r))
		for i, v := range r {
			parts[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(parts, "|"))
	}
	return out
}

func TestLocalTierStoresRootFirstWithTraces(t *testing.T) {
	e := startExporter(t, testConfig(t, "local"))
	b := newProfileBuilder().process(t0, map[string]any{
		profileschema.AttrServiceName: "api", profileschema.AttrBuildID: "beef",
		profileschema.AttrProcessExePath: "/usr/bin/api", profileschema.AttrBinaryHasDebugInfo: true,
	})
	b.sample(5, []string{"parse", "serve", "main"}, nil, nil)
	b.sample(2, []string{"parse", "serve", "main"}, traceA, spanA)
	// A second process of the same service and binary: identical stacks merge.
	b.process(t0, map[string]any{profileschema.AttrServiceName: "api", profileschema.AttrBuildID: "beef"})
	b.sample(3, []string{"parse", "serve", "main"}, nil, nil)
	// No build ID: stored as ''.
	b.process(t0, map[string]any{profileschema.AttrServiceName: "worker"})
	b.sample(1, []string{"loop", "main"}, nil, nil)
	b.pd.MarkReadOnly() // as in a fan-out: the exporter must not mutate
	if err := e.push(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	got := rowsOf(t, e.w.DB(), `SELECT timestamp, service_id, build_id, folded, sample_count, trace_id, span_id
		FROM cpu_profile_samples_local_decoded ORDER BY service_id, sample_count`)
	want := []string{
		at(0) + "|api|beef|main;serve;parse|2|abcdef0123456789abcdef0123456789|0102030405060708",
		at(0) + "|api|beef|main;serve;parse|8|<nil>|<nil>",
		at(0) + "|worker||main;loop|1|<nil>|<nil>",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = rowsOf(t, e.w.DB(), `SELECT build_id, service_id, binary_path, has_debug_info FROM binary_metadata_local`)
	if strings.Join(got, ",") != "beef|api|/usr/bin/api|true" {
		t.Fatalf("binary metadata: %v", got)
	}
}

// A frame that nothing names and no file holds (a JIT runtime's code
// without a perf map, a process that exited unread) is stored as
// profileschema.UnknownFrame, whatever its address: each sampled
// instruction is not a frame, and a stack, of its own.
func TestFramesInNoFileStoredAsUnknown(t *testing.T) {
	e := startExporter(t, testConfig(t, "local"))
	b := newProfileBuilder().process(t0, map[string]any{profileschema.AttrServiceName: "node"})
	b.sample(3, []string{"anon:0x7f3c1d00a6a0", "Builtins_JSEntry", "main"}, nil, nil)
	b.sample(2, []string{"anon:0x7f3c1d00b010", "Builtins_JSEntry", "main"}, nil, nil)
	b.sample(4, []string{"anonmap:0x7f3c1d00c123", "Builtins_JSEntry", "main"}, nil, nil)
	b.sample(1, []string{"anon:0x7f3c1d00b010", "anon:0x7f3c1d00d000", "main"}, nil, nil)
	if err := e.push(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	got := rowsOf(t, e.w.DB(), `SELECT folded, sample_count FROM cpu_profile_samples_local_decoded ORDER BY sample_count`)
	want := []string{"main;[unknown];[unknown]|1", "main;Builtins_JSEntry;[unknown]|9"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	got = rowsOf(t, e.w.DB(), `SELECT count(*) FROM profile_frame_dictionary_local WHERE frame_name = '[unknown]' OR frame_name LIKE '0x%'`)
	if strings.Join(got, ",") != "1" {
		t.Fatalf("frames named [unknown] or by address: %v, want one", got)
	}
}

func TestSummaryTierBucketsAndPercentages(t *testing.T) {
	e := startExporter(t, testConfig(t, "summary"))
	b := newProfileBuilder().process(t0, map[string]any{
		profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: "api-7f9", profileschema.AttrBuildID: "beef",
	})
	b.sample(3, []string{"parse", "main"}, nil, nil)
	b.sample(1, []string{"gc", "main"}, nil, nil)
	b.process(t0.Add(20*time.Second), map[string]any{profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: "api-7f9", profileschema.AttrBuildID: "beef"})
	b.sample(4, []string{"parse", "main"}, nil, nil)
	if err := e.push(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	got := rowsOf(t, e.w.DB(), `SELECT bucket_time, pod_name, folded, sample_count, round(sample_percentage, 1)
		FROM cpu_profile_summaries_decoded ORDER BY sample_count`)
	want := []string{
		at(-15*time.Second) + "|api-7f9|main;gc|1|12.5",
		at(-15*time.Second) + "|api-7f9|main;parse|7|87.5",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestMalformedSamplesAreSkippedAndCounted(t *testing.T) {
	e := startExporter(t, testConfig(t, "local"))
	b := newProfileBuilder().process(t0, map[string]any{profileschema.AttrServiceName: "api"})
	b.sample(1, []string{"ok", "main"}, nil, nil)
	bad := b.sample(1, []string{"x"}, nil, nil)
	bad.SetStackIndex(999)
	badLink := b.sample(1, []string{"y"}, nil, nil)
	badLink.SetLinkIndex(77)
	// A stack pointing at a location that does not exist.
	st := b.dict.StackTable().AppendEmpty()
	st.LocationIndices().Append(12345)
	s := b.counted.Samples().AppendEmpty()
	s.SetStackIndex(int32(b.dict.StackTable().Len() - 1))
	s.Values().Append(1)
	if err := e.push(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	if n := e.skippedSamples(); n != 3 {
		t.Fatalf("skipped %d samples, want 3", n)
	}
	got := rowsOf(t, e.w.DB(), `SELECT folded FROM cpu_profile_samples_local_decoded`)
	if strings.Join(got, ",") != "main;ok" {
		t.Fatalf("rows: %v", got)
	}
}

func TestFactoryExporterRunsThroughHelper(t *testing.T) {
	cfg := testConfig(t, "local")
	set := exportertest.NewNopSettings(NewFactory().Type())
	exp, err := NewFactory().CreateProfiles(context.Background(), set, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := exp.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	b := newProfileBuilder().process(t0, map[string]any{profileschema.AttrServiceName: "api"})
	b.sample(1, []string{"leaf", "main"}, nil, nil)
	if err := exp.ConsumeProfiles(context.Background(), b.pd); err != nil {
		t.Fatal(err)
	}
	// Shutdown drains the queue into the file.
	if err := exp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	db, closeDB, err := sqlquery.OpenReadOnly(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	got := rowsOf(t, db, `SELECT folded, sample_count FROM cpu_profile_samples_local_decoded`)
	if strings.Join(got, ",") != "main;leaf|1" {
		t.Fatalf("rows: %v", got)
	}
}

// TestSamplingPeriodStoredPerRow: nodes at 19, 49 and 99 Hz (and a sender
// recording no period, and one with a nonsense period) in one bucket. Each
// row keeps its own period, identical stacks at different periods stay
// apart, and CPU time is count × period.
func TestSamplingPeriodStoredPerRow(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			e := startExporter(t, testConfig(t, tier))
			b := newProfileBuilder()
			for i, hz := range []int64{19, 49, 99, 0, -1} {
				b.periodNs = 0
				if hz > 0 {
					b.periodNs = int64(time.Second) / hz
				} else if hz < 0 {
					b.periodNs = 1 // 1 GHz: not a sampling period
				}
				b.process(t0, map[string]any{profileschema.AttrServiceName: "api", profileschema.AttrK8sPodName: fmt.Sprint("api-", i)})
				b.sample(hz*2+10, []string{"parse", "main"}, nil, nil)
			}
			if err := e.push(context.Background(), b.pd); err != nil {
				t.Fatal(err)
			}
			table := "cpu_profile_samples_local"
			if tier == "summary" {
				table = "cpu_profile_summaries"
			}
			got := rowsOf(t, e.w.DB(), `SELECT sample_count, sample_period_ns, round(sample_count * sample_period_ns / 1e9, 2)
				FROM `+table+` ORDER BY sample_count`)
			want := []string{"8|<nil>|<nil>", "10|<nil>|<nil>", "48|52631578|2.53", "108|20408163|2.2", "208|10101010|2.1"}
			if tier == "local" { // no pods: the two unknown periods merge
				want = append([]string{"18|<nil>|<nil>"}, want[2:]...)
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("rows: %v\nwant %v", got, want)
			}
			e.mu.Lock()
			repaired := e.repaired
			e.mu.Unlock()
			if repaired != 1 {
				t.Errorf("repaired samples: %d, want 1 (the 1 ns period)", repaired)
			}
		})
	}
}
