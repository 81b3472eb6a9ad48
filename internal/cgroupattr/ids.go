package cgroupattr

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// IDs finds the container of a cgroup by its cgroup v2 id: the id the
// kernel gives a process's cgroup (the sampler's lifecycle events carry
// it), which is the inode number of the cgroup's directory. It places a
// process that exits before its /proc/PID/cgroup can be read: a short-lived
// command in a container on a busy node.
//
// The hierarchy is read as the node's init process sees it
// (procRoot/1/root), so an agent in a container with a cgroup namespace of
// its own still sees every container's cgroup. An id not known is looked
// for by walking the hierarchy again, at most once a second (walkEvery): a
// cgroup created since the last walk, whose process is gone within that
// second, is not found.
type IDs struct {
	root   string // the cgroup v2 mount, under procRoot/1/root
	prefix string // the mount's root in the hierarchy ("/" unless a namespace's)
	every  time.Duration

	mu     sync.Mutex
	byID   map[uint64]Container // every cgroup of the last walk; Container{} outside containers
	walked time.Time            // zero: never
	walks  uint64
}

// walkEvery bounds the hierarchy's walks when unknown ids arrive.
const walkEvery = time.Second

// NewIDs finds the cgroup v2 hierarchy in the mounts of procRoot's PID 1
// ("/proc" in production), else, where PID 1's root cannot be entered (a
// sandbox whose init is out of reach), in the agent's own. A host with
// cgroup v1 alone has none: an error.
func NewIDs(procRoot string) (*IDs, error) {
	var errs []error
	for _, pid := range []string{"1", "self"} {
		ids, err := cgroupV2Mount(procRoot, pid)
		if err == nil {
			return ids, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// cgroupV2Mount finds the cgroup v2 hierarchy in pid's mounts, under its
// root directory.
func cgroupV2Mount(procRoot, pid string) (*IDs, error) {
	mountinfo := filepath.Join(procRoot, pid, "mountinfo")
	b, err := procfile.ReadFile(mountinfo)
	if err != nil {
		return nil, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER"
		head, tail, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(tail, "cgroup2 ") {
			continue
		}
		f := strings.Fields(head)
		if len(f) < 5 {
			continue
		}
		root := filepath.Join(procRoot, pid, "root", unescapeMountinfo(f[4]))
		if _, err := os.Stat(root); err != nil {
			return nil, fmt.Errorf("cgroupattr: the cgroup v2 hierarchy in %s: %w", mountinfo, err)
		}
		return &IDs{root: root, prefix: unescapeMountinfo(f[3]), every: walkEvery, byID: map[uint64]Container{}}, nil
	}
	return nil, fmt.Errorf("cgroupattr: no cgroup v2 hierarchy in %s (a host with cgroup v1 alone)", mountinfo)
}

// unescapeMountinfo undoes mountinfo's octal escapes of a space, tab,
// newline and backslash (\040, \011, \012, \134).
func unescapeMountinfo(s string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// Root is the directory the hierarchy is read from.
func (r *IDs) Root() string { return r.root }

// Walks is how many times the hierarchy was read.
func (r *IDs) Walks() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.walks
}

// Container returns the container of the cgroup with id (Container{} for a
// cgroup outside containers), and false when no cgroup has it: removed, or
// created after the last walk, which was less than a second ago. A nil
// IDs knows none.
func (r *IDs) Container(id uint64) (Container, bool) {
	if r == nil || id == 0 {
		return Container{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.byID[id]; ok || time.Since(r.walked) < r.every {
		return c, ok
	}
	r.walk()
	c, ok := r.byID[id]
	return c, ok
}

// walk reads every cgroup's directory and its inode number. Cgroups come
// and go while it runs: one that cannot be read is left out.
func (r *IDs) walk() {
	byID := make(map[uint64]Container, len(r.byID))
	_ = filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // gone, or a cgroup's interface file
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fs.SkipDir
			}
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		rel, err := filepath.Rel(r.root, p)
		if err != nil {
			return nil
		}
		byID[st.Ino] = parsePath(path.Join(r.prefix, filepath.ToSlash(rel)))
		return nil
	})
	r.byID, r.walked = byID, time.Now()
	r.walks++
}
