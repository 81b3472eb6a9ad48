//go:build linux

// Package overlaytest runs programs the way the containers of one image run
// them: each from an overlay mount of its own over one shared lower layer,
// in a mount namespace of its own. The file each container sees has the
// lower file's inode number and a device number of its mount's, which is
// what per-binary caches keyed by file identity meet on a node of
// containers. Tests that use it need root (mount, unshare).
package overlaytest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Image is a lower layer in a test's temporary directory.
type Image struct {
	root, lower string
}

// NewImage makes a lower layer holding a copy of the file at src, as name.
func NewImage(tb testing.TB, src, name string) *Image {
	tb.Helper()
	root := tb.TempDir()
	im := &Image{root: root, lower: filepath.Join(root, "lower")}
	if err := os.Mkdir(im.lower, 0o755); err != nil {
		tb.Fatal(err)
	}
	im.Add(tb, src, name)
	return im
}

// Add copies the file at src into the lower layer as name (a program's
// library beside it).
func (im *Image) Add(tb testing.TB, src, name string) {
	tb.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(im.lower, name), data, 0o755); err != nil {
		tb.Fatal(err)
	}
}

// container is container i's directory: its upper and work directories
// and the mount point of its overlay.
func (im *Image) container(i int) string {
	return filepath.Join(im.root, fmt.Sprintf("container%d", i))
}

// Rootfs is where container i's process sees the image's files, in its
// own mount namespace (from outside, under /proc/PID/root).
func (im *Image) Rootfs(i int) string {
	return filepath.Join(im.container(i), "rootfs")
}

// Command is container i's run of the image's file name with args: it
// mounts the container's overlay (upper and work directories of its own)
// in a private mount namespace and execs the file from it, so the process
// is the program once it has exec'd.
func (im *Image) Command(tb testing.TB, i int, name string, args ...string) *exec.Cmd {
	tb.Helper()
	dir := im.container(i)
	for _, d := range []string{"upper", "work", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	script := fmt.Sprintf(`mount -t overlay overlay -o lowerdir=%s,upperdir=%[2]s/upper,workdir=%[2]s/work %[2]s/rootfs && exec %[2]s/rootfs/%s "$@"`, im.lower, dir, name)
	return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh"}, args...)...)
}
