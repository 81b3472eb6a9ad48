package selfmem

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// Releasing the executable's pages shrinks the resident file pages and the
// program keeps working: code and read-only data are read back as they were.
func TestReleaseExecutablePages(t *testing.T) {
	// Touch code and read-only data.
	want := work()
	before := rssFile(t)
	released, err := ReleaseExecutablePages()
	if err != nil {
		t.Fatal(err)
	}
	if released == 0 {
		t.Fatal("nothing released: the test binary's pages should have been resident")
	}
	after := rssFile(t)
	if after >= before {
		t.Errorf("RssFile %d kB before, %d kB after releasing %d kB", before, after, released>>10)
	}
	if got := work(); got != want {
		t.Fatalf("the program computes %x after the release, %x before", got, want)
	}
}

// work runs code of several packages and reads read-only tables.
func work() [32]byte {
	words := strings.Fields("the quick brown fox jumps over the lazy dog " + strconv.Itoa(12345))
	sort.Strings(words)
	return sha256.Sum256([]byte(strings.Join(words, ",")))
}

func rssFile(t *testing.T) uint64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// ReadExecutableByPage advises each of the executable's read-only mappings
// MADV_RANDOM, drops cached pages, and the program computes as before.
func TestReadExecutableByPage(t *testing.T) {
	want := work()
	if _, err := os.ReadFile(selfExe); err != nil { // every page of the file cached
		t.Fatal(err)
	}
	mappings := cleanMappings(t, selfExe)
	before := count(cachedPages(t, mappings...))
	if _, err := ReleaseExecutablePages(); err != nil {
		t.Fatal(err)
	}
	// Pages the test runs meanwhile (its code, the runtime's) are cached
	// again at once; most of the binary is not. The kernel drops no page
	// another process maps, and an agent running on this machine (make
	// run's, while make test runs) maps this test's binary for a moment
	// whenever it names the test's sampled frames, in whole large folios of
	// a binary just linked: try again until that moment is over.
	deadline := time.Now().Add(time.Minute)
	for {
		if err := ReadExecutableByPage(); err != nil {
			t.Fatal(err)
		}
		after := count(cachedPages(t, mappings...))
		if after < before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the executable's mapped pages cached after dropping them for a minute, %d before (%s)", after, before, otherMappers(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, v := range cleanMappings(t, selfExe) {
		if v := smapsEntry(t, v.Start); !slices.Contains(v.VmFlags, "rr") {
			t.Errorf("mapping %#x-%#x (%s) has VmFlags %v: not advised MADV_RANDOM", v.Start, v.Limit, v.Perms, v.VmFlags)
		}
	}
	if got := work(); got != want {
		t.Fatalf("the program computes %x after dropping its cached pages, %x before", got, want)
	}
}

// On a file nothing else uses: readByPage drops every cached page, those
// the test maps included, and a fault then reads the page it needs alone,
// where a read-around would cache the 32 pages around it. The bytes read
// are the file's.
func TestReadByPageReadsOnePage(t *testing.T) {
	const pages = 256
	pageSize := os.Getpagesize()
	content := make([]byte, pages*pageSize)
	for i := range content {
		content[i] = byte(i*7 + i/pageSize)
	}
	path := filepath.Join(diskDir(t), "mapped")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, len(content), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	mappings := cleanMappings(t, path)
	if len(mappings) != 1 {
		t.Fatalf("%d read-only mappings of %s, want 1", len(mappings), path)
	}
	// Mapped as well as cached: the first half faulted in through the
	// mapping, so only reclaiming them, not dropping unmapped pages, frees
	// it.
	var got, want byte
	for off := 0; off < len(data)/2; off += pageSize {
		got += data[off]
		want += content[off]
	}
	if got != want {
		t.Fatalf("the mapping's first half sums to %#x, the file's to %#x", got, want)
	}
	if n := count(cachedPages(t, mappings...)); n != pages {
		t.Fatalf("%d of %d pages cached after writing the file", n, pages)
	}
	mapped := cleanMappings(t, path)[0]
	if mapped.Rss < uint64(len(data)/2) {
		t.Fatalf("%d bytes of the mapping resident after reading its first half (%d bytes)", mapped.Rss, len(data)/2)
	}
	if kernel := smapsEntry(t, mapped.Start).Rss; mapped.Rss != kernel {
		t.Fatalf("%d bytes of the mapping resident by its pagemap, %d by smaps", mapped.Rss, kernel)
	}

	if err := readByPage(path); err != nil {
		t.Fatal(err)
	}
	if n := count(cachedPages(t, mappings...)); n != 0 {
		t.Fatalf("%d of %d pages still cached after dropping them", n, pages)
	}
	dropped := cleanMappings(t, path)[0]
	if flags := smapsEntry(t, dropped.Start).VmFlags; !slices.Contains(flags, "rr") {
		t.Errorf("VmFlags %v: not advised MADV_RANDOM", flags)
	}
	if dropped.Rss != 0 {
		t.Errorf("%d bytes of the mapping still resident after dropping its pages", dropped.Rss)
	}
	page := pages / 2
	if got, want := data[page*pageSize+5], content[page*pageSize+5]; got != want {
		t.Fatalf("byte read through the mapping is %#x, the file has %#x", got, want)
	}
	cached := cachedPages(t, mappings...)[0]
	if !cached[page] {
		t.Fatalf("page %d not cached after reading it", page)
	}
	if n := count([][]bool{cached}); n > 4 {
		t.Errorf("reading one page cached %d of the file's %d: the fault read ahead", n, pages)
	}
}

// A read-only private mapping that holds a private copy of a page (the
// relocations the dynamic loader writes into a segment it then makes
// read-only, or an instruction a debugger or a uprobe patched) is left out:
// releasing it would bring the file's bytes back in place of the copy. A
// mapping of the same file without one is passed on.
func TestMappingWithAPrivateCopyIsLeft(t *testing.T) {
	const pages = 16
	pageSize := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "patched")
	if err := os.WriteFile(path, bytes.Repeat([]byte{0xaa}, pages*pageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mmap := func(prot int) []byte {
		t.Helper()
		data, err := syscall.Mmap(int(f.Fd()), 0, pages*pageSize, prot, syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Munmap(data) })
		return data
	}
	patched := mmap(syscall.PROT_READ | syscall.PROT_WRITE)
	patched[5*pageSize] = 0x55
	if err := syscall.Mprotect(patched, syscall.PROT_READ); err != nil {
		t.Fatal(err)
	}
	plain := mmap(syscall.PROT_READ)
	if plain[3*pageSize] != 0xaa || patched[3*pageSize] != 0xaa {
		t.Fatal("the mappings do not read the file's bytes")
	}

	var passed []procmaps.SmapsEntry
	var kernelRss uint64
	vmas, err := readOnlyMappings(path)
	if err != nil {
		t.Fatal(err)
	}
	err = eachCleanMapping(vmas, func(v procmaps.SmapsEntry) error {
		passed = append(passed, v)
		kernelRss = smapsEntry(t, v.Start).Rss
		return madvise(v, unix.MADV_DONTNEED)
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := patched[5*pageSize]; got != 0x55 {
		t.Fatalf("the private copy reads %#x after the release, want 0x55", got)
	}
	plainStart := uint64(uintptr(unsafe.Pointer(&plain[0])))
	if len(passed) != 1 || passed[0].Start != plainStart {
		t.Fatalf("passed %d mappings (%+v), want the one at %#x without a private copy", len(passed), passed, plainStart)
	}
	if passed[0].Rss == 0 || passed[0].Rss != kernelRss {
		t.Errorf("the plain mapping held %d bytes by its pagemap, %d by smaps", passed[0].Rss, kernelRss)
	}
	if kernel := smapsEntry(t, plainStart).Rss; kernel != 0 {
		t.Errorf("%d bytes of the plain mapping still resident after the release", kernel)
	}
}

// A file cached in large folios and mapped by a second process too (make
// run's gateway beside its agent, both started from the file the build has
// just written): readByPage leaves the folios the other process maps, so a
// fault on one page maps the whole folio again. Once the other process has
// released them, readByPage reclaims them (this process alone maps them now)
// and a fault maps the page alone. This is why the bench runs its gateway
// from a copy of the binary.
func TestReadByPageLeavesWhatAnotherProcessMaps(t *testing.T) {
	const size = 8 << 20
	content := make([]byte, size)
	for i := range content {
		content[i] = byte(i*13 + i>>12)
	}
	path := filepath.Join(diskDir(t), "shared")
	// One write: the page cache keeps it in folios as large as the file
	// system allows (2 MB on ext4 with Linux 6.18), as it keeps a binary that
	// a linker has just written.
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	other := mapInChild(t, path)

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(data)
	page := size/2 + 3*os.Getpagesize()
	// resident releases this process's mapping (as ReleaseExecutablePages
	// does), reads one byte of page and returns what one fault mapped.
	resident := func() uint64 {
		t.Helper()
		if err := unix.Madvise(data, unix.MADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		if got, want := data[page+5], content[page+5]; got != want {
			t.Fatalf("byte read through the mapping is %#x, the file has %#x", got, want)
		}
		return cleanMappings(t, path)[0].Rss
	}
	const faultAround = 64 << 10 // the kernel's default fault_around_bytes
	first := resident()
	if first <= faultAround {
		t.Fatalf("one fault mapped %d kB of a file written at once: the page cache holds it in small folios, so this test shows nothing; it needs a kernel and file system with large folios (Linux 6.x with ext4 or XFS)", first>>10)
	}

	if err := readByPage(path); err != nil {
		t.Fatal(err)
	}
	shared := resident()
	if shared <= faultAround {
		t.Errorf("one fault mapped %d kB after dropping the file while another process mapped it: the kernel now drops folios another process maps (update readByPage's comment, README's Memory settings and the bench's gateway copy)", shared>>10)
	}

	other.release(t)
	if err := readByPage(path); err != nil {
		t.Fatal(err)
	}
	released := resident()
	t.Logf("one fault mapped %d kB at first, %d kB after dropping while the other process mapped the file, %d kB after dropping once it had released it", first>>10, shared>>10, released>>10)
	if released > faultAround {
		t.Errorf("one fault mapped %d kB after dropping the file once no other process mapped it, want at most %d kB", released>>10, faultAround>>10)
	}
}

// mappingChild is a child process that maps a file and reads every page of
// it until told to release them.
type mappingChild struct {
	stdin *os.File
	lines *bufio.Scanner
}

const mapEnv = "SELFMEM_TEST_MAP"

// TestMapChild is the child of mapInChild, not a test of its own.
func TestMapChild(t *testing.T) {
	path := os.Getenv(mapEnv)
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	// The sum is printed so that the reads cannot be left out.
	var sum byte
	for off := 0; off < len(data); off += os.Getpagesize() {
		sum += data[off]
	}
	os.Stdout.WriteString("mapped " + strconv.Itoa(int(sum)) + "\n")
	in := bufio.NewScanner(os.Stdin)
	in.Scan()
	if err := unix.Madvise(data, unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("released\n")
	in.Scan() // until the parent closes stdin
	os.Exit(0)
}

func mapInChild(t *testing.T, path string) *mappingChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMapChild$")
	cmd.Env = append(os.Environ(), mapEnv+"="+path)
	stdin, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin = stdin
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	t.Cleanup(func() { w.Close(); _ = cmd.Wait() })
	c := &mappingChild{stdin: w, lines: bufio.NewScanner(out)}
	if !c.lines.Scan() || !strings.HasPrefix(c.lines.Text(), "mapped ") {
		t.Fatalf("child: %q", c.lines.Text())
	}
	return c
}

// release has the child drop its mapping's pages and waits until it has.
func (c *mappingChild) release(t *testing.T) {
	t.Helper()
	if _, err := c.stdin.WriteString("release\n"); err != nil {
		t.Fatal(err)
	}
	if !c.lines.Scan() || c.lines.Text() != "released" {
		t.Fatalf("child: %q", c.lines.Text())
	}
}

// diskDir is a directory on a disk file system: the page cache of a tmpfs
// file is its only copy and cannot be dropped.
func diskDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return dir
	}
	dir, err := os.MkdirTemp(".", ".selfmem-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func cleanMappings(t *testing.T, path string) []procmaps.SmapsEntry {
	t.Helper()
	var out []procmaps.SmapsEntry
	vmas, err := readOnlyMappings(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := eachCleanMapping(vmas, func(v procmaps.SmapsEntry) error { out = append(out, v); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no read-only private mapping of %s", path)
	}
	return out
}

// otherMappers names the other processes that map this executable.
func otherMappers(t *testing.T) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(selfExe, &st); err != nil {
		t.Fatal(err)
	}
	maps, err := filepath.Glob("/proc/[0-9]*/maps")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, path := range maps {
		pid := filepath.Base(filepath.Dir(path))
		vmas, err := procmaps.ReadSmaps(path)
		if err != nil || pid == strconv.Itoa(os.Getpid()) {
			continue // gone since the glob, or this process
		}
		if slices.ContainsFunc(vmas, func(v procmaps.SmapsEntry) bool { return v.Inode == st.Ino }) {
			comm, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "comm"))
			out = append(out, pid+" "+strings.TrimSpace(string(comm)))
		}
	}
	if len(out) == 0 {
		return "no other process maps it"
	}
	return "mapped by " + strings.Join(out, ", ")
}

// smapsEntry is the kernel's own account (/proc/self/smaps) of the mapping
// that starts at start.
func smapsEntry(t *testing.T, start uint64) procmaps.SmapsEntry {
	t.Helper()
	vmas, err := procmaps.ReadSmaps("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmas {
		if v.Start == start {
			return v
		}
	}
	t.Fatalf("no mapping at %#x in /proc/self/smaps", start)
	return procmaps.SmapsEntry{}
}

// cachedPages is mincore(2) of each mapping: which of its pages are in the
// page cache.
func cachedPages(t *testing.T, mappings ...procmaps.SmapsEntry) [][]bool {
	t.Helper()
	out := make([][]bool, len(mappings))
	for m, v := range mappings {
		vec := make([]byte, (v.Limit-v.Start)/uint64(os.Getpagesize()))
		if _, _, errno := syscall.Syscall(syscall.SYS_MINCORE, uintptr(v.Start), uintptr(v.Limit-v.Start), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatalf("mincore %#x-%#x: %v", v.Start, v.Limit, errno)
		}
		out[m] = make([]bool, len(vec))
		for i, b := range vec {
			out[m][i] = b&1 != 0
		}
	}
	return out
}

func count(pages [][]bool) (n int) {
	for _, mapping := range pages {
		for _, c := range mapping {
			if c {
				n++
			}
		}
	}
	return n
}

func TestNextRelease(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.DateTime, "2026-11-30 "+s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct{ now, want string }{
		{"10:00:00", "10:00:05"},
		{"10:00:04.999", "10:00:05"},
		{"10:00:05", "10:00:20"}, // after now, never now
		{"10:00:05.001", "10:00:20"},
		{"10:00:14.999", "10:00:20"},
		{"10:00:59", "10:01:05"},
	} {
		if got := NextRelease(at(c.now), 15*time.Second, 5*time.Second); !got.Equal(at(c.want)) {
			t.Errorf("NextRelease(%s) = %s, want %s", c.now, got.Format(time.TimeOnly), c.want)
		}
	}
}
