// Package smalldisk gives tests a disk that fills up: a tmpfs of a chosen
// size mounted on a fresh temporary directory. Mounting needs root
// (CAP_SYS_ADMIN), so only privileged tests use it.
package smalldisk

import (
	"strconv"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size bytes on a new temporary directory and
// returns its path; the test's cleanup unmounts it (detached, so a file a
// failed test left open does not keep it mounted).
func Mount(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.FormatInt(size, 10)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s (needs root): %v", size, dir, err)
	}
	// Registered after TempDir's cleanup, so it runs before the removal.
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}
