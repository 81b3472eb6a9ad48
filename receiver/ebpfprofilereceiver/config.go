package ebpfprofilereceiver

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hotpath-dev/hotpath/internal/debuginfod"
	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
)

// Limits enforced by Validate. Continuous sampling above 100 Hz costs more
// than an always-on profiler may; high-frequency bursts are the on-demand
// capture's job.
const (
	MaxContinuousFrequencyHz = 100
	MinInterval              = time.Second
	MaxInterval              = 10 * time.Minute
	MinUniqueStacks          = 16
	MaxUniqueStacksLimit     = 1 << 20
)

// Config configures the eBPF CPU profiling receiver.
type Config struct {
	// Enabled is the kill switch: false loads no BPF program at all. At run
	// time the control endpoint turns sampling off (detaching everything)
	// and on again.
	Enabled bool `mapstructure:"enabled"`
	// MaxCPUPercent is the agent's CPU budget as a percentage of the whole
	// machine, measured over each interval for the whole collector process.
	// Above it the sampling rate is halved (down to 1 Hz); it is restored
	// step by step once usage stays under a quarter of the budget. 0 turns
	// the guard off.
	MaxCPUPercent float64 `mapstructure:"max_cpu_percent"`
	// Control is the loopback HTTP endpoint for status, the runtime kill
	// switch and on-demand high-frequency capture (hotpath capture).
	Control ControlConfig `mapstructure:"control"`
	// FrequencyHz is the sampling frequency per CPU.
	FrequencyHz int `mapstructure:"frequency_hz"`
	// Interval is how often the in-kernel counts are drained and emitted;
	// intervals are aligned to wall-clock multiples.
	Interval time.Duration `mapstructure:"interval"`
	// MaxUniqueStacks caps the distinct (process, thread, stack) keys the kernel
	// aggregates per interval; samples beyond it are counted as lost.
	MaxUniqueStacks int `mapstructure:"max_unique_stacks"`
	// HostName is host.name on every profile; empty means os.Hostname().
	HostName string `mapstructure:"host_name"`
	// ServiceNameRules name the service of processes whose SDK published
	// no process context and that do not set OTEL_SERVICE_NAME; the first
	// matching rule wins, else the program an interpreter runs (python,
	// java, node, dotnet), else the executable name.
	ServiceNameRules []ServiceNameRule `mapstructure:"service_name_rules"`
	// Include, when not empty, keeps only processes matching it.
	Include Filter `mapstructure:"include"`
	// Exclude drops processes matching it (applied after Include).
	Exclude Filter `mapstructure:"exclude"`
	// TraceContext tags samples with the trace active on the sampled thread
	// or goroutine (README: "Trace context").
	TraceContext TraceContextConfig `mapstructure:"trace_context"`
	// Unwinding is how user stacks are unwound (README: "Unwinding"):
	// UnwindingFramePointer takes the frame-pointer chain as sampled;
	// UnwindingAuto adds leaf-caller recovery on top of it and unwinds
	// binaries built without frame pointers with their .eh_frame, in the
	// kernel.
	Unwinding string `mapstructure:"unwinding"`
	// MaxUnwindTableMiB bounds the kernel memory of unwind tables
	// (unwinding: auto). Binaries that do not fit unwind with frame
	// pointers and are counted.
	MaxUnwindTableMiB int `mapstructure:"max_unwind_table_mib"`
	// PythonFrames (unwinding: auto) walks the interpreter frames of
	// CPython 3.11 to 3.15 processes in the kernel and names them (README:
	// "CPython frames"). false leaves Python processes native-only, as with
	// unwinding: frame_pointer: no walk in the kernel, no reads of their
	// memory.
	PythonFrames bool `mapstructure:"python_frames"`
	// JavaPerfMap asks a HotSpot JVM (JDK 17+) whose JIT-compiled frames
	// its perf map does not name to write the map (Compiler.perfmap, the
	// request jcmd sends, through the JVM's attach mechanism), at most once
	// every javaPerfMapEvery per JVM (README: "JIT runtimes"). Off by
	// default: the JVM writes /tmp/perf-PID.map into its own /tmp.
	JavaPerfMap bool `mapstructure:"java_perf_map"`
	// BinaryCache keeps what is derived from each binary (frame-pointer
	// verdict, unwind rows) on disk, so a restart does not compute it all
	// again. Off when Directory is empty.
	BinaryCache BinaryCacheConfig `mapstructure:"binary_cache"`
	// Debuginfod fetches the debug files of stripped binaries (distribution
	// libraries, stripped programs) from debuginfod servers, so their
	// static functions are named on the node. Off when URLs is empty.
	Debuginfod DebuginfodConfig `mapstructure:"debuginfod"`
}

// DebuginfodConfig names the servers and bounds the cache.
type DebuginfodConfig struct {
	// URLs are the servers (http:// or https://), asked in order; an
	// element may hold several separated by spaces, as DEBUGINFOD_URLS
	// does, and a string decodes as a comma-separated list. Empty turns
	// fetching off.
	URLs []string `mapstructure:"urls"`
	// Directory caches the files (<directory>/<build ID>/debuginfo, the
	// layout of elfutils' client: DEBUGINFOD_CACHE_PATH=<directory> gives
	// gdb and `hotpath symbolize` the same files).
	Directory string `mapstructure:"directory"`
	// MaxMiB bounds the directory, and so one file; the least recently
	// used builds go first.
	MaxMiB int `mapstructure:"max_mib"`
	// Wait is how long a binary's symbols wait for its debug file before
	// they are read without it (its frames keep their addresses
	// meanwhile); 0 reads them at once, and the file serves the binary's
	// next read.
	Wait time.Duration `mapstructure:"wait"`
}

// BinaryCacheConfig places the per-binary disk cache.
type BinaryCacheConfig struct {
	// Directory holds the entries (created if missing); "" turns the
	// cache off.
	Directory string `mapstructure:"directory"`
	// MaxMiB bounds the directory; least recently used entries go first.
	MaxMiB int `mapstructure:"max_mib"`
}

// Bounds of MaxUnwindTableMiB.
const (
	MinUnwindTableMiB = 1
	MaxUnwindTableMiB = 1024
)

// Values of Config.Unwinding.
const (
	UnwindingFramePointer = "frame_pointer"
	UnwindingAuto         = "auto"
)

// TraceContextConfig configures trace-driven profiling.
type TraceContextConfig struct {
	Enabled bool `mapstructure:"enabled"`
	// BPFFS is the bpffs mount holding the shared map
	// (<bpffs>/otel/traces_ctx_v1); mounted there when missing.
	BPFFS string `mapstructure:"bpffs"`
	// RescanInterval is how often all processes are checked for SDK
	// markers (those started before the agent, never sampled, or that
	// loaded a library with markers later).
	RescanInterval time.Duration `mapstructure:"rescan_interval"`
}

// ControlConfig configures the control endpoint: the collector's HTTP
// server settings (endpoint, tls, auth, ...) plus token. An empty endpoint
// turns it off; it is loopback unless requests must authenticate.
type ControlConfig struct {
	localendpoint.ServerConfig `mapstructure:",squash"`
}

// ServiceNameRule maps executables to a service name.
type ServiceNameRule struct {
	// Executable is a glob matched against the executable's path and its name.
	Executable string `mapstructure:"executable"`
	Service    string `mapstructure:"service"`
}

// Filter matches a process when any of its lists matches.
type Filter struct {
	PIDs []int `mapstructure:"pids"`
	// Executables are globs matched against the executable's path and name.
	Executables []string `mapstructure:"executables"`
	// Services are globs matched against the resolved service name.
	Services []string `mapstructure:"services"`
}

func (f Filter) empty() bool {
	return len(f.PIDs) == 0 && len(f.Executables) == 0 && len(f.Services) == 0
}

func createDefaultConfig() *Config {
	return &Config{
		Enabled:         true,
		MaxCPUPercent:   1,
		Control:         ControlConfig{localendpoint.NewServerConfig(controlapi.DefaultEndpoint)},
		FrequencyHz:     19,
		Interval:        15 * time.Second,
		MaxUniqueStacks: 10000,
		Unwinding:       UnwindingAuto,
		// glibc is 0.2 MiB of rows, a large C++ service a few MiB.
		MaxUnwindTableMiB: 64,
		PythonFrames:      true,
		BinaryCache:       BinaryCacheConfig{MaxMiB: 64},
		Debuginfod:        DebuginfodConfig{MaxMiB: 2048, Wait: 30 * time.Second},
		TraceContext: TraceContextConfig{
			Enabled:        true,
			BPFFS:          "/sys/fs/bpf",
			RescanInterval: 30 * time.Second,
		},
	}
}

// Validate rejects each bad value with one sentence that says what to do.
func (c *Config) Validate() error {
	var errs []error
	if c.FrequencyHz < 1 || c.FrequencyHz > MaxContinuousFrequencyHz {
		errs = append(errs, fmt.Errorf("frequency_hz must be between 1 and %d for continuous profiling (got %d); use on-demand capture for higher rates", MaxContinuousFrequencyHz, c.FrequencyHz))
	}
	if c.Interval < MinInterval || c.Interval > MaxInterval {
		errs = append(errs, fmt.Errorf("interval must be between %s and %s (got %s)", MinInterval, MaxInterval, c.Interval))
	} else if c.Interval%time.Second != 0 {
		errs = append(errs, fmt.Errorf("interval must be a whole number of seconds so intervals align to the wall clock (got %s)", c.Interval))
	}
	if c.MaxCPUPercent < 0 || c.MaxCPUPercent > 100 || c.MaxCPUPercent != c.MaxCPUPercent {
		errs = append(errs, fmt.Errorf("max_cpu_percent must be between 0 (guard off) and 100 percent of the machine (got %v)", c.MaxCPUPercent))
	}
	if c.Control.Endpoint() != "" {
		if err := c.Control.Check("control"); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxUniqueStacks < MinUniqueStacks || c.MaxUniqueStacks > MaxUniqueStacksLimit {
		errs = append(errs, fmt.Errorf("max_unique_stacks must be between %d and %d (got %d)", MinUniqueStacks, MaxUniqueStacksLimit, c.MaxUniqueStacks))
	}
	for i, r := range c.ServiceNameRules {
		if r.Executable == "" || r.Service == "" {
			errs = append(errs, fmt.Errorf("service_name_rules[%d] needs both executable and service", i))
		} else if err := checkGlob(r.Executable); err != nil {
			errs = append(errs, fmt.Errorf("service_name_rules[%d].executable: %w", i, err))
		}
	}
	for name, f := range map[string]Filter{"include": c.Include, "exclude": c.Exclude} {
		for _, g := range append(append([]string{}, f.Executables...), f.Services...) {
			if err := checkGlob(g); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
		for _, pid := range f.PIDs {
			if pid <= 0 {
				errs = append(errs, fmt.Errorf("%s.pids must be positive process IDs (got %d)", name, pid))
			}
		}
	}
	if c.Unwinding != UnwindingFramePointer && c.Unwinding != UnwindingAuto {
		errs = append(errs, fmt.Errorf("unwinding must be %q or %q (got %q)", UnwindingAuto, UnwindingFramePointer, c.Unwinding))
	}
	if c.MaxUnwindTableMiB < MinUnwindTableMiB || c.MaxUnwindTableMiB > MaxUnwindTableMiB {
		errs = append(errs, fmt.Errorf("max_unwind_table_mib must be between %d and %d (got %d)", MinUnwindTableMiB, MaxUnwindTableMiB, c.MaxUnwindTableMiB))
	}
	if bc := c.BinaryCache; bc.Directory != "" && (!filepath.IsAbs(bc.Directory) || bc.MaxMiB < 1 || bc.MaxMiB > 4096) {
		errs = append(errs, fmt.Errorf("binary_cache needs an absolute directory and max_mib between 1 and 4096 (got %q, %d)", bc.Directory, bc.MaxMiB))
	}
	if d := c.Debuginfod; len(d.URLs) > 0 {
		if _, err := debuginfod.New(d.URLs, d.Directory); err != nil {
			errs = append(errs, fmt.Errorf("debuginfod: %w", err))
		} else if !filepath.IsAbs(d.Directory) {
			errs = append(errs, fmt.Errorf("debuginfod: directory must be an absolute path (got %q)", d.Directory))
		}
		if d.MaxMiB < 16 || d.MaxMiB > 1<<20 {
			errs = append(errs, fmt.Errorf("debuginfod.max_mib must be between 16 and %d (got %d)", 1<<20, d.MaxMiB))
		}
		if d.Wait < 0 || d.Wait > 5*time.Minute {
			errs = append(errs, fmt.Errorf("debuginfod.wait must be between 0s and 5m (got %s)", d.Wait))
		}
	}
	if tc := c.TraceContext; tc.Enabled {
		if !filepath.IsAbs(tc.BPFFS) {
			errs = append(errs, fmt.Errorf("trace_context.bpffs must be an absolute path to a bpffs mount (got %q)", tc.BPFFS))
		}
		if tc.RescanInterval < time.Second || tc.RescanInterval > time.Hour {
			errs = append(errs, fmt.Errorf("trace_context.rescan_interval must be between 1s and 1h (got %s)", tc.RescanInterval))
		}
	}
	return errors.Join(errs...)
}

func checkGlob(g string) error {
	if _, err := filepath.Match(g, ""); err != nil {
		return fmt.Errorf("%q is not a valid glob pattern", g)
	}
	return nil
}
