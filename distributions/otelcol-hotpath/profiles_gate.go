//go:build hotpath_dist

// This file is copied next to the ocb-generated main.go by `make build`,
// which compiles with -tags hotpath_dist (the tag keeps `go build ./...` of
// this repository from compiling it alone, without the generated main).

package main

import "go.opentelemetry.io/collector/featuregate"

// Profiles are an alpha signal in the collector, behind a feature gate. A
// profiling distribution without them does nothing, so turn the gate on by
// default; --feature-gates=-service.profilesSupport still turns it off.
func init() {
	if err := featuregate.GlobalRegistry().Set("service.profilesSupport", true); err != nil {
		panic("enable service.profilesSupport: " + err.Error())
	}
}
