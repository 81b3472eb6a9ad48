package duckdbprofileexporter

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
	"github.com/hotpath-dev/hotpath/internal/dbcopy"
	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

// Config of the duckdbprofile exporter.
type Config struct {
	// Tier is "local" (agent: raw stacks, short retention) or "summary"
	// (gateway: per-bucket summaries, long retention).
	Tier string `mapstructure:"tier"`
	// Path of the DuckDB file. One collector process per file.
	Path string `mapstructure:"path"`
	// BucketInterval is the summary tier's bucket width (default 1m).
	BucketInterval time.Duration   `mapstructure:"bucket_interval"`
	Retention      RetentionConfig `mapstructure:"retention"`
	Query          QueryConfig     `mapstructure:"query"`
	// DuckDB bounds the database engine's memory and threads in this
	// process. Zero values take the tier's default: local (agent) 64MB and 1
	// thread, summary (gateway) 1GB and 2 threads.
	DuckDB DuckDBConfig `mapstructure:"duckdb"`

	TimeoutConfig exporterhelper.TimeoutConfig                             `mapstructure:",squash"`
	QueueConfig   configoptional.Optional[exporterhelper.QueueBatchConfig] `mapstructure:"sending_queue"`
	RetryConfig   configretry.BackOffConfig                                `mapstructure:"retry_on_failure"`
}

// DuckDBConfig bounds DuckDB's resources. memory_limit covers everything
// DuckDB allocates in this process: the writer's batches and every query of
// the SQL endpoint share it, and a query that needs more fails with "out of
// memory" instead of growing the collector.
type DuckDBConfig struct {
	MemoryLimit string `mapstructure:"memory_limit"` // e.g. "64MB", "1GB"
	Threads     int    `mapstructure:"threads"`
	// TempDirectory is where DuckDB spills what does not fit in
	// memory_limit (sorts, joins, large aggregates); "" keeps DuckDB's
	// default, "<path>.tmp" beside the file.
	TempDirectory string `mapstructure:"temp_directory"`
	// BlockSize is the block size, in bytes, of a file this exporter
	// creates: a power of two from 16384 to 262144 (DuckDB's default);
	// 0 takes the tier's default. A file keeps the size it was created
	// with. DuckDB gives each column's segment of a row group blocks of its
	// own, so small blocks waste less in a small file and compress less in
	// a large one: the storage bench's agent hour (a few MB over a dozen
	// tables) is a third smaller in 64 KiB blocks than in 256 KiB; its
	// gateway month is smallest in 128 KiB (2 % under 256, 5 % under 64).
	BlockSize int `mapstructure:"block_size"`
	// CheckpointThreshold is how much write-ahead log DuckDB gathers before
	// it writes the changes into the file (a size; "" takes the tier's
	// default: local 4MB, summary DuckDB's 16 MiB). The log sits on disk
	// beside the file and its changes in memory until then: at 16 MiB an
	// agent's log was larger than its whole file.
	CheckpointThreshold string `mapstructure:"checkpoint_threshold"`
}

// sizePattern is a size DuckDB's settings take.
var sizePattern = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$`)

// resources returns the DuckDB bounds with the tier's defaults filled in.
func (c *Config) resources() writer.Resources {
	r := writer.Resources{MemoryLimit: c.DuckDB.MemoryLimit, Threads: c.DuckDB.Threads, TempDirectory: c.DuckDB.TempDirectory, BlockSize: c.DuckDB.BlockSize,
		CheckpointThreshold: c.DuckDB.CheckpointThreshold}
	local := schema.Tier(c.Tier) == schema.Local
	if r.MemoryLimit == "" {
		r.MemoryLimit = map[bool]string{true: "64MB", false: "1GB"}[local]
	}
	if r.Threads == 0 {
		r.Threads = map[bool]int{true: 1, false: 2}[local]
	}
	if r.BlockSize == 0 {
		r.BlockSize = map[bool]int{true: 64 << 10, false: 128 << 10}[local]
	}
	if r.CheckpointThreshold == "" && local {
		// An agent writes about 10 MB an hour (the uptime benchmark, 10
		// services): with DuckDB's 16 MiB its log reached 16.8 MB beside a
		// 10.8 MB file and DuckDB held 20 MB; at 4MB, 4.0 MB beside 9.5 MB
		// and 14.9 MB, in as much time per simulated hour.
		r.CheckpointThreshold = "4MB"
	}
	return r
}

// retentionAges are the keys of retention: that hold durations.
var retentionAges = []string{"stacks", "trace_stacks", "hourly", "daily", "metadata", "interval"}

// Unmarshal reads the configuration, taking retention ages in days and weeks
// as well ("30d", "1w", "1d12h"), as the CLI takes ranges: Go durations stop
// at hours, and a retention of a year is not naturally "8760h".
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	days := map[string]any{}
	for _, key := range retentionAges {
		s, ok := conf.Get("retention" + confmap.KeyDelimiter + key).(string)
		if !ok {
			continue
		}
		if _, err := time.ParseDuration(s); err == nil {
			continue // a Go duration (0s: the tier's default)
		}
		d, err := timerange.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("retention.%s: %w", key, err)
		}
		days[key] = d.String()
	}
	if len(days) > 0 {
		if err := conf.Merge(confmap.NewFromStringMap(map[string]any{"retention": days})); err != nil {
			return err
		}
	}
	return conf.Unmarshal(c)
}

// RetentionConfig says how long rows are kept (ages in Go durations, days
// or weeks: see Unmarshal). Zero values take the tier's default (RFD 072):
// local 1h stacks / 7d metadata / every 10m; summary 30d stacks / 7d
// trace-tagged stacks / 1 year hourly / 3 years daily roll-ups / 90d
// metadata / daily.
type RetentionConfig struct {
	Stacks      time.Duration `mapstructure:"stacks"`
	TraceStacks time.Duration `mapstructure:"trace_stacks"`
	// Hourly and Daily keep the summary tier's roll-ups, which answer long
	// ranges in a fraction of the minutes' rows and bytes.
	Hourly    time.Duration `mapstructure:"hourly"`
	Daily     time.Duration `mapstructure:"daily"`
	Metadata  time.Duration `mapstructure:"metadata"`
	Interval  time.Duration `mapstructure:"interval"`
	ChunkRows int           `mapstructure:"chunk_rows"`
}

// QueryConfig is the read-only SQL endpoint (DuckDB lets one process open
// the file, so while the collector runs, this is how people query it).
type QueryConfig struct {
	// Enabled turns the endpoint on (default true).
	Enabled bool `mapstructure:"enabled"`
	// ServerConfig is the collector's HTTP server settings (endpoint, tls,
	// auth, ...) plus token; the endpoint is loopback unless requests must
	// authenticate.
	localendpoint.ServerConfig `mapstructure:",squash"`
	Timeout                    time.Duration `mapstructure:"timeout"`
	MaxRows                    int           `mapstructure:"max_rows"`
	MaxBytes                   int           `mapstructure:"max_bytes"`
	// MaxConcurrent queries run at once; more are answered 429 with
	// Retry-After, so ad-hoc queries cannot pile up in DuckDB's memory.
	MaxConcurrent int `mapstructure:"max_concurrent"`
}

// DefaultQueryEndpoint is where `hotpath sql` looks for a running collector.
const DefaultQueryEndpoint = sqlquery.DefaultAgentEndpoint

func createDefaultConfig() *Config {
	return &Config{
		Tier:           string(schema.Local),
		Path:           "hotpath-profiles.duckdb",
		BucketInterval: time.Minute,
		Query: QueryConfig{
			Enabled:       true,
			ServerConfig:  localendpoint.NewServerConfig(DefaultQueryEndpoint),
			Timeout:       30 * time.Second,
			MaxRows:       100_000,
			MaxBytes:      100 << 20, // RFD 072: max profile size per query 100 MB
			MaxConcurrent: 2,
		},
		TimeoutConfig: exporterhelper.NewDefaultTimeoutConfig(),
		// No queue by default: an in-memory queue answers "stored" before
		// the commit, and a crash then loses what the sender (the
		// stackaggregator's write-ahead log) already let go of.
		QueueConfig: configoptional.Default(exporterhelper.NewDefaultQueueConfig()),
		RetryConfig: configretry.NewDefaultBackOffConfig(),
	}
}

// effectiveRetention fills zero values with the tier's defaults.
func (c *Config) effectiveRetention() RetentionConfig {
	r := c.Retention
	def := RetentionConfig{Stacks: time.Hour, Metadata: 7 * 24 * time.Hour, Interval: 10 * time.Minute, ChunkRows: 50_000}
	if schema.Tier(c.Tier) == schema.Summary {
		def = RetentionConfig{Stacks: 30 * 24 * time.Hour, TraceStacks: 7 * 24 * time.Hour, Hourly: 365 * 24 * time.Hour, Daily: 3 * 365 * 24 * time.Hour,
			Metadata: 90 * 24 * time.Hour, Interval: 24 * time.Hour, ChunkRows: 50_000}
	}
	if r.Stacks == 0 {
		r.Stacks = def.Stacks
	}
	if r.TraceStacks == 0 {
		r.TraceStacks = def.TraceStacks
	}
	if r.Hourly == 0 {
		r.Hourly = def.Hourly
	}
	if r.Daily == 0 {
		r.Daily = def.Daily
	}
	if r.Metadata == 0 {
		r.Metadata = def.Metadata
	}
	if r.Interval == 0 {
		r.Interval = def.Interval
	}
	if r.ChunkRows == 0 {
		r.ChunkRows = def.ChunkRows
	}
	return r
}

// Validate checks the configuration; each problem is one sentence.
func (c *Config) Validate() error {
	var errs []error
	switch schema.Tier(c.Tier) {
	case schema.Local, schema.Summary:
	default:
		errs = append(errs, fmt.Errorf("tier must be \"local\" or \"summary\", got %q", c.Tier))
	}
	if c.Path == "" {
		errs = append(errs, errors.New("path must name the DuckDB file to write"))
	}
	if m := c.DuckDB.MemoryLimit; m != "" && !sizePattern.MatchString(m) {
		errs = append(errs, fmt.Errorf("duckdb.memory_limit must be a size such as 64MB or 1GB, got %q", m))
	}
	if m := c.DuckDB.CheckpointThreshold; m != "" && !sizePattern.MatchString(m) {
		errs = append(errs, fmt.Errorf("duckdb.checkpoint_threshold must be a size such as 4MB or 16MB, got %q", m))
	}
	if b := c.DuckDB.BlockSize; b != 0 && !dbcopy.ValidBlockSize(b) {
		errs = append(errs, fmt.Errorf("duckdb.block_size must be 0 (tier default) or a power of two from %d to %d bytes, got %d", dbcopy.MinBlockSize, dbcopy.MaxBlockSize, b))
	}
	if c.DuckDB.Threads < 0 || c.DuckDB.Threads > 256 {
		errs = append(errs, fmt.Errorf("duckdb.threads must be between 0 (tier default) and 256, got %d", c.DuckDB.Threads))
	}
	if err := validateTempDirectory(c.DuckDB.TempDirectory); err != nil {
		errs = append(errs, err)
	}
	if schema.Tier(c.Tier) == schema.Summary && c.BucketInterval <= 0 {
		errs = append(errs, fmt.Errorf("bucket_interval must be positive for the summary tier, got %s", c.BucketInterval))
	}
	for name, d := range map[string]time.Duration{
		"retention.stacks": c.Retention.Stacks, "retention.trace_stacks": c.Retention.TraceStacks,
		"retention.hourly": c.Retention.Hourly, "retention.daily": c.Retention.Daily,
		"retention.metadata": c.Retention.Metadata, "retention.interval": c.Retention.Interval,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	if c.Retention.ChunkRows < 0 {
		errs = append(errs, fmt.Errorf("retention.chunk_rows must not be negative, got %d", c.Retention.ChunkRows))
	}
	if c.Query.Enabled {
		errs = append(errs, c.Query.validate()...)
	}
	return errors.Join(errs...)
}

func (q QueryConfig) validate() []error {
	var errs []error
	if err := q.Check("query"); err != nil {
		errs = append(errs, err)
	}
	if q.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("query.timeout must be positive, got %s", q.Timeout))
	}
	if q.MaxRows <= 0 {
		errs = append(errs, fmt.Errorf("query.max_rows must be positive, got %d", q.MaxRows))
	}
	if q.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("query.max_bytes must be positive, got %d", q.MaxBytes))
	}
	if q.MaxConcurrent < 1 || q.MaxConcurrent > 64 {
		errs = append(errs, fmt.Errorf("query.max_concurrent must be between 1 and 64, got %d", q.MaxConcurrent))
	}
	return errs
}

// validateTempDirectory accepts "" (DuckDB's default) or a path that is a
// directory or does not exist yet (DuckDB creates it when it first spills).
func validateTempDirectory(dir string) error {
	if dir == "" {
		return nil
	}
	if strings.ContainsRune(dir, 0) {
		return errors.New("duckdb.temp_directory must not contain a NUL byte")
	}
	if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
		return fmt.Errorf("duckdb.temp_directory %q exists and is not a directory", dir)
	}
	return nil
}
