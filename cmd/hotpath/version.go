package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by the Makefile with -ldflags "-X main.version=… -X main.commit=…
// -X main.collectorVersion=…"; a plain `go build` or `go install` leaves
// them empty and versionInfo reads what the Go toolchain recorded instead.
var (
	version          string
	commit           string
	collectorVersion string
)

// collectorModule is the module whose version names the collector release
// the CLI was built against (its unstable modules carry the release number,
// v0.162.0, where the stable ones are at v1.x).
const collectorModule = "go.opentelemetry.io/collector/pdata/pprofile"

// buildVersion is what `hotpath --version` prints.
type buildVersion struct {
	Version, Commit, Collector, Go string
}

func (v buildVersion) String() string {
	return fmt.Sprintf("hotpath %s\ncommit: %s\ncollector: %s\ngo: %s", v.Version, v.Commit, v.Collector, v.Go)
}

// versionInfo combines the linker-set values with the build information
// embedded in the binary, for builds that did not go through the Makefile.
func versionInfo() buildVersion {
	v := buildVersion{Version: version, Commit: commit, Collector: collectorVersion, Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if ok {
		if v.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v.Version = info.Main.Version
		}
		if v.Commit == "" {
			v.Commit = vcsCommit(info.Settings)
		}
		if v.Collector == "" {
			for _, dep := range info.Deps {
				if dep.Path == collectorModule {
					v.Collector = dep.Version
				}
			}
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	if v.Collector == "" {
		v.Collector = "unknown"
	}
	return v
}

// vcsCommit is the revision `go build` stamps from git (unless
// -buildvcs=false), with "-dirty" for uncommitted changes.
func vcsCommit(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return strings.TrimSpace(rev)
}
