package ebpfprofilereceiver

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := createDefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	servers := createDefaultConfig()
	servers.Debuginfod.URLs = []string{"https://debuginfod.debian.net http://127.0.0.1:8002"} // as DEBUGINFOD_URLS
	servers.Debuginfod.Directory = "/var/lib/hotpath/debuginfod"
	if err := servers.Validate(); err != nil {
		t.Fatalf("two debuginfod servers in one string: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"frequency over the cap", func(c *Config) { c.FrequencyHz = 1000 }, "frequency_hz must be between 1 and 100"},
		{"frequency zero", func(c *Config) { c.FrequencyHz = 0 }, "frequency_hz"},
		{"interval too short", func(c *Config) { c.Interval = 100 * time.Millisecond }, "interval must be between"},
		{"interval not whole seconds", func(c *Config) { c.Interval = 1500 * time.Millisecond }, "whole number of seconds"},
		{"too few stacks", func(c *Config) { c.MaxUniqueStacks = 1 }, "max_unique_stacks"},
		{"rule without service", func(c *Config) { c.ServiceNameRules = []ServiceNameRule{{Executable: "java"}} }, "needs both"},
		{"bad glob", func(c *Config) { c.Include.Executables = []string{"[x"} }, "not a valid glob"},
		{"bad pid", func(c *Config) { c.Exclude.PIDs = []int{-3} }, "exclude.pids"},
		{"cpu budget", func(c *Config) { c.MaxCPUPercent = 150 }, "max_cpu_percent must be between"},
		{"public control", func(c *Config) { c.Control.HTTP.NetAddr.Endpoint = "0.0.0.0:7074" }, "control.endpoint \"0.0.0.0:7074\" is not a loopback address"},
		{"control not host:port", func(c *Config) { c.Control.HTTP.NetAddr.Endpoint = "7074" }, "control.endpoint must be host:port"},
		{"relative bpffs", func(c *Config) { c.TraceContext.BPFFS = "sys/fs/bpf" }, "trace_context.bpffs"},
		{"unknown unwinding", func(c *Config) { c.Unwinding = "dwarf" }, `unwinding must be "auto" or "frame_pointer"`},
		{"unwind table budget zero", func(c *Config) { c.MaxUnwindTableMiB = 0 }, "max_unwind_table_mib must be between 1 and 1024"},
		{"unwind table budget huge", func(c *Config) { c.MaxUnwindTableMiB = 4096 }, "max_unwind_table_mib must be between 1 and 1024"},
		{"rescan too often", func(c *Config) { c.TraceContext.RescanInterval = time.Millisecond }, "trace_context.rescan_interval"},
		{"relative binary cache", func(c *Config) { c.BinaryCache.Directory = "cache" }, "binary_cache needs an absolute directory"},
		{"binary cache without room", func(c *Config) { c.BinaryCache = BinaryCacheConfig{Directory: "/var/cache/x", MaxMiB: 0} }, "max_mib between 1 and 4096"},
		{"debuginfod server not a URL", func(c *Config) {
			c.Debuginfod = DebuginfodConfig{URLs: []string{"debuginfod.debian.net"}, Directory: "/var/cache/d", MaxMiB: 64}
		}, `debuginfod: debuginfod server "debuginfod.debian.net": want an http:// or https:// URL`},
		{"debuginfod without directory", func(c *Config) { c.Debuginfod.URLs = []string{"https://debuginfod.debian.net"} }, "debuginfod: no debuginfod cache directory"},
		{"debuginfod relative directory", func(c *Config) { c.Debuginfod.URLs, c.Debuginfod.Directory = []string{"https://d.example"}, "cache" }, `debuginfod: directory must be an absolute path (got "cache")`},
		{"debuginfod without room", func(c *Config) {
			c.Debuginfod = DebuginfodConfig{URLs: []string{"https://d.example"}, Directory: "/var/cache/d", MaxMiB: 1}
		}, "debuginfod.max_mib must be between 16"},
		{"debuginfod waits too long", func(c *Config) {
			c.Debuginfod = DebuginfodConfig{URLs: []string{"https://d.example"}, Directory: "/var/cache/d", MaxMiB: 64, Wait: time.Hour}
		}, "debuginfod.wait must be between 0s and 5m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := createDefaultConfig()
			tc.mutate(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.want)
			}
		})
	}
}

func TestFilterAndServiceRules(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.ServiceNameRules = []ServiceNameRule{{Executable: "/usr/bin/py*", Service: "python-apps"}}
	f := Filter{PIDs: []int{42}, Executables: []string{"nginx"}, Services: []string{"check*"}}
	for _, tc := range []struct {
		pid                 int
		path, name, service string
		want                bool
	}{
		{42, "", "", "", true},
		{7, "/usr/sbin/nginx", "nginx", "nginx", true},
		{7, "/srv/app", "app", "checkout", true},
		{7, "/srv/app", "app", "cart", false},
	} {
		if got := f.matches(tc.pid, tc.path, tc.name, tc.service); got != tc.want {
			t.Errorf("matches(%d, %q, %q, %q) = %v, want %v", tc.pid, tc.path, tc.name, tc.service, got, tc.want)
		}
	}
	if !globMatch(cfg.ServiceNameRules[0].Executable, "/usr/bin/python3", "python3") {
		t.Error("rule glob does not match /usr/bin/python3")
	}
}
