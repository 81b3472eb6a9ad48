//go:build hotpath_dist

package main

import (
	"runtime/debug"
	"time"

	"github.com/hotpath-dev/hotpath/distributions/otelcol-hotpath/selfmem"
)

// Start-up runs code once that steady state never runs again (DuckDB's and
// the collector's initialization: 45 of the 53 MB text segment and 23 MB of
// read-only data were resident in the agent). Hand those pages back once
// start-up is over, and then every interval: the kernel maps 64 KB around
// every page fault of a cached file, so pages the collector touched once in a
// while pile up again (measured: the text back at 29 MB a minute after a
// release). Pages it runs again come back from the page cache at the cost of
// a minor fault (a few ms of CPU a minute).
const (
	releaseAfterStart = 30 * time.Second
	releaseEvery      = 15 * time.Second
)

func init() {
	go func() {
		time.Sleep(releaseAfterStart)
		for {
			// A failure (no /proc) only means the pages stay resident.
			_, _ = selfmem.ReleaseExecutablePages()
			// One-time work (a new binary's symbols and unwind rows)
			// leaves heap the runtime would return to the system only
			// slowly; a collection every interval costs a few ms.
			debug.FreeOSMemory()
			time.Sleep(releaseEvery)
		}
	}()
}
