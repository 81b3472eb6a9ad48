package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/bench/internal/filecopy"
	"github.com/hotpath-dev/hotpath/internal/cgroupattr"
)

// The container phase runs the churn's workload in a container as a
// container runtime on a Kubernetes node makes one: an overlay mount whose
// lower layer is the host's root file system (the image: the same gcc, go
// and python3), each process created in a cgroup v2 directory laid out as
// the kubelet's cgroupfs driver lays out a containerd container
// (kubepods/burstable/pod<uid>/<container id>) and chrooted into the
// overlay. The agent has to find the container's binaries through
// /proc/PID/root (their files are the overlay's, with its device number),
// and name the container of every sample, including those of processes
// that exit before it reads them.

// Fixed ids: the cgroup path is what cgroupattr parses, and a fixed id is
// what the phase's queries select.
const (
	benchPodUID      = "7f2c1d9e-4b6a-4f0e-9d3c-2a1b0c9d8e7f"
	benchContainerID = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"
)

// benchContainer is one container's overlay and cgroup.
type benchContainer struct {
	// Rootfs is the overlay's mount point: the container's "/", as the
	// host sees it.
	Rootfs string
	// ID is the container id its cgroup path carries.
	ID     string
	mounts []string // to unmount, last first
	cgroup []string // directories made, the container's first
	cgFD   *os.File // the container's cgroup directory, for CLONE_INTO_CGROUP
}

// newBenchContainer mounts the overlay under dir (its upper and work
// directories beside it) with /dev and a /proc of its own, and makes the
// cgroup. close undoes both.
func newBenchContainer(dir string) (_ *benchContainer, err error) {
	c := &benchContainer{Rootfs: filepath.Join(dir, "rootfs"), ID: benchContainerID}
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	for _, d := range []string{"upper", "work", "rootfs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	opts := fmt.Sprintf("lowerdir=/,upperdir=%s,workdir=%s", filepath.Join(dir, "upper"), filepath.Join(dir, "work"))
	if err := unix.Mount("overlay", c.Rootfs, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("mount the container's overlay on %s (%s): %w", c.Rootfs, opts, err)
	}
	c.mounts = append(c.mounts, c.Rootfs)
	// The lower layer is the root file system alone: /dev and /proc are
	// other mounts, which gcc, go and python3 need.
	dev := filepath.Join(c.Rootfs, "dev")
	if err := unix.Mount("/dev", dev, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("bind /dev into the container: %w", err)
	}
	c.mounts = append(c.mounts, dev)
	proc := filepath.Join(c.Rootfs, "proc")
	if err := unix.Mount("proc", proc, "proc", 0, ""); err != nil {
		return nil, fmt.Errorf("mount /proc in the container: %w", err)
	}
	c.mounts = append(c.mounts, proc)

	ids, err := cgroupattr.NewIDs("/proc")
	if err != nil {
		return nil, fmt.Errorf("the container phase needs a cgroup v2 hierarchy: %w", err)
	}
	cg := filepath.Join(ids.Root(), "kubepods", "burstable", "pod"+benchPodUID, c.ID)
	for d := cg; d != ids.Root(); d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		c.cgroup = append(c.cgroup, d)
	}
	if err := os.MkdirAll(cg, 0o755); err != nil {
		return nil, fmt.Errorf("make the container's cgroup: %w", err)
	}
	if c.cgFD, err = os.Open(cg); err != nil {
		return nil, err
	}
	return c, nil
}

// host is where the bench writes or reads the container's path p.
func (c *benchContainer) host(p string) string { return filepath.Join(c.Rootfs, p) }

// enter makes a process start in the container: in its cgroup from its
// creation (clone3's CLONE_INTO_CGROUP) and chrooted into its overlay
// (before its working directory is set, which is then the container's).
func (c *benchContainer) enter(a *syscall.SysProcAttr) {
	a.Chroot = c.Rootfs
	a.UseCgroupFD = true
	a.CgroupFD = int(c.cgFD.Fd())
}

// install copies the host's file p into the container at the same path
// (a program of the image), so that it runs whatever file system p is on.
func (c *benchContainer) install(p string) error {
	dst := c.host(p)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return filecopy.Copy(p, dst, 0o755)
}

// close unmounts the container's file systems and removes its cgroup once
// its processes are gone (the caller has killed and reaped them; an exiting
// process leaves the cgroup a moment after its parent reaped it).
func (c *benchContainer) close() {
	if c.cgFD != nil {
		_ = c.cgFD.Close()
	}
	var errs []error
	for i := len(c.mounts) - 1; i >= 0; i-- {
		if err := unix.Unmount(c.mounts[i], unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", c.mounts[i], err))
		}
	}
	c.mounts = nil
	for _, d := range c.cgroup {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("remove the container's cgroup %s: %w", d, err))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	c.cgroup = nil
	if len(errs) > 0 {
		logf("container: %v", errors.Join(errs...))
	}
}
