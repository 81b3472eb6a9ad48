//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// Defaults applied to zero Config fields.
const (
	DefaultFrequencyHz     = 19
	DefaultMaxUniqueStacks = 10_000
	DefaultInterval        = 15 * time.Second
)

const (
	// keySlack covers samples above the nominal rate (freq-mode periods
	// overshoot at start) and drains that run a little late.
	keySlack = 256
	// maxAutoStackEntries caps the automatic stack map size. One entry costs
	// ~1 KiB (127 frames × 8 bytes) and there are two stack maps, so the cap
	// keeps stack maps at ~17 MiB even on large hosts; stacks beyond it are
	// counted in Stats (UserStackLost, KernelStackLost), not hidden.
	maxAutoStackEntries = 8192
	minStackEntries     = 64
	// maxEntries bounds user-set sizes well below what would overflow or
	// exhaust kernel memory (1 Mi stacks ≈ 1 GiB).
	maxEntries = 1 << 20
)

// Config controls what the sampler records and how large its maps are.
type Config struct {
	// FrequencyHz is the sampling rate per CPU.
	FrequencyHz int
	// MaxUniqueStacks caps the number of distinct (pid, tid, stacks) keys
	// kept per interval; samples with new keys beyond it are counted in
	// Stats.LostMapFull.
	MaxUniqueStacks int
	// Interval is how often Drain is called; it sizes the maps.
	Interval time.Duration
	// StackMapEntries overrides the size of each of the two stack maps
	// (a hash table: no rounding). 0 picks one from the other fields.
	StackMapEntries int
	// TraceContext, when set, makes every sample carry the trace context
	// found in these maps (see TraceMaps). nil: no lookup, zero IDs.
	TraceContext *TraceMaps
	// DWARFUnwind lets processes with unwind tables (SetProcessUnwind) be
	// unwound with them in the kernel. false: frame pointers only, and the
	// unwinder is not even loaded.
	DWARFUnwind bool
	// MaxUnwindProcesses and MaxUnwindTables bound the unwind maps (0:
	// defaults).
	MaxUnwindProcesses int
	MaxUnwindTables    int
	// KernelTypes, when set, is the kernel's BTF as another load decoded
	// it (the trace context's uprobes, at the receiver's start). nil
	// decodes it afresh.
	KernelTypes *btf.Cache
	// Logger receives warnings (e.g. lifecycle tracing unavailable). nil
	// uses slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.FrequencyHz == 0 {
		c.FrequencyHz = DefaultFrequencyHz
	}
	if c.MaxUniqueStacks == 0 {
		c.MaxUniqueStacks = DefaultMaxUniqueStacks
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxUnwindProcesses == 0 {
		c.MaxUnwindProcesses = DefaultMaxUnwindProcesses
	}
	if c.MaxUnwindTables == 0 {
		c.MaxUnwindTables = DefaultMaxUnwindTables
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.FrequencyHz < 0 {
		errs = append(errs, fmt.Errorf("frequency %d Hz: must be positive", c.FrequencyHz))
	}
	if c.MaxUniqueStacks < 0 {
		errs = append(errs, fmt.Errorf("max unique stacks %d: must be positive", c.MaxUniqueStacks))
	}
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("interval %s: must be positive", c.Interval))
	}
	if c.StackMapEntries < 0 || c.StackMapEntries > maxEntries {
		errs = append(errs, fmt.Errorf("stack map entries %d: must be between 0 and %d", c.StackMapEntries, maxEntries))
	}
	if c.MaxUnwindProcesses < 0 || c.MaxUnwindProcesses > maxEntries || c.MaxUnwindTables < 0 || c.MaxUnwindTables > maxEntries {
		errs = append(errs, fmt.Errorf("unwind map sizes (%d processes, %d tables): must be between 0 and %d", c.MaxUnwindProcesses, c.MaxUnwindTables, maxEntries))
	}
	if c.MaxUniqueStacks > maxEntries {
		errs = append(errs, fmt.Errorf("max unique stacks %d: must be at most %d", c.MaxUniqueStacks, maxEntries))
	}
	return errors.Join(errs...)
}

// TraceMaps are the trace context maps the sampler reads at sample time.
// Their owner (the tracectx package) creates or opens them; the sampler
// uses them without taking ownership (it closes only its own clones).
type TraceMaps struct {
	// Threads is traces_ctx_v1: pid_tgid -> (trace ID, span ID), the map
	// shared with OpenTelemetry eBPF Instrumentation.
	Threads *ebpf.Map
	// Goroutines is go_traces: (tgid, g pointer) -> (trace ID, span ID).
	Goroutines *ebpf.Map
}

// mapSizes is how many entries each map gets.
type mapSizes struct {
	keys   uint32 // each counts map
	stacks uint32 // each stack map
}

// sizeMaps derives map sizes: a counts map never needs more keys than
// samples in one interval, so it holds min(MaxUniqueStacks, samples×1.25 +
// slack). Each key names at most two distinct stacks (user and kernel), and
// the stacks maps are real hash tables, so twice the keys always suffices.
func sizeMaps(c Config, ncpu int) mapSizes {
	samples := float64(ncpu) * float64(c.FrequencyHz) * c.Interval.Seconds() * 1.25
	keys := float64(c.MaxUniqueStacks)
	if s := samples + keySlack; s < keys {
		keys = s
	}
	keys = math.Max(1, math.Ceil(keys))
	m := mapSizes{keys: uint32(keys)}
	if c.StackMapEntries > 0 {
		m.stacks = uint32(c.StackMapEntries)
	} else {
		m.stacks = min(2*m.keys, maxAutoStackEntries)
	}
	m.stacks = max(m.stacks, minStackEntries)
	return m
}
