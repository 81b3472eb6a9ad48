// Package selfmem returns the pages of this program's own executable that it
// touched once (start-up: DuckDB's and the collector's initialization code,
// configuration parsing) and no longer uses, so the resident size reflects
// what the program keeps using. Those pages stay in the kernel's page cache:
// code that runs again faults them back in without disk I/O.
package selfmem

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
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
	vmas, err := readSmaps("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("release executable pages: %w", err)
	}
	for _, v := range vmas {
		if v.inode != self.Ino || v.anonymous != 0 || v.rss == 0 || (v.perms != "r-xp" && v.perms != "r--p") {
			continue
		}
		// Go has no madvise on an arbitrary address range: use the raw call.
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(v.start), uintptr(v.end-v.start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("release executable pages: madvise %#x-%#x: %w", v.start, v.end, errno)
		}
		released += v.rss
	}
	return released, nil
}

type vma struct {
	start, end     uint64
	perms          string
	inode          uint64
	rss, anonymous uint64 // bytes
}

// readSmaps parses the mappings of an smaps file: the header line of each and
// its Rss and Anonymous fields.
func readSmaps(path string) ([]vma, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []vma
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		if k, v, ok := bytes.Cut(line, []byte(":")); ok && !bytes.ContainsRune(k, ' ') && len(out) > 0 {
			cur := &out[len(out)-1]
			switch string(k) {
			case "Rss", "Anonymous":
				kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(string(v)), "kB")), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("parse %s line %q: %w", path, line, err)
				}
				if string(k) == "Rss" {
					cur.rss = kb << 10
				} else {
					cur.anonymous = kb << 10
				}
			}
			continue
		}
		// start-end perms offset dev inode [path]
		fields := strings.Fields(string(line))
		if len(fields) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		var v vma
		var e1, e2, e3 error
		v.start, e1 = strconv.ParseUint(lo, 16, 64)
		v.end, e2 = strconv.ParseUint(hi, 16, 64)
		v.inode, e3 = strconv.ParseUint(fields[4], 10, 64)
		if e1 != nil || e2 != nil || e3 != nil {
			return nil, fmt.Errorf("parse %s mapping %q", path, line)
		}
		v.perms = fields[1]
		out = append(out, v)
	}
	return out, sc.Err()
}
