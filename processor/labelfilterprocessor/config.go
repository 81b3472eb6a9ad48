package labelfilterprocessor

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Config of the labelfilter processor.
type Config struct {
	// Allow lists the attribute keys that may reach storage. "prefix.*"
	// allows every key that starts with "prefix."; every other key is
	// dropped. The list replaces the default, it does not extend it.
	Allow []string `mapstructure:"allow"`
}

// DefaultAllow is the default allow-list: the keys storage and queries use,
// and nothing that can carry user data or unbounded cardinality.
var DefaultAllow = []string{
	profileschema.AttrServiceName,
	profileschema.AttrServiceVersion,
	profileschema.AttrServiceNamespace,
	profileschema.AttrDeploymentEnv,
	profileschema.AttrHostName,
	profileschema.AttrHostID,
	profileschema.AttrHostArch,
	profileschema.AttrOSType,
	profileschema.AttrK8sNamespaceName,
	profileschema.AttrK8sPodName,
	profileschema.AttrK8sPodUID,
	profileschema.AttrContainerID,
	profileschema.AttrContainerRuntime,
	"process.executable.*", // name, path, build_id.gnu, build_id.go
	profileschema.AttrBuildID,
	profileschema.AttrBuildIDSHA256,
	"hotpath.binary.*", // has_debug_info, first_seen, last_seen
}

func createDefaultConfig() *Config {
	return &Config{Allow: append([]string(nil), DefaultAllow...)}
}

// Validate checks every pattern and says what is wrong with each bad one.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Allow) == 0 {
		errs = append(errs, errors.New("allow must list at least one attribute key; an empty list would drop every attribute, service.name included"))
	}
	for _, p := range c.Allow {
		if err := validatePattern(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func validatePattern(p string) error {
	switch {
	case p == "":
		return errors.New("allow has an empty key")
	case p == "*" || p == ".*":
		return fmt.Errorf("allow pattern %q would let every key through; list the keys or prefixes to keep", p)
	case strings.Contains(strings.TrimSuffix(p, ".*"), "*"):
		return fmt.Errorf("allow pattern %q has a \"*\" that is not a trailing \".*\"; only \"prefix.*\" patterns are supported", p)
	}
	return nil
}

// allowList answers "may this key reach storage?".
type allowList struct {
	exact    map[string]bool
	prefixes []string // each ends in "."
}

func newAllowList(patterns []string) allowList {
	a := allowList{exact: map[string]bool{}}
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			a.prefixes = append(a.prefixes, prefix)
			continue
		}
		a.exact[p] = true
	}
	return a
}

func (a allowList) allows(key string) bool {
	if a.exact[key] {
		return true
	}
	for _, p := range a.prefixes {
		if len(key) > len(p) && strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}
