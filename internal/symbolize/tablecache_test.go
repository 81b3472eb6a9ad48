package symbolize

import (
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

	rp1 := start(t, bin)
	p1 := snapshot(t, s, rp1.pid())
	leaf1 := rp1.addr(t, "hot_leaf")
	if f := s.User(p1, []uint64{leaf1}, nil)[0]; f.Function != "hot_leaf" {
		t.Fatalf("first process: %+v", f)
	}
	exe1 := s.MappingTable(p1, p1.find(leaf1))
	loaded := s.Stats()

	clock.Advance(2 * time.Minute)
	s.Expire()
	runtime.GC()
	if st := s.Stats(); st.Tables != 0 || st.Held == 0 || st.HeldBytes < exe1.Size() {
		t.Fatalf("after expiry with the first process alive: %d cached, %d held (%d bytes); want 0 cached and its tables held", st.Tables, st.Held, st.HeldBytes)
	}

	rp2 := start(t, bin)
	p2 := snapshot(t, s, rp2.pid())
	leaf2 := rp2.addr(t, "hot_leaf")
	if f := s.User(p2, []uint64{leaf2}, nil)[0]; f.Function != "hot_leaf" {
		t.Fatalf("second process: %+v", f)
	}
	if exe2 := s.MappingTable(p2, p2.find(leaf2)); exe2 != exe1 {
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
