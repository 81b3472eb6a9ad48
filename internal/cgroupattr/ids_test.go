package cgroupattr

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeProc makes a proc root whose PID 1 has mountinfo (lines) and a root
// directory with each mount point in it, and returns the proc root.
func fakeProc(t *testing.T, mountinfo ...string) string {
	t.Helper()
	proc := t.TempDir()
	fakeProcess(t, proc, "1", mountinfo...)
	return proc
}

func fakeProcess(t *testing.T, proc, pid string, mountinfo ...string) {
	t.Helper()
	for _, line := range mountinfo {
		point := unescapeMountinfo(strings.Fields(line)[4])
		if err := os.MkdirAll(filepath.Join(proc, pid, "root", point), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proc, pid, "mountinfo"), []byte(strings.Join(mountinfo, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// mkCgroup makes the directory of a cgroup (a path in the hierarchy) under
// the mount at root and returns its id, the directory's inode number.
func mkCgroup(t *testing.T, root, cgroup string) uint64 {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(cgroup))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A hybrid host's mounts (cgroup v1 controllers and the v2 hierarchy at
// /sys/fs/cgroup/unified), as the machine the tests run on has them.
var hybridMounts = []string{
	"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755",
	"39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids",
	"41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
}

// The container of a cgroup id is the one its directory's path names, in
// each layout Parse reads; a cgroup outside containers is known and has
// none; an id no cgroup has is not known.
func TestIDsNameTheContainerOfACgroup(t *testing.T) {
	proc := fakeProc(t, hybridMounts...)
	ids, err := NewIDs(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(proc, "1", "root", "sys", "fs", "cgroup", "unified"); ids.Root() != want {
		t.Fatalf("root %s, want %s", ids.Root(), want)
	}
	containerd := mkCgroup(t, ids.Root(), "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4c9f1974_5c46_44c2_b42f_3bbf0e98eef9.slice/cri-containerd-bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba.scope")
	pod := mkCgroup(t, ids.Root(), "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod4c9f1974_5c46_44c2_b42f_3bbf0e98eef9.slice")
	cgroupfs := mkCgroup(t, ids.Root(), "kubepods/burstable/pod05e102bf-8744-4942-a241-9b6f07983a53/f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8")
	host := mkCgroup(t, ids.Root(), "user.slice/user-0.slice/session-3.scope")

	for _, tc := range []struct {
		name string
		id   uint64
		want Container
	}{
		{"containerd, systemd driver", containerd, Container{"bacb920470900725e0aa7d914fee5eb0854315448b024b6b8420ad8429c607ba", "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9", RuntimeContainerd}},
		{"the pod's own cgroup", pod, Container{PodUID: "4c9f1974-5c46-44c2-b42f-3bbf0e98eef9"}},
		{"cgroupfs driver", cgroupfs, Container{"f52a212505a606972cf8614c3cb856539e71b77ecae33436c5ac442232fbacf8", "05e102bf-8744-4942-a241-9b6f07983a53", ""}},
		{"a host session", host, Container{}},
	} {
		got, ok := ids.Container(tc.id)
		if !ok || got != tc.want {
			t.Errorf("%s (id %d): %+v, %v; want %+v, true", tc.name, tc.id, got, ok, tc.want)
		}
	}
	if got, ok := ids.Container(1 << 62); ok {
		t.Errorf("an id no cgroup has: %+v, known", got)
	}
	if got, ok := ids.Container(0); ok {
		t.Errorf("id 0: %+v, known", got)
	}
	var none *IDs
	if got, ok := none.Container(containerd); ok {
		t.Errorf("nil IDs: %+v, known", got)
	}
}

// A cgroup created after the last walk is found by the next walk, and an
// unknown id walks the hierarchy at most once per interval however often
// it is asked for.
func TestIDsWalkAgainForANewCgroupAtMostOncePerInterval(t *testing.T) {
	proc := fakeProc(t, hybridMounts...)
	ids, err := NewIDs(proc)
	if err != nil {
		t.Fatal(err)
	}
	first := mkCgroup(t, ids.Root(), "system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope")
	if c, ok := ids.Container(first); !ok || c.ID == "" {
		t.Fatalf("first container: %+v, %v", c, ok)
	}
	if ids.Walks() != 1 {
		t.Fatalf("%d walks, want 1", ids.Walks())
	}

	ids.every = time.Hour
	later := mkCgroup(t, ids.Root(), "system.slice/docker-31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30.scope")
	for range 100 {
		if c, ok := ids.Container(later); ok {
			t.Fatalf("a cgroup made after the walk, within its interval: %+v, known", c)
		}
	}
	if c, ok := ids.Container(first); !ok || c.ID == "" {
		t.Fatalf("first container again: %+v, %v", c, ok)
	}
	if ids.Walks() != 1 {
		t.Fatalf("%d walks for 100 lookups of one unknown id within the interval, want 1", ids.Walks())
	}

	ids.every = 0 // the interval is over
	if c, ok := ids.Container(later); !ok || c.ID != "31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30" || c.Runtime != RuntimeDocker {
		t.Fatalf("the later container after the interval: %+v, %v", c, ok)
	}
	// The walk reads the hierarchy as it is: a removed cgroup goes.
	if err := os.Remove(filepath.Join(ids.Root(), "system.slice", "docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope")); err != nil {
		t.Fatal(err)
	}
	if c, ok := ids.Container(1 << 62); ok {
		t.Fatalf("unknown id: %+v", c)
	}
	if c, ok := ids.Container(first); ok && c.ID != "" {
		// The inode number may have been reused by another directory since;
		// it must not name the removed container.
		t.Fatalf("a removed cgroup still names its container: %+v", c)
	}
}

// A mount point with a space (mountinfo writes \040) and a hierarchy
// mounted from a cgroup below the root (a cgroup namespace's view): the
// paths are the hierarchy's, with the mount's root in front.
func TestIDsMountEscapesAndRoot(t *testing.T) {
	proc := fakeProc(t, `50 23 0:40 /kubepods.slice /run/cg\040v2 rw - cgroup2 cgroup2 rw`)
	ids, err := NewIDs(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(proc, "1", "root", "run", "cg v2"); ids.Root() != want {
		t.Fatalf("root %q, want %q", ids.Root(), want)
	}
	id := mkCgroup(t, ids.Root(), "kubepods-besteffort.slice/kubepods-besteffort-pod897277d4_5e6f_4999_a976_b8340e8d075e.slice/crio-a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3.scope")
	c, ok := ids.Container(id)
	if !ok || c != (Container{"a4d6b686848a610472a2eed3ae20d4d64b6b4819feb9fdfc7fd7854deaf59ef3", "897277d4-5e6f-4999-a976-b8340e8d075e", RuntimeCRIO}) {
		t.Fatalf("%+v, %v", c, ok)
	}
}

// A host with cgroup v1 alone has no ids to look up: a readable error.
func TestIDsWithoutCgroupV2(t *testing.T) {
	proc := fakeProc(t, hybridMounts[:2]...)
	_, err := NewIDs(proc)
	if err == nil || !strings.Contains(err.Error(), "no cgroup v2 hierarchy") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewIDs(t.TempDir()); err == nil {
		t.Fatal("no mountinfo: no error")
	}
}

// Where PID 1's root cannot be entered (its mount point is not there), the
// agent's own mounts are read.
func TestIDsFallBackToTheAgentsOwnMounts(t *testing.T) {
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proc, "1", "mountinfo"), []byte(hybridMounts[2]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fakeProcess(t, proc, "self", "29 20 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw")
	ids, err := NewIDs(proc)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(proc, "self", "root", "sys", "fs", "cgroup"); ids.Root() != want {
		t.Fatalf("root %s, want %s", ids.Root(), want)
	}
}
