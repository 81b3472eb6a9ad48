//go:build privileged

// Tests that need root: /proc/PID/map_files of a deleted or replaced binary,
// kernel addresses in /proc/kallsyms (zero for other users), and a process
// in a mount namespace of its own.

package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/overlaytest"
)

func TestDeletedBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "hot")
	copyFile(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"), bin)
	rp := start(t, bin)
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	frames := s.User(p, []uint64{rp.addr(t, "hot_leaf")}, nil)
	wantFrame(t, p, frames[0], "hot_leaf", bin)
	if m := p.Mappings[frames[0].Mapping]; !m.Deleted {
		t.Errorf("mapping %+v not marked Deleted", m)
	}
}

func TestReplacedBinaryGetsNewCacheEntry(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "hot")
	copyFile(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"), bin)
	old := start(t, bin)
	s := New(Options{})
	pOld := snapshot(t, s, old.pid())
	if f := s.User(pOld, []uint64{old.addr(t, "hot_leaf")}, nil)[0]; f.Function != "hot_leaf" {
		t.Fatalf("before replacement: %+v", f)
	}
	before := s.Stats().Tables

	// Deploy a different build the usual way: write aside, rename over.
	tmp := filepath.Join(dir, "hot.new")
	copyFile(t, cProg(t, "hot-v2", "-fPIE", "-pie", "-ldl", "-DHOT_V2"), tmp)
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	cur := start(t, bin)
	pNew := snapshot(t, s, cur.pid())
	newFrames := s.User(pNew, []uint64{cur.addr(t, "hot_leaf"), cur.addr(t, "hot_mid") + 1}, nil)
	wantFrame(t, pNew, newFrames[0], "hot_leaf", bin)
	wantFrame(t, pNew, newFrames[1], "hot_mid", bin)
	// The new build moved hot_leaf within the file, so reusing the old
	// table would have named the wrong function.
	if fileOff(pOld, old.addr(t, "hot_leaf")) == fileOff(pNew, cur.addr(t, "hot_leaf")) {
		t.Fatal("test builds put hot_leaf at the same file offset; the test cannot tell tables apart")
	}

	idOld, idNew := pOld.Mappings[pOld.find(old.addr(t, "hot_leaf"))].ID, pNew.Mappings[pNew.find(cur.addr(t, "hot_leaf"))].ID
	if idOld == idNew {
		t.Fatalf("replaced binary kept file ID %v", idOld)
	}
	if got := s.Stats().Tables; got != before+1 {
		t.Errorf("cache holds %d tables after the new build was symbolized, want %d", got, before+1)
	}
	// The old process still runs the old (now unlinked) file: a fresh
	// snapshot must find it through map_files, not the new file at the path.
	pOld2 := snapshot(t, s, old.pid())
	if f := s.User(pOld2, []uint64{old.addr(t, "hot_leaf")}, nil)[0]; f.Function != "hot_leaf" {
		t.Errorf("old process after replacement: %+v, want hot_leaf", f)
	}
	if id := pOld2.Mappings[pOld2.find(old.addr(t, "hot_leaf"))].ID; id != idOld {
		t.Errorf("old process re-snapshot got file ID %v, want the old %v", id, idOld)
	}
}

func TestKernel(t *testing.T) {
	addr := kallsymsAddr(t, "vfs_read")
	s := New(Options{})
	if err := s.RefreshKernel(); err != nil {
		t.Fatal(err)
	}
	frames := s.Kernel([]uint64{addr, addr + 1, addr}, nil)
	if f := frames[0]; f.Function != "vfs_read" || f.Module != "" || f.Mapping != -1 {
		t.Errorf("leaf at vfs_read: %+v", f)
	}
	if f := frames[1]; f.Function != "vfs_read" || f.Address != addr+1 {
		t.Errorf("return address vfs_read+1: %+v", f)
	}
	if f := frames[2]; f.Function == "vfs_read" || f.Function == "" {
		t.Errorf("return address at vfs_read's start resolved to %q, want the function before it", f.Function)
	}
	if st := s.Stats(); st.KernelBytes == 0 {
		t.Error("Stats.KernelBytes = 0 after loading kallsyms")
	}
}

// TestOtherMountNamespace runs the program from a tmpfs mounted only in its
// own mount namespace (as in a container): the path in its maps does not
// exist for the agent, only through /proc/PID/root.
func TestOtherMountNamespace(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	dir := filepath.Join(t.TempDir(), "ns")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "mount -t tmpfs tmpfs " + dir + " && cp " + bin + " " + dir + "/hot && exec " + dir + "/hot"
	rp := start(t, "unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	inNS := filepath.Join(dir, "hot")
	if _, err := os.Stat(inNS); err == nil {
		t.Fatalf("%s is visible outside the namespace; the test would prove nothing", inNS)
	}
	s := New(Options{})
	p := snapshot(t, s, rp.pid())
	if p.ExePath != inNS {
		t.Fatalf("ExePath = %q, want %q", p.ExePath, inNS)
	}
	f := s.User(p, []uint64{rp.addr(t, "hot_leaf")}, nil)[0]
	wantFrame(t, p, f, "hot_leaf", inNS)
}

// Two containers of one image: each runs the image's binary from an overlay
// mount of its own over the same lower layer, private to its mount
// namespace, so the two files have different device numbers. They share one
// table, read once.
func TestOverlayMountsShareATable(t *testing.T) {
	im := overlaytest.NewImage(t, cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl"), "hot")
	s := New(Options{})
	var procs []*Process
	var rps []*runningProg
	for i := range 2 {
		cmd := im.Command(t, i, "hot")
		rp := start(t, cmd.Path, cmd.Args[1:]...)
		rps = append(rps, rp)
		procs = append(procs, snapshot(t, s, rp.pid()))
	}
	var tables []*SymbolTable
	var ms []Mapping
	for i, p := range procs {
		f := s.User(p, []uint64{rps[i].addr(t, "hot_leaf")}, nil)[0]
		if f.Function != "hot_leaf" {
			t.Fatalf("container %d: %+v", i, f)
		}
		ms = append(ms, p.Mappings[f.Mapping])
		tables = append(tables, s.MappingTable(p, f.Mapping))
	}
	if ms[0].ID.Dev == ms[1].ID.Dev || ms[0].ID.Inode != ms[1].ID.Inode {
		t.Fatalf("the two overlay files: %v and %v; want one inode under two devices, as containers of one image see it", ms[0].ID, ms[1].ID)
	}
	if tables[0] != tables[1] {
		t.Error("each container's file got a table of its own")
	}
	if st := s.Stats(); st.Loads != 1 || st.Shared != 1 {
		t.Errorf("%d loads and %d shared, want 1 and 1", st.Loads, st.Shared)
	}
}

// TestConcurrentUse symbolizes from several goroutines at once (run with
// -race): first use loads tables, so loads and lookups overlap.
func TestConcurrentUse(t *testing.T) {
	cp := start(t, cProg(t, "hot-g", "-fPIE", "-pie", "-ldl", "-g"), libHot(t))
	gp := start(t, goBuild(t, "go"))
	s := New(Options{})
	pc, pg := snapshot(t, s, cp.pid()), snapshot(t, s, gp.pid())
	cStack := []uint64{cp.addr(t, "hot_leaf"), cp.addr(t, "hot_mid") + 1, cp.addr(t, "hot_lib_func") + 1, cp.addr(t, "getpid") + 1}
	goStack := []uint64{gp.addr(t, "main.hotLeaf"), gp.addr(t, "inlinepc")}
	kStack := []uint64{kallsymsAddr(t, "vfs_read")}
	errs := make(chan string, 8)
	done := make(chan struct{})
	for i := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 50 {
				var fs []Frame
				if i%2 == 0 {
					fs = s.User(pc, cStack, nil)
				} else {
					fs = s.User(pg, goStack, nil)
				}
				fs = s.Kernel(kStack, fs)
				for _, f := range fs {
					if f.Function == "" {
						errs <- fmt.Sprintf("unresolved frame %+v", f)
						return
					}
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// Each file's table was read once, however many goroutines asked for
	// it at the same time.
	if st := s.Stats(); st.Loads != uint64(st.Tables) {
		t.Errorf("%d tables read for %d files", st.Loads, st.Tables)
	}
}
