//go:build privileged

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/smalldisk"
)

// TestCompactOnAFullDisk: with less room beside the file than the copy may
// need, compact says so and leaves the file as it was.
func TestCompactOnAFullDisk(t *testing.T) {
	dir := smalldisk.Mount(t, 32<<20)
	path := filepath.Join(dir, "hotpath.duckdb")
	writeDB(t, "local", path, "", deployFixture(time.Now().UTC()))
	was, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Fill the disk but for half the file's size.
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	fill := int64(st.Bavail)*st.Bsize - int64(len(was))/2
	if err := os.WriteFile(filepath.Join(dir, "filler"), make([]byte, fill), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "compact", "--db", path)
	if code != 1 || !strings.Contains(stderr, "not enough free space") {
		t.Fatalf("code %d, stderr %q", code, stderr)
	}
	now, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now, was) {
		t.Fatal("a refused compact changed the file")
	}
	if _, err := os.Stat(path + ".compact"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused compact left its copy (%v)", err)
	}
	// With the room back it compacts.
	if err := os.Remove(filepath.Join(dir, "filler")); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := runCLI(t, "compact", "--db", path); code != 0 {
		t.Fatalf("compact with room: code %d, stderr %q", code, stderr)
	}
}
