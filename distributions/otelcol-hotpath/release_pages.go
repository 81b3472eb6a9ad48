//go:build hotpath_dist

package main

import (
	"os"
	"runtime/debug"
	"time"

	"github.com/hotpath-dev/hotpath/distributions/otelcol-hotpath/selfmem"
)

// Start-up runs code once that steady state never runs again (DuckDB's and
// the collector's initialization: 45 of the 53 MB text segment and 23 MB of
// read-only data were resident in the agent). Hand those pages back once
// start-up is over, and then every interval: a fault on a cached file maps
// the cached pages around it too (64 KB, or the whole large folio), so pages
// the collector touched once in a while pile up again. Pages it runs again
// come back from the page cache at the cost of a minor fault.
//
// The releases come releaseOffset after each multiple of releaseEvery, the
// receiver's default interval, once the agent's interval work is over: its
// receiver drains, symbolizes and hands over at the boundary, and the
// stackaggregator closes the window 5 s later (its default max_delay,
// checked once a second) and the local tier's write follows (about 175
// page faults in DuckDB's code after a release, each mapping up to 64 KB).
// Released just before that work, its pages stayed mapped through most of
// the interval; released after it, they stay out for the ~12 s until the
// next write.
const (
	releaseAfterStart = 30 * time.Second
	releaseEvery      = 15 * time.Second
	releaseOffset     = 8 * time.Second
)

// heapGrowthPercent is the Go heap's growth between collections (GOGC)
// unless the environment sets GOGC. An agent's heap grows by about its live
// size in every 15 s interval (the drain's profile, then the export) and
// shrinks back; at Go's default of 100 it peaked near twice the live heap.
// Handing the free half back to the system after every interval (a forced
// collection and a full release, as before) cost a tenth of the agent's CPU
// on a node where processes start all the time, and the next interval
// faulted the same pages in again. Collecting after 50 % growth keeps the
// peak near one and a half times the live heap, for a few more short
// collections (10-25 ms of CPU each in the agent), and Go's background
// scavenger returns what stays free. The gateway runs the same binary and
// collects at 50 % too; an operator can set GOGC for either.
const heapGrowthPercent = 50

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(heapGrowthPercent)
	}
	go func() {
		time.Sleep(releaseAfterStart)
		// Start-up's heap (configuration, DuckDB's catalog, the first
		// symbol tables) is garbage by now: return it once.
		debug.FreeOSMemory()
		// Once: from here on the executable's pages come back one at a
		// time, not with the large folios they were cached in. A failure
		// (no /proc) here or below only means more pages stay resident.
		_ = selfmem.ReadExecutableByPage()
		for {
			_, _ = selfmem.ReleaseExecutablePages()
			time.Sleep(time.Until(selfmem.NextRelease(time.Now(), releaseEvery, releaseOffset)))
		}
	}()
}
