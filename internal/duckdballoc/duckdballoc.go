// Package duckdballoc sets how the allocator built into the DuckDB library
// keeps the memory DuckDB frees. Importing the package is all it takes; the
// packages that open DuckDB files import it (the exporter's writer,
// internal/sqlquery), so every hotpath binary runs with it.
//
// DuckDB's Linux builds allocate through their own jemalloc, with one arena
// per CPU and freed pages given back to the kernel within a second
// (dirty_decay_ms and muzzy_decay_ms 1000). A collector works in bursts
// seconds apart: a push every 15 s, retention, a user's queries. Each burst
// found its memory given back and touched it afresh, and on a VM a page
// fault is dear: about 16 µs on the 2-vCPU machine docs/performance.md
// measures, where touching 64 MB in 4 KiB pages took 258–270 ms. The agent's
// 1 h flame graph asked every 2 s took a median of 74 ms and 2,100 faults a
// query; with one arena and freed pages kept for 30 s, 43 ms and 890. Go
// threads call into DuckDB from whichever OS thread runs them, and with an
// arena per CPU they kept landing on an arena whose pages were cold: asked
// back to back, a tenth of the queries took over 68 ms, now over 39 ms,
// and the process held 96 MB instead of 117–122 MB.
//
// The cost is memory: what DuckDB freed stays in the process for up to
// 30 s instead of one. Pages are handed back straight after that
// (muzzy_decay_ms 0) rather than marked reclaimable, so RSS shows what the
// process holds.
//
// DUCKDB_JE_MALLOC_CONF, when set, is used instead of these settings (see
// jemalloc's MALLOC_CONF for its syntax).
package duckdballoc

/*
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define HOTPATH_DIRTY_DECAY_MS 30000

// jemalloc reads this string last, after DuckDB's own options (which DuckDB
// computes at start) and DUCKDB_JE_MALLOC_CONF, so what it sets wins. Builds
// of DuckDB without jemalloc never read it.
const char *duckdb_je_malloc_conf_2_conf_harder = NULL;

static char hotpath_duckdb_malloc_conf[128];

// Set before jemalloc's first allocation: a constructor of the program,
// which runs before DuckDB allocates anything through jemalloc. One arena
// per four CPUs: jemalloc's thread caches serve small allocations without
// the arena's lock, and DuckDB's large ones (buffers of 256 KiB) share an
// arena among at most four threads.
__attribute__((constructor)) static void hotpath_duckdb_malloc_init(void) {
	if (getenv("DUCKDB_JE_MALLOC_CONF") != NULL) {
		return;
	}
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	long arenas = cpus > 4 ? (cpus + 3) / 4 : 1;
	snprintf(hotpath_duckdb_malloc_conf, sizeof hotpath_duckdb_malloc_conf,
		"narenas:%ld,dirty_decay_ms:%d,muzzy_decay_ms:0", arenas, HOTPATH_DIRTY_DECAY_MS);
	duckdb_je_malloc_conf_2_conf_harder = hotpath_duckdb_malloc_conf;
}

// Weak: a DuckDB build without jemalloc leaves it NULL.
extern int duckdb_je_mallctl(const char *name, void *oldp, size_t *oldlenp, void *newp, size_t newlen) __attribute__((weak));

static int hotpath_mallctl_unsigned(const char *name, unsigned *v) {
	if (duckdb_je_mallctl == NULL) {
		return -1;
	}
	size_t len = sizeof *v;
	return duckdb_je_mallctl(name, v, &len, NULL, 0);
}

static int hotpath_mallctl_ssize(const char *name, int64_t *v) {
	if (duckdb_je_mallctl == NULL) {
		return -1;
	}
	ssize_t s;
	size_t len = sizeof s;
	int err = duckdb_je_mallctl(name, &s, &len, NULL, 0);
	*v = s;
	return err;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"time"
	"unsafe"
)

// DirtyDecay is how long the allocator keeps pages DuckDB freed before it
// gives them back to the kernel. Longer than the gap between a collector's
// bursts of work (a push every 15 s, a user's queries seconds apart).
const DirtyDecay = C.HOTPATH_DIRTY_DECAY_MS * time.Millisecond

// Settings is what DuckDB's allocator runs with.
type Settings struct {
	Arenas     uint          // arenas threads are spread over
	DirtyDecay time.Duration // freed pages kept before they are given back
	MuzzyDecay time.Duration // then kept as reclaimable before given back; 0: not kept
}

// ErrNoJemalloc is Current's error when DuckDB was built without jemalloc
// (it then uses the C library's malloc, which these settings do not touch).
var ErrNoJemalloc = errors.New("DuckDB was built without jemalloc")

// Current reads the settings DuckDB's allocator runs with.
func Current() (Settings, error) {
	var s Settings
	var arenas C.uint
	if rc := mallctlUnsigned("opt.narenas", &arenas); rc != 0 {
		if rc < 0 {
			return s, ErrNoJemalloc
		}
		return s, fmt.Errorf("read opt.narenas: error %d", rc)
	}
	s.Arenas = uint(arenas)
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{{"opt.dirty_decay_ms", &s.DirtyDecay}, {"opt.muzzy_decay_ms", &s.MuzzyDecay}} {
		var ms C.int64_t
		if rc := mallctlSsize(d.name, &ms); rc != 0 {
			return s, fmt.Errorf("read %s: error %d", d.name, rc)
		}
		*d.to = time.Duration(ms) * time.Millisecond // -1: never given back
	}
	return s, nil
}

func mallctlUnsigned(name string, v *C.uint) C.int {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.hotpath_mallctl_unsigned(cname, v)
}

func mallctlSsize(name string, v *C.int64_t) C.int {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return C.hotpath_mallctl_ssize(cname, v)
}
