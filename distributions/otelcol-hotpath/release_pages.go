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
// start-up is over, and then every interval: the kernel maps 64 KB around
// every page fault of a cached file, so pages the collector touched once in a
// while pile up again (measured: the text back at 29 MB a minute after a
// release). Pages it runs again come back from the page cache at the cost of
// a minor fault (a few ms of CPU a minute).
const (
	releaseAfterStart = 30 * time.Second
	releaseEvery      = 15 * time.Second
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
		for {
			// A failure (no /proc) only means the pages stay resident.
			_, _ = selfmem.ReleaseExecutablePages()
			time.Sleep(releaseEvery)
		}
	}()
}
