package selfmem

import (
	"crypto/sha256"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
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
