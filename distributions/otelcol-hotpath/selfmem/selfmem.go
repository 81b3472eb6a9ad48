// Package selfmem returns the pages of this program's own executable that it
// touched once (start-up: DuckDB's and the collector's initialization code,
// configuration parsing) and no longer uses, so the resident size reflects
// what the program keeps using. Those pages stay in the kernel's page cache:
// code that runs again faults them back in without disk I/O.
package selfmem

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// ReleaseExecutablePages drops this process's mappings of pages of its own
// executable file from its page tables (madvise MADV_DONTNEED) and returns the
// resident bytes they held. Only read-only private mappings without private
// copies (smaps "Anonymous: 0") are touched: their contents are the file's,
// which cannot change under a running executable (the kernel refuses writes
// to it, ETXTBSY; a new build is a new inode), so a later access reads the
// same bytes back from the page cache.
func ReleaseExecutablePages() (released uint64, err error) {
	var self syscall.Stat_t
	if err := syscall.Stat("/proc/self/exe", &self); err != nil {
		return 0, fmt.Errorf("release executable pages: stat own executable: %w", err)
	}
	vmas, err := procmaps.ReadSmaps("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("release executable pages: %w", err)
	}
	for _, v := range vmas {
		if v.Inode != self.Ino || v.Anonymous != 0 || v.Rss == 0 || (v.Perms != "r-xp" && v.Perms != "r--p") {
			continue
		}
		// Go has no madvise on an arbitrary address range: use the raw call.
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(v.Start), uintptr(v.Limit-v.Start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("release executable pages: madvise %#x-%#x: %w", v.Start, v.Limit, errno)
		}
		released += v.Rss
	}
	return released, nil
}
