package buildid

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

var binaryLE = binary.LittleEndian

func TestCacheReadsOnceAndNoticesReplacement(t *testing.T) {
	dir := t.TempDir()
	a := compileC(t, dir, "a", "-Wl,--build-id=sha1")
	b := compileC(t, dir, "b", "-Wl,--build-id=md5")
	path := filepath.Join(dir, "app")
	if err := os.Link(a, path); err != nil {
		t.Fatal(err)
	}
	c := NewCache(8)
	first, id1, hit, err := c.Lookup(path)
	if err != nil || hit {
		t.Fatalf("first lookup: hit=%v err=%v", hit, err)
	}
	again, id2, hit, err := c.Lookup(path)
	if err != nil || !hit || again != first || id1 != id2 {
		t.Fatalf("second lookup: hit=%v err=%v info=%+v", hit, err, again)
	}
	// Redeploy: a new binary renamed over the path.
	tmp := filepath.Join(dir, "app.new")
	if err := os.Link(b, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	replaced, id3, hit, err := c.Lookup(path)
	if err != nil || hit {
		t.Fatalf("after replacement: hit=%v err=%v", hit, err)
	}
	if replaced.GNU == first.GNU || id3 == id1 || replaced.GNU != readelfGNU(t, b) {
		t.Errorf("replacement not noticed: %+v (was %+v)", replaced, first)
	}
}

func TestCacheIsBounded(t *testing.T) {
	dir := t.TempDir()
	c := NewCache(2)
	var paths []string
	for _, n := range []string{"x", "y", "z"} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, []byte("not elf "+n), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		if _, _, _, err := c.Lookup(p); err != nil {
			t.Fatal(err)
		}
	}
	if c.Len() != 2 {
		t.Fatalf("cache holds %d, want 2", c.Len())
	}
	if _, _, hit, _ := c.Lookup(paths[0]); hit {
		t.Errorf("least recently used entry was not evicted")
	}
	if _, _, hit, _ := c.Lookup(paths[2]); !hit {
		t.Errorf("recent entry was evicted")
	}
}

func TestCacheErrors(t *testing.T) {
	c := NewCache(4)
	if _, _, _, err := c.Lookup(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, _, _, err := c.Lookup(t.TempDir()); !errors.Is(err, ErrNotRegular) {
		t.Errorf("directory: %v", err)
	}
}

// BenchmarkCacheHit is the per-lookup cost once a binary is known: one stat
// and a map lookup.
func BenchmarkCacheHit(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	c := NewCache(16)
	if _, _, _, err := c.Lookup(exe); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, hit, err := c.Lookup(exe); err != nil || !hit {
			b.Fatal("miss")
		}
	}
}

// BenchmarkReadGoBinary is the miss cost for a Go binary (notes only).
func BenchmarkReadGoBinary(b *testing.B) {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Read(exe); err != nil {
			b.Fatal(err)
		}
	}
}

// LookupID answers a cached identity without touching the path (the path
// given is gone), and reads the file at path for an identity not cached,
// returning that file's own identity.
func TestCacheLookupIDAnswersCachedIdentityWithoutStat(t *testing.T) {
	dir := t.TempDir()
	a := compileC(t, dir, "a", "-Wl,--build-id=sha1")
	c := NewCache(8)
	first, id, _, err := c.Lookup(a)
	if err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(dir, "gone")
	got, gotID, hit, err := c.LookupID(id, gone)
	if err != nil || !hit || got != first || gotID != id {
		t.Fatalf("LookupID of a cached identity: %+v %v hit=%v err=%v, want %+v from the cache", got, gotID, hit, err, first)
	}
	other := id
	other.Mtime++
	if _, _, _, err := c.LookupID(other, gone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("LookupID of an identity not cached, path gone: err = %v, want the path's stat error", err)
	}
	got, gotID, hit, err = c.LookupID(other, a)
	if err != nil || !hit || got != first || gotID != id {
		t.Errorf("LookupID of an identity not cached: %+v %v hit=%v err=%v, want the file at the path (%v)", got, gotID, hit, err, id)
	}
}
