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
//
// A short-lived process, the hotpath CLI reading a file, also calls
// AdviseHugePages: its first query touches all its memory afresh.
package duckdballoc

/*
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

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

// jemalloc 5.3's extent hooks (jemalloc.h), through which an arena maps
// and unmaps the memory it carves allocations from.
typedef struct extent_hooks_s extent_hooks_t;
struct extent_hooks_s {
	void *(*alloc)(extent_hooks_t *, void *, size_t, size_t, bool *, bool *, unsigned);
	bool (*dalloc)(extent_hooks_t *, void *, size_t, bool, unsigned);
	void (*destroy)(extent_hooks_t *, void *, size_t, bool, unsigned);
	bool (*commit)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*decommit)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*purge_lazy)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*purge_forced)(extent_hooks_t *, void *, size_t, size_t, size_t, unsigned);
	bool (*split)(extent_hooks_t *, void *, size_t, size_t, size_t, bool, unsigned);
	bool (*merge)(extent_hooks_t *, void *, size_t, void *, size_t, bool, unsigned);
};

#define HOTPATH_HUGE_PAGE (2u << 20)

static _Atomic uint64_t hotpath_advised_bytes;

// hotpath_extent_alloc maps what jemalloc's default hook maps (anonymous,
// read-write, at new_addr when given, aligned), and advises the kernel to
// back regions of a huge page or more with huge pages. It does not call
// the default hook: that fetches the thread's jemalloc state, and on a
// thread whose state is being set up (its first allocation) that re-enters
// the allocator under its own lock and deadlocks (seen in a test program).
static void *hotpath_extent_alloc(extent_hooks_t *hooks, void *new_addr, size_t size, size_t alignment,
	bool *zero, bool *commit, unsigned arena_ind) {
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p;
	if (new_addr != NULL) {
		// MAP_FIXED_NOREPLACE (Linux 4.17) fails rather than replace a
		// mapping; an older kernel takes it as a hint, checked below.
		p = mmap(new_addr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == MAP_FAILED) {
			return NULL;
		}
		if (p != new_addr) {
			munmap(p, size);
			return NULL;
		}
	} else {
		if (alignment < page) {
			alignment = page;
		}
		size_t span = size + alignment - page;
		if (span < size) {
			return NULL;
		}
		char *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (raw == MAP_FAILED) {
			return NULL;
		}
		uintptr_t start = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
		size_t lead = start - (uintptr_t)raw, trail = span - lead - size;
		if (lead > 0) {
			munmap(raw, lead);
		}
		if (trail > 0) {
			munmap((char *)start + size, trail);
		}
		p = (void *)start;
	}
	if (size >= HOTPATH_HUGE_PAGE && madvise(p, size, MADV_HUGEPAGE) == 0) {
		hotpath_advised_bytes += size;
	}
	*zero = true;   // fresh anonymous memory reads zero
	*commit = true; // and is committed (Linux overcommits)
	return p;
}

// Split and merge as jemalloc's defaults allow them on Linux, where
// mappings coalesce; the defaults' merge fetches the thread's state too.
static bool hotpath_extent_split(extent_hooks_t *hooks, void *addr, size_t size, size_t size_a, size_t size_b,
	bool committed, unsigned arena_ind) {
	return false;
}

static bool hotpath_extent_merge(extent_hooks_t *hooks, void *addr_a, size_t size_a, void *addr_b, size_t size_b,
	bool committed, unsigned arena_ind) {
	return false;
}

static extent_hooks_t hotpath_hooks;

// hotpath_advise_huge_pages gives every automatic arena hooks that map
// memory as hotpath_extent_alloc does; an arena not yet in use is set up
// with them. It returns -1 without jemalloc, else mallctl's error.
static int hotpath_advise_huge_pages(void) {
	if (duckdb_je_mallctl == NULL) {
		return -1;
	}
	extent_hooks_t *defaults;
	size_t len = sizeof defaults;
	int err = duckdb_je_mallctl("arena.0.extent_hooks", &defaults, &len, NULL, 0);
	if (err != 0) {
		return err;
	}
	hotpath_hooks = *defaults; // unmapping, committing and purging as before
	hotpath_hooks.alloc = hotpath_extent_alloc;
	hotpath_hooks.split = hotpath_extent_split;
	hotpath_hooks.merge = hotpath_extent_merge;
	unsigned arenas;
	if ((err = hotpath_mallctl_unsigned("opt.narenas", &arenas)) != 0) {
		return err;
	}
	extent_hooks_t *mine = &hotpath_hooks;
	for (unsigned i = 0; i < arenas; i++) {
		char name[48];
		snprintf(name, sizeof name, "arena.%u.extent_hooks", i);
		extent_hooks_t *old;
		len = sizeof old;
		if ((err = duckdb_je_mallctl(name, &old, &len, &mine, sizeof mine)) != 0) {
			return err;
		}
	}
	return 0;
}

static uint64_t hotpath_advised(void) { return hotpath_advised_bytes; }
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
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

// AdviseHugePages makes DuckDB's allocator ask the kernel for 2 MiB pages
// (madvise MADV_HUGEPAGE) for the memory it maps from then on, in regions
// of 2 MiB or more. The kernel honours it when transparent huge pages are
// "madvise" or "always" (/sys/kernel/mm/transparent_hugepage/enabled), and
// ignores it when "never".
//
// It is for short-lived processes: the CLI's first query of a file touches
// all the memory it uses for the first time, a page fault for every 4 KiB.
// On the 2-vCPU VM docs/performance.md measures, a page fault costs about
// 16 µs, and `hotpath profile --local` on an agent's hour took 13,200 of
// them and 315–376 ms; with huge pages 6,300–6,700 and 218–259 ms. A
// long-running collector keeps what it touched (see the package comment)
// and would pay in memory: a huge page is resident as a whole.
//
// The call is for the start of a process, before DuckDB's first queries;
// only the first call has an effect.
func AdviseHugePages() error {
	hugePages.Do(func() {
		switch rc := C.hotpath_advise_huge_pages(); {
		case rc < 0:
			hugePagesErr = ErrNoJemalloc
		case rc > 0:
			hugePagesErr = fmt.Errorf("install DuckDB's allocator hooks: error %d", rc)
		}
	})
	return hugePagesErr
}

var (
	hugePages    sync.Once
	hugePagesErr error
)

// AdvisedBytes is how much memory DuckDB's allocator has mapped with the
// huge-page advice since AdviseHugePages.
func AdvisedBytes() uint64 { return uint64(C.hotpath_advised()) }
