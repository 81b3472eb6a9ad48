//go:build linux

// Package cgrouptest makes cgroups for tests in the machine's cgroup v2
// hierarchy, where cgroupattr.IDs finds them. Tests that use it need root.
package cgrouptest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
)

// Make creates the cgroup at path (slash-separated, below the hierarchy's
// root; its parents too) and removes what it created after the test. It
// returns the cgroup's directory and its id: the directory's inode number,
// which the kernel reports for a process in it.
func Make(tb testing.TB, path string) (dir string, id uint64) {
	tb.Helper()
	ids, err := cgroupattr.NewIDs("/proc")
	if err != nil {
		tb.Fatalf("this test needs a cgroup v2 hierarchy: %v", err)
	}
	root := ids.Root()
	dir = filepath.Join(root, filepath.FromSlash(path))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("create cgroup %s (needs root): %v", path, err)
	}
	tb.Cleanup(func() {
		for d := dir; d != root; d = filepath.Dir(d) {
			_ = os.Remove(d) // fails for a parent still in use
		}
	})
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		tb.Fatal(err)
	}
	return dir, st.Ino
}
