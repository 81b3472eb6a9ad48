package symbolize

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// fakeClock is a Symbolizer's clock that moves only when told.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// A table no process asks for leaves the cache after KeepUnused, and its
// heap is freed once no process holds it: the tables of a burst of
// short-lived binaries do not stay in the agent's memory up to the bound.
func TestExpireFreesTablesOfExitedProcesses(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s := New(Options{KeepUnused: time.Minute, Now: clock.Now})
	// A process asks for its tables, exits, and its snapshot is dropped,
	// as the receiver does once the interval it exited in is drained.
	func() {
		rp := start(t, bin)
		p, err := s.Snapshot(rp.pid())
		if err != nil {
			t.Fatal(err)
		}
		if f := s.User(p, []uint64{rp.addr(t, "hot_leaf")}, nil)[0]; f.Function != "hot_leaf" {
			t.Fatalf("leaf: %+v", f)
		}
		p.Close()
		rp.stop()
	}()
	loaded := s.Stats()
	if loaded.Tables == 0 || loaded.HeapBytes == 0 {
		t.Fatalf("no table cached after a lookup: %+v", loaded)
	}

	clock.Advance(59 * time.Second)
	s.Expire()
	if st := s.Stats(); st.Tables != loaded.Tables {
		t.Errorf("59 s after the last use: %d tables cached, want %d (KeepUnused is a minute)", st.Tables, loaded.Tables)
	}
	clock.Advance(2 * time.Second)
	s.Expire()
	if st := s.Stats(); st.Tables != 0 || st.HeapBytes != 0 {
		t.Errorf("61 s after the last use: %d tables (%d bytes) cached, want none", st.Tables, st.HeapBytes)
	}
	// Nothing else holds them: a collection frees them, and the cache
	// forgets them.
	var st Stats
	for range 10 {
		runtime.GC()
		s.Expire()
		if st = s.Stats(); st.Held == 0 && len(s.cache.held) == 0 {
			break
		}
	}
	if st.Held != 0 || st.HeldBytes != 0 {
		t.Errorf("%d tables (%d bytes) still in memory after their process and the cache let go", st.Held, st.HeldBytes)
	}
	if n := len(s.cache.held); n != 0 {
		t.Errorf("the cache still remembers %d freed tables", n)
	}
}

// A table that left the cache while a live process holds it (a
// long-running service asks for its tables once) is found again by the
// next process of the same file: one table in memory, not a second load.
func TestExpiredTableOfLiveProcessIsShared(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s := New(Options{KeepUnused: time.Minute, Now: clock.Now})

	p1, exe1 := startHot(t, s, bin, "first process")
	loaded := s.Stats()

	clock.Advance(2 * time.Minute)
	s.Expire()
	runtime.GC()
	if st := s.Stats(); st.Tables != 0 || st.Held == 0 || st.HeldBytes < exe1.Size() {
		t.Fatalf("after expiry with the first process alive: %d cached, %d held (%d bytes); want 0 cached and its tables held", st.Tables, st.Held, st.HeldBytes)
	}

	if _, exe2 := startHot(t, s, bin, "second process"); exe2 != exe1 {
		t.Error("the second process of the file got a second copy of its table")
	}
	st := s.Stats()
	if st.Loads != loaded.Loads {
		t.Errorf("%d tables loaded again for the second process", st.Loads-loaded.Loads)
	}
	if st.Revived == 0 || st.Tables == 0 {
		t.Errorf("tables found again: %d, cached: %d; want the first process's back in the cache", st.Revived, st.Tables)
	}
	runtime.KeepAlive(p1)
}

// Files of one build under different identities (the same image layer under
// each container's overlay mount, which gives each its own device number;
// here a copy) share one table: one load, its bytes counted once, and
// counted once among the tables live processes hold after it expires. A
// file of the same build ID but another size (the stripped file of that
// build) does not: it has other symbols.
func TestFilesOfOneBuildShareATable(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	dir := t.TempDir()
	cp := filepath.Join(dir, "hot-copy")
	stripped := filepath.Join(dir, "hot-stripped")
	copyFile(t, bin, cp)
	copyFile(t, bin, stripped)
	if err := run(".", "strip", "-s", stripped); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	s := New(Options{KeepUnused: time.Minute, Now: clock.Now})

	p1, exe1 := startHot(t, s, bin, "first file")
	if exe1.ContentKey() == "" {
		t.Fatal("a gcc-built binary has no content key (no GNU build ID note?)")
	}
	before := s.Stats()

	p2, exe2 := startHot(t, s, cp, "copy")
	if p2.files[0].id == p1.files[0].id {
		t.Fatal("the copy has the original's file identity")
	}
	if exe2 != exe1 {
		t.Error("the copy got a table of its own")
	}
	st := s.Stats()
	if st.Loads != before.Loads || st.Shared != before.Shared+1 {
		t.Errorf("copy: %d loads and %d shared, want %d and %d", st.Loads, st.Shared, before.Loads, before.Shared+1)
	}
	if st.Tables != before.Tables || st.HeapBytes != before.HeapBytes {
		t.Errorf("copy: %d tables of %d bytes, want %d of %d: a shared table counts once", st.Tables, st.HeapBytes, before.Tables, before.HeapBytes)
	}

	rp3 := start(t, stripped)
	p3 := snapshot(t, s, rp3.pid())
	exe3 := s.MappingTable(p3, p3.find(rp3.addr(t, "hot_leaf")))
	if exe3 == nil || exe3 == exe1 || exe3.ContentKey() == exe1.ContentKey() {
		t.Fatalf("the stripped file shares the unstripped file's table (keys %q, %q)", exe3.ContentKey(), exe1.ContentKey())
	}
	if st := s.Stats(); st.Loads != before.Loads+1 || st.Tables != before.Tables+1 {
		t.Errorf("stripped file: %d loads, %d tables; want %d, %d", st.Loads, st.Tables, before.Loads+1, before.Tables+1)
	}
	all := s.Stats()

	// All three expire while their processes live: the shared table is
	// held under two identities and counted once.
	clock.Advance(2 * time.Minute)
	s.Expire()
	if st := s.Stats(); st.Tables != 0 || st.HeapBytes != 0 || st.Held != all.Tables || st.HeldBytes != all.HeapBytes {
		t.Errorf("expired with the processes alive: %d cached (%d bytes), %d held (%d bytes); want 0, 0, %d, %d",
			st.Tables, st.HeapBytes, st.Held, st.HeldBytes, all.Tables, all.HeapBytes)
	}
	runtime.KeepAlive(p1)
	runtime.KeepAlive(p2)
	runtime.KeepAlive(p3)
}

// startHot runs the hot program bin, checks that s names its hot_leaf, and
// returns its snapshot and the table of its executable.
func startHot(t *testing.T, s *Symbolizer, bin, what string) (*Process, *SymbolTable) {
	t.Helper()
	rp := start(t, bin)
	p := snapshot(t, s, rp.pid())
	leaf := rp.addr(t, "hot_leaf")
	if f := s.User(p, []uint64{leaf}, nil)[0]; f.Function != "hot_leaf" {
		t.Fatalf("%s: %+v", what, f)
	}
	return p, s.MappingTable(p, p.find(leaf))
}
