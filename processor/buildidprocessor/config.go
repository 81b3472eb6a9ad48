package buildidprocessor

import (
	"errors"
	"fmt"
	"path/filepath"
)

// Config of the buildid processor.
type Config struct {
	// HostName is this host's name as the receiver writes it in host.name.
	// Resources naming another host come from elsewhere (a gateway) and pass
	// through untouched. Empty: the OS host name.
	HostName string `mapstructure:"host_name"`
	// ProcRoot is where this host's procfs is mounted (/host/proc when the
	// collector runs in a container with the host's /proc mounted there).
	ProcRoot string `mapstructure:"proc_root"`
	// CacheSize bounds how many binaries' build IDs are remembered.
	CacheSize int `mapstructure:"cache_size"`
}

func createDefaultConfig() *Config {
	return &Config{ProcRoot: "/proc", CacheSize: 1024}
}

// Validate checks every setting and says what is wrong with each bad one.
func (c *Config) Validate() error {
	var errs []error
	if !filepath.IsAbs(c.ProcRoot) {
		errs = append(errs, fmt.Errorf("proc_root must be an absolute path, got %q", c.ProcRoot))
	}
	if c.CacheSize < 1 {
		errs = append(errs, fmt.Errorf("cache_size must be at least 1, got %d", c.CacheSize))
	}
	return errors.Join(errs...)
}
