package symbolize

import (
	"testing"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// A process gone before it could be read is named from the mappings the
// kernel saw it make, by their files' identities: a file an earlier
// snapshot saw, whose table is in memory, names the frames in it at the
// process's own addresses; a file no snapshot saw names nothing.
func TestSnapshotKnownNamesFromTablesInMemory(t *testing.T) {
	bin := cProg(t, "hot-pie", "-fPIE", "-pie", "-ldl")
	s := New(Options{})
	first := start(t, bin)
	p := snapshot(t, s, first.pid())
	wantFrame(t, p, s.User(p, []uint64{first.addr(t, "hot_leaf")}, nil)[0], "hot_leaf", bin)

	// A second process of the binary, loaded elsewhere (PIE), known only
	// as the kernel records its mappings: by identity, without paths.
	second := start(t, bin)
	raw, err := procmaps.Read("/proc", second.pid())
	if err != nil {
		t.Fatal(err)
	}
	maps, err := procmaps.ParseExecutable(raw)
	if err != nil {
		t.Fatal(err)
	}
	var known []KnownMapping
	for _, m := range maps {
		id, err := fileid.Of(m.Path)
		if err != nil {
			continue // [vdso], anonymous memory: not in the kernel's list
		}
		id.Size = 0 // the kernel's record has none
		known = append(known, KnownMapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: id})
	}
	leaf := second.addr(t, "hot_leaf")
	if leaf == first.addr(t, "hot_leaf") {
		t.Fatal("both processes have hot_leaf at one address: the test cannot tell their layouts apart")
	}
	second.stop()
	gone := s.SnapshotKnown(second.pid(), known)
	if gone == nil {
		t.Fatalf("no snapshot from %d known mappings %+v", len(known), known)
	}
	wantFrame(t, gone, s.User(gone, []uint64{leaf}, nil)[0], "hot_leaf", bin)

	other := known[0]
	other.File.Inode++ // a file no snapshot saw
	if got := s.SnapshotKnown(second.pid(), []KnownMapping{other}); got != nil {
		t.Errorf("a file no snapshot saw gave a snapshot: %+v", got.Mappings)
	}
}
