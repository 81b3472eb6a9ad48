//go:build privileged

package smalldisk

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestMountFillsUp writes past the disk's size: the write fails with
// ENOSPC, and after the test's cleanup the directory is no longer a mount.
func TestMountFillsUp(t *testing.T) {
	var dir string
	t.Run("fill", func(t *testing.T) {
		dir = Mount(t, 64<<10)
		f, err := os.Create(filepath.Join(dir, "f"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		_, err = f.Write(make([]byte, 128<<10))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("writing 128 KiB to a 64 KiB disk: %v, want ENOSPC", err)
		}
	})
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err == nil {
		t.Fatalf("%s still exists after the test's cleanup", dir)
	}
}
