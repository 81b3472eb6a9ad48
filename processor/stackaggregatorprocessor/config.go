package stackaggregatorprocessor

import (
	"errors"
	"fmt"
	"time"
)

// Config of the stackaggregator processor.
type Config struct {
	// Window is the length of the aggregation windows, aligned to wall-clock
	// multiples (15s on agents, 60s on the gateway).
	Window time.Duration `mapstructure:"window"`
	// MaxDelay is how long after a window ends it is still kept open for
	// data in flight. Data arriving later is still emitted, in its own window.
	MaxDelay time.Duration `mapstructure:"max_delay"`
	// MaxUniqueStacks bounds memory: the distinct stacks kept per series per
	// window. Further stacks fold into one "[truncated]" stack.
	MaxUniqueStacks int `mapstructure:"max_unique_stacks"`
	// MaxSeries bounds memory across series: the distinct (service, pod,
	// build) series kept per window. Samples of further series are merged
	// into one series named OverflowService, so totals stay exact while a
	// sender inventing service names cannot grow the gateway without bound.
	MaxSeries int `mapstructure:"max_series"`
	// MinShare, when above 0, folds stacks holding less than this fraction
	// of their series' samples in a window into one "[other]" stack.
	MinShare float64 `mapstructure:"min_share"`
	// TopN, when above 0, keeps only the N hottest stacks per series per
	// window and folds the rest into "[other]".
	TopN int `mapstructure:"top_n"`
	// WAL makes "accepted" mean durable: see WALConfig.
	WAL WALConfig `mapstructure:"wal"`
	// MaxPendingWindows bounds the closed windows kept in memory while the
	// next component refuses them (retried every tick). Past it, new data is
	// refused with a retryable error, so senders keep it in their queues.
	MaxPendingWindows int `mapstructure:"max_pending_windows"`
}

// WALConfig is the write-ahead log. With a directory set, every batch is on
// disk before the processor acknowledges it, windows are rebuilt from the
// log after a crash, a window is kept in the log until the next component
// has accepted it, and batches whose hotpath.batch.id was seen within
// DedupWindow are acknowledged without being counted again.
type WALConfig struct {
	// Directory of the log; empty turns it off (a crash then loses the
	// open windows, and repeated batches are not recognised).
	Directory string `mapstructure:"directory"`
	// DedupWindow is how long batch ids are remembered: longer than a
	// sender retries one batch (the shipped agent gives up after 30m).
	DedupWindow time.Duration `mapstructure:"dedup_window"`
}

func createDefaultConfig() *Config {
	return &Config{
		Window:            15 * time.Second,
		MaxDelay:          5 * time.Second,
		MaxUniqueStacks:   10000,
		MaxSeries:         10000,
		MaxPendingWindows: 64,
		WAL:               WALConfig{DedupWindow: time.Hour},
	}
}

// Validate checks every setting and says what is wrong with each bad one.
func (c *Config) Validate() error {
	var errs []error
	if c.Window < time.Millisecond {
		errs = append(errs, fmt.Errorf("window must be at least 1ms, got %s", c.Window))
	} else if c.Window%time.Millisecond != 0 {
		errs = append(errs, fmt.Errorf("window must be a whole number of milliseconds, got %s", c.Window))
	}
	if c.MaxDelay < 0 {
		errs = append(errs, fmt.Errorf("max_delay must not be negative, got %s", c.MaxDelay))
	}
	if c.MaxSeries < 1 {
		errs = append(errs, fmt.Errorf("max_series must be at least 1, got %d", c.MaxSeries))
	}
	if c.MaxUniqueStacks < 1 {
		errs = append(errs, fmt.Errorf("max_unique_stacks must be at least 1, got %d", c.MaxUniqueStacks))
	}
	if c.MinShare < 0 || c.MinShare >= 1 || c.MinShare != c.MinShare {
		errs = append(errs, fmt.Errorf("min_share must be a fraction in [0, 1), got %v", c.MinShare))
	}
	if c.WAL.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("wal.dedup_window must not be negative, got %s", c.WAL.DedupWindow))
	}
	if c.MaxPendingWindows < 1 {
		errs = append(errs, fmt.Errorf("max_pending_windows must be at least 1, got %d", c.MaxPendingWindows))
	}
	if c.TopN < 0 {
		errs = append(errs, fmt.Errorf("top_n must not be negative (0 keeps all stacks), got %d", c.TopN))
	}
	return errors.Join(errs...)
}
