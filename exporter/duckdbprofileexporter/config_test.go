package duckdbprofileexporter

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"

	"github.com/hotpath-dev/hotpath/internal/readmetest"
)

func TestConfigUnmarshalAndDefaults(t *testing.T) {
	cfg := createDefaultConfig()
	cm := confmap.NewFromStringMap(map[string]any{
		"tier": "summary", "path": "/var/lib/hotpath/summary.duckdb",
		"retention": map[string]any{"stacks": "720h", "interval": "12h"},
		"query":     map[string]any{"endpoint": "10.0.0.5:7072", "token": "s3cret"},
	})
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := cfg.effectiveRetention()
	if r.Stacks != 720*time.Hour || r.Interval != 12*time.Hour || r.TraceStacks != 7*24*time.Hour || r.Metadata != 90*24*time.Hour {
		t.Fatalf("summary retention: %+v", r)
	}
	local := createDefaultConfig()
	if r := local.effectiveRetention(); r.Stacks != time.Hour || r.Interval != 10*time.Minute || r.Metadata != 7*24*time.Hour {
		t.Fatalf("local retention: %+v", r)
	}
}

// Retention ages are taken in days and weeks too, through the same
// unmarshalling the collector does; keys left out keep their defaults.
func TestRetentionInDays(t *testing.T) {
	cfg := createDefaultConfig()
	cm := confmap.NewFromStringMap(map[string]any{
		"tier": "summary", "path": "/var/lib/hotpath/summary.duckdb",
		"retention": map[string]any{"stacks": "30d", "trace_stacks": "1w", "hourly": "365d", "daily": "1d12h", "interval": "6h", "chunk_rows": 1000},
	})
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	want := RetentionConfig{Stacks: 30 * day, TraceStacks: 7 * day, Hourly: 365 * day, Daily: 36 * time.Hour, Interval: 6 * time.Hour, ChunkRows: 1000}
	if cfg.Retention != want {
		t.Errorf("retention = %+v, want %+v", cfg.Retention, want)
	}
	if r := cfg.effectiveRetention(); r.Metadata != 90*day {
		t.Errorf("metadata = %v, want the summary default of 90 days", r.Metadata)
	}
	bad := confmap.NewFromStringMap(map[string]any{"retention": map[string]any{"stacks": "30 days"}})
	if err := bad.Unmarshal(createDefaultConfig()); err == nil || !strings.Contains(err.Error(), `retention.stacks: duration "30 days": want e.g. 15m, 2h, 7d`) {
		t.Errorf("retention.stacks \"30 days\": %v", err)
	}
	unknown := confmap.NewFromStringMap(map[string]any{"retention": map[string]any{"stack": "30d"}})
	if err := unknown.Unmarshal(createDefaultConfig()); err == nil || !strings.Contains(err.Error(), "stack") {
		t.Errorf("an unknown retention key: %v, want it named", err)
	}
}

func TestConfigValidateSaysWhatIsWrong(t *testing.T) {
	cases := map[string]struct {
		mutate func(*Config)
		want   string
	}{
		"tier":       {func(c *Config) { c.Tier = "colony" }, `tier must be "local" or "summary", got "colony"`},
		"path":       {func(c *Config) { c.Path = "" }, "path must name the DuckDB file"},
		"bucket":     {func(c *Config) { c.Tier = "summary"; c.BucketInterval = 0 }, "bucket_interval must be positive"},
		"retention":  {func(c *Config) { c.Retention.Stacks = -time.Hour }, "retention.stacks must not be negative"},
		"public":     {func(c *Config) { c.Query.HTTP.NetAddr.Endpoint = "0.0.0.0:7072" }, "not a loopback address; set a token"},
		"endpoint":   {func(c *Config) { c.Query.HTTP.NetAddr.Endpoint = "7072" }, "query.endpoint must be host:port"},
		"rows":       {func(c *Config) { c.Query.MaxRows = 0 }, "query.max_rows must be positive"},
		"memory":     {func(c *Config) { c.DuckDB.MemoryLimit = "64 potatoes" }, "duckdb.memory_limit must be a size"},
		"checkpoint": {func(c *Config) { c.DuckDB.CheckpointThreshold = "often" }, "duckdb.checkpoint_threshold must be a size"},
		"threads":    {func(c *Config) { c.DuckDB.Threads = -1 }, "duckdb.threads must be between"},
		"blocksize":  {func(c *Config) { c.DuckDB.BlockSize = 100000 }, "duckdb.block_size must be 0 (tier default) or a power of two from 16384 to 262144 bytes, got 100000"},
		"blockmax":   {func(c *Config) { c.DuckDB.BlockSize = 512 << 10 }, "duckdb.block_size must be"},
		"blockmin":   {func(c *Config) { c.DuckDB.BlockSize = 8 << 10 }, "duckdb.block_size must be"},
		"tempdir":    {func(c *Config) { c.DuckDB.TempDirectory = "config_test.go" }, `duckdb.temp_directory "config_test.go" exists and is not a directory`},
		"parallel":   {func(c *Config) { c.Query.MaxConcurrent = 0 }, "query.max_concurrent must be between 1 and 64, got 0"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.Path = filepath.Join(t.TempDir(), "x.duckdb")
			tc.mutate(cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	// Without the endpoint, its settings do not matter.
	cfg := createDefaultConfig()
	cfg.Query.Enabled = false
	cfg.Query.HTTP.NetAddr.Endpoint = "0.0.0.0:1"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// Agents default to a small DuckDB, gateways to a larger one.
func TestDuckDBResourceDefaultsByTier(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Tier = "local"
	if r := cfg.resources(); r.MemoryLimit != "64MB" || r.Threads != 1 || r.BlockSize != 65536 || r.CheckpointThreshold != "4MB" {
		t.Errorf("local tier resources = %+v", r)
	}
	cfg.Tier = "summary"
	if r := cfg.resources(); r.MemoryLimit != "1GB" || r.Threads != 2 || r.BlockSize != 131072 || r.CheckpointThreshold != "" {
		t.Errorf("summary tier resources = %+v", r)
	}
	cfg.DuckDB = DuckDBConfig{MemoryLimit: "3GB", Threads: 4, BlockSize: 32768, CheckpointThreshold: "64MB"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if r := cfg.resources(); r.MemoryLimit != "3GB" || r.Threads != 4 || r.BlockSize != 32768 || r.CheckpointThreshold != "64MB" {
		t.Errorf("configured resources = %+v", r)
	}
}

// TestRetentionPolicyKeepsBatchIDsAnHourPastTheRows: ids of stored batches
// are kept as long as the rows they stored and an hour more (an agent: 2 h,
// not the week it kept before; a gateway: its 30 days and an hour).
func TestRetentionPolicyKeepsBatchIDsAnHourPastTheRows(t *testing.T) {
	for _, c := range []struct {
		tier                                      string
		stacks, wantStacks, wantIDs, wantInterval time.Duration
	}{
		{"local", 0, time.Hour, 2 * time.Hour, 10 * time.Minute},
		{"summary", 0, 30 * 24 * time.Hour, 30*24*time.Hour + time.Hour, 24 * time.Hour},
		{"local", 6 * time.Hour, 6 * time.Hour, 7 * time.Hour, 10 * time.Minute},
	} {
		cfg := createDefaultConfig()
		cfg.Tier = c.tier
		cfg.Retention.Stacks = c.stacks
		p, every := cfg.retentionPolicy()
		if p.Stacks != c.wantStacks || p.BatchIDs != c.wantIDs || every != c.wantInterval {
			t.Errorf("%s with stacks %v: rows %v, ids %v, every %v; want %v, %v", c.tier, c.stacks, p.Stacks, p.BatchIDs, every, c.wantStacks, c.wantIDs)
		}
		if p.TraceStacks > p.BatchIDs {
			t.Errorf("%s: trace-tagged rows (%v) outlive the ids (%v)", c.tier, p.TraceStacks, p.BatchIDs)
		}
	}
}

// TestReadmeExampleIsValid unmarshals the README's YAML example.
func TestReadmeExampleIsValid(t *testing.T) {
	for id, c := range readmetest.Check(t, "README.md", "exporters", NewFactory()) {
		cfg := c.(*Config)
		if cfg.Path != "/var/lib/hotpath/profiles.duckdb" || cfg.Query.MaxBytes != 100<<20 || cfg.QueueConfig.HasValue() {
			t.Fatalf("%s: unexpected config: %+v", id, cfg)
		}
	}
}

// No in-memory queue unless asked for: it would acknowledge before the
// commit (issue 15), so a crash would lose what the sender let go of.
func TestSendingQueueIsOffByDefault(t *testing.T) {
	if createDefaultConfig().QueueConfig.HasValue() {
		t.Fatal("sending_queue is on by default")
	}
}

// The query section holds the collector's HTTP server settings beside our
// own keys, and every one of them is decoded (confighttp's own Unmarshal
// must not swallow the section), while a misspelt key is still refused.
func TestQueryConfigDecodesServerSettingsAndOwnKeys(t *testing.T) {
	cfg := createDefaultConfig()
	cm := confmap.NewFromStringMap(map[string]any{"query": map[string]any{
		"endpoint": "10.0.0.5:7072", "token": "s3cret", "timeout": "7s", "max_rows": 5,
		"tls": map[string]any{"cert_file": "server.crt", "key_file": "server.key"},
	}})
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	q := cfg.Query
	if q.Endpoint() != "10.0.0.5:7072" || string(q.Token) != "s3cret" || q.Timeout != 7*time.Second || q.MaxRows != 5 || !q.HTTP.TLS.HasValue() {
		t.Fatalf("decoded query config: endpoint %q, token set %v, timeout %s, max_rows %d, tls %v",
			q.Endpoint(), q.Token != "", q.Timeout, q.MaxRows, q.HTTP.TLS.HasValue())
	}
	bad := confmap.NewFromStringMap(map[string]any{"query": map[string]any{"tokn": "x"}})
	if err := bad.Unmarshal(createDefaultConfig()); err == nil || !strings.Contains(err.Error(), "tokn") {
		t.Fatalf("misspelt key: err = %v, want it named", err)
	}
}
