// Package selfmem returns the pages of this program's own executable that it
// touched once (start-up: DuckDB's and the collector's initialization code,
// configuration parsing) or touches once an interval, so the resident size
// reflects what the program keeps using. Released pages stay in the kernel's
// page cache: code that runs again faults them back in without disk I/O.
// Once, ReadExecutableByPage also drops them from the page cache so that
// they come back a page at a time rather than in large folios.
package selfmem

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// ReleaseExecutablePages drops this process's mappings of pages of its own
// executable file from its page tables (madvise MADV_DONTNEED) and returns the
// resident bytes they held. Only read-only private mappings without private
// copies (no anonymous page in /proc/self/pagemap) are touched: their
// contents are the file's, which cannot change under a running executable
// (the kernel refuses writes to it, ETXTBSY; a new build is a new inode), so
// a later access reads the same bytes back from the page cache.
func ReleaseExecutablePages() (released uint64, err error) {
	vmas, err := executableMappings()
	if err != nil {
		return 0, err
	}
	err = eachCleanMapping(vmas, func(v procmaps.SmapsEntry) error {
		if v.Rss == 0 {
			return nil
		}
		if err := madvise(v, unix.MADV_DONTNEED); err != nil {
			return fmt.Errorf("release executable pages: %w", err)
		}
		released += v.Rss
		return nil
	})
	return released, err
}

// NextRelease returns the first time after now that is offset past a
// multiple of every (in wall-clock time, as the receiver aligns its
// intervals), so releases can follow the work that comes at a fixed point of
// each interval.
func NextRelease(now time.Time, every, offset time.Duration) time.Time {
	next := now.Truncate(every).Add(offset)
	if !next.After(now) {
		next = next.Add(every)
	}
	return next
}

// ReadExecutableByPage makes later faults on this process's own executable
// map the pages it uses rather than the file's cached neighbourhood.
//
// Why: a fault on a file mapping also maps the cached pages around it (64 KB,
// or the whole large folio the page sits in). How large the folios are
// depends on how the file came into the page cache: for a binary the Go
// linker has just written, one fault mapped 686 KB on average (measured on
// this project's 229 MB collector), so the interval's work, a few MB of
// code, kept 80 MB of the executable resident. So:
//   - its read-only private mappings are advised MADV_RANDOM: a fault on a
//     page that is not cached reads that page alone, into a folio of its own,
//     instead of reading around it into a large one;
//   - the pages this process maps are reclaimed (MADV_PAGEOUT, which splits
//     a large folio first), and the file's pages no process maps are dropped
//     from the page cache (posix_fadvise POSIX_FADV_DONTNEED). The pages the
//     program uses then come back one by one. Pages another process maps
//     too (a second collector from the same file) stay as they are.
//
// The cost is one read from disk for each page of the executable the
// program uses after the call (about 1,000 for the agent), once. The kernel
// reclaims the pages a process maps only if it owns the file, may write it,
// or holds CAP_FOWNER (root, or the shipped Kubernetes manifest's uid 0);
// otherwise it leaves them and only the pages no process maps are dropped.
func ReadExecutableByPage() error {
	if err := readByPage(selfExe); err != nil {
		return fmt.Errorf("read executable by page: %w", err)
	}
	return nil
}

// selfExe names this process's executable.
const selfExe = "/proc/self/exe"

// readByPage advises this process's clean mappings of the file at path
// MADV_RANDOM and drops the file's pages from the page cache: those it maps
// alone, and those no process maps.
func readByPage(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	// A binary written moments ago (make run builds, then starts it) still
	// has dirty pages, which the kernel does not drop: write them first. A
	// file that cannot be written back (a read-only file system: a
	// container's root) has none, so a failure here stops nothing.
	_ = f.Sync()
	vmas, err := readOnlyMappings(path)
	if err != nil {
		return err
	}
	err = eachCleanMapping(vmas, func(v procmaps.SmapsEntry) error {
		if err := madvise(v, unix.MADV_RANDOM); err != nil {
			return err
		}
		return madvise(v, unix.MADV_PAGEOUT)
	})
	if err != nil {
		return err
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("posix_fadvise %s: %w", path, err)
	}
	return nil
}

// eachCleanMapping calls fn for each of vmas (read-only private mappings of
// one file, from readOnlyMappings) that holds no private copies, with Rss the
// bytes of it this process maps.
//
// Their pages are read from /proc/self/pagemap, for these mappings alone.
// /proc/self/smaps tells the same but walks the page tables of every mapping
// of the process (the Go heap, the symbolizer's mappings of other binaries)
// and formats two dozen counts for each: in the agent on a busy node that
// took 18 ms of CPU at every release, a millisecond a second.
func eachCleanMapping(vmas []procmaps.SmapsEntry, fn func(procmaps.SmapsEntry) error) error {
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return err
	}
	defer pagemap.Close()
	buf := make([]byte, pagemapChunk)
	for _, v := range vmas {
		resident, private, err := mappedPages(pagemap, buf, v.Start, v.Limit)
		if err != nil {
			return fmt.Errorf("read /proc/self/pagemap for %#x-%#x: %w", v.Start, v.Limit, err)
		}
		if private {
			continue
		}
		v.Rss = resident
		if err := fn(v); err != nil {
			return err
		}
	}
	return nil
}

// executableMappings are readOnlyMappings of this process's own executable,
// read once: the kernel maps an executable's segments at exec, and a Go
// program never unmaps or re-protects them.
var executableMappings = sync.OnceValues(func() ([]procmaps.SmapsEntry, error) {
	return readOnlyMappings(selfExe)
})

// readOnlyMappings returns this process's read-only private mappings of the
// file at path, from /proc/self/maps. Mappings are matched by inode alone: on
// overlayfs (a container's root) the maps show the underlying file's device,
// stat the overlay's.
func readOnlyMappings(path string) ([]procmaps.SmapsEntry, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	vmas, err := procmaps.ReadSmaps("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(vmas, func(v procmaps.SmapsEntry) bool {
		return v.Inode != st.Ino || (v.Perms != "r-xp" && v.Perms != "r--p")
	}), nil
}

// pagemapChunk is how much of /proc/self/pagemap one read takes: 8 bytes a
// page, so 32 MB of address space.
const pagemapChunk = 64 << 10

// Bits of a /proc/PID/pagemap entry (the kernel's
// Documentation/admin-guide/mm/pagemap.rst).
const (
	pagePresent = 1 << 63
	pageSwapped = 1 << 62 // a swap entry, or a page being migrated
	pageFile    = 1 << 61 // a page of a file (or shared anonymous memory)
)

// mappedPages reads the pagemap entries of the pages from start to limit:
// the bytes present in this process's page tables, and whether any page is
// a private copy (an anonymous page, present or swapped out), which a
// release would discard: the relocations written into a read-only segment
// at start, or an instruction a debugger or uprobe patched.
func mappedPages(pagemap *os.File, buf []byte, start, limit uint64) (resident uint64, private bool, err error) {
	pageSize := uint64(os.Getpagesize())
	for page, end := start/pageSize, limit/pageSize; page < end; {
		n := min(uint64(len(buf))/8, end-page)
		if _, err := pagemap.ReadAt(buf[:n*8], int64(page*8)); err != nil {
			return 0, false, err
		}
		for i := range n {
			e := binary.NativeEndian.Uint64(buf[i*8:])
			if e&pageFile == 0 && e&(pagePresent|pageSwapped) != 0 {
				return 0, true, nil
			}
			if e&pagePresent != 0 {
				resident += pageSize
			}
		}
		page += n
	}
	return resident, false, nil
}

// madvise advises a whole mapping. Go has no madvise on an arbitrary address
// range, only on a slice it made: use the raw call.
func madvise(v procmaps.SmapsEntry, advice int) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(v.Start), uintptr(v.Limit-v.Start), uintptr(advice)); errno != 0 {
		return fmt.Errorf("madvise %#x-%#x: %w", v.Start, v.Limit, errno)
	}
	return nil
}
