package binarycache

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
)

// glibc's rows, compiled from its .eh_frame as the agent does.
func glibcRows(t testing.TB) (fileid.ID, unwindtable.Table) {
	t.Helper()
	const libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
	f, err := elf.Open(libc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".eh_frame")
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := unwindtable.Build(data, sec.Addr)
	if err != nil {
		t.Fatal(err)
	}
	id, err := fileid.Of(libc)
	if err != nil {
		t.Fatal(err)
	}
	return id, *tab
}

func open(t testing.TB, dir string, max int64) *Cache {
	t.Helper()
	c, err := Open(dir, max, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// What is read back after a restart equals what was compiled.
func TestUnwindRoundTripAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	id, tab := glibcRows(t)
	c := open(t, dir, 64<<20)
	if _, ok := c.GetUnwind(id); ok {
		t.Fatal("hit in an empty cache")
	}
	c.PutUnwind(id, Unwind{HasFramePointers: tab.HasFramePointers(), Rows: tab.Rows})
	fpID := id
	fpID.Inode++
	c.PutUnwind(fpID, Unwind{HasFramePointers: true})

	again := open(t, dir, 64<<20) // a restarted agent
	got, ok := again.GetUnwind(id)
	if !ok || got.HasFramePointers != tab.HasFramePointers() || !slices.Equal(got.Rows, tab.Rows) {
		t.Fatalf("after restart: ok %v, %d rows (fp %v), want %d rows (fp %v)", ok, len(got.Rows), got.HasFramePointers, len(tab.Rows), tab.HasFramePointers())
	}
	if got, ok := again.GetUnwind(fpID); !ok || !got.HasFramePointers || got.Rows != nil {
		t.Errorf("frame-pointer verdict: %+v, %v", got, ok)
	}
	// Another identity of the same path (rebuilt binary) misses.
	other := id
	other.Mtime++
	if _, ok := again.GetUnwind(other); ok {
		t.Error("a changed modification time hit the old entry")
	}
	if st := again.Stats(); st.Hits != 2 || st.Entries != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Damaged or outdated entries are deleted, counted and recomputed, never
// returned; a damaged one is a warning, an outdated one (an upgrade) not.
func TestDamagedEntriesAreNotTrusted(t *testing.T) {
	id, tab := glibcRows(t)
	for name, damage := range map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-100] },
		"empty":        func([]byte) []byte { return nil },
		// What a power loss can leave of an entry written without fsync:
		// its size allocated, its data never written.
		"zeroed":         func(b []byte) []byte { return make([]byte, len(b)) },
		"other version":  func(b []byte) []byte { binary.LittleEndian.PutUint16(b[4:], FormatVersion+1); return b },
		"foreign header": func(b []byte) []byte { copy(b, "ELF!"); return b },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			c := open(t, dir, 64<<20)
			c.PutUnwind(id, Unwind{Rows: tab.Rows})
			path := filepath.Join(dir, entryName(id, KindUnwind))
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, damage(raw), 0o600); err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.InfoLevel)
			c, err = Open(dir, 64<<20, zap.New(core))
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := c.GetUnwind(id); ok {
				t.Fatalf("damaged entry returned (%d rows)", len(got.Rows))
			}
			// An upgrade's entries are no damage: one line at info, not a
			// warning.
			want := zap.WarnLevel
			if name == "other version" {
				want = zap.InfoLevel
			}
			if all := logs.All(); len(all) != 1 || all[0].Level != want {
				t.Errorf("logged %+v, want one line at %s", all, want)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("damaged entry still on disk: %v", err)
			}
			if st := c.Stats(); st.Corrupt != 1 {
				t.Errorf("corrupt count %d, want 1", st.Corrupt)
			}
			c.PutUnwind(id, Unwind{Rows: tab.Rows}) // recomputed
			if got, ok := c.GetUnwind(id); !ok || !slices.Equal(got.Rows, tab.Rows) {
				t.Error("recomputed entry not readable")
			}
		})
	}
}

// A crash mid-write leaves a temporary file, never a half entry: Open
// removes it. A file that is not ours is left alone.
func TestCrashLeftoversAndForeignFiles(t *testing.T) {
	dir := t.TempDir()
	id, tab := glibcRows(t)
	name := entryName(id, KindUnwind)
	tmp := filepath.Join(dir, name+tmpMarker+"123456")
	if err := os.WriteFile(tmp, []byte("HPBC half an entry"), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(foreign, []byte("someone else's"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := open(t, dir, 64<<20)
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file kept: %v", err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("foreign file removed: %v", err)
	}
	if _, ok := c.GetUnwind(id); ok {
		t.Error("hit from a temporary file")
	}
	c.PutUnwind(id, Unwind{Rows: tab.Rows})
	if got, ok := open(t, dir, 64<<20).GetUnwind(id); !ok || len(got.Rows) != len(tab.Rows) {
		t.Error("entry written after the crash not readable")
	}
}

// The budget holds; least recently used entries go first; an entry over a
// quarter of the budget is not stored.
func TestBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	dir := t.TempDir()
	rows := make([]unwindtable.Row, 1000) // ~8 KB an entry
	c := open(t, dir, 40<<10)
	ids := make([]fileid.ID, 6)
	for i := range ids {
		ids[i] = fileid.ID{Dev: 1, Inode: uint64(i + 1), Size: 1, Mtime: 1}
	}
	for i := range 4 {
		c.PutUnwind(ids[i], Unwind{Rows: rows})
	}
	if _, ok := c.GetUnwind(ids[0]); !ok { // used: now the most recent
		t.Fatal("entry 0 missing")
	}
	c.PutUnwind(ids[4], Unwind{Rows: rows})
	c.PutUnwind(ids[5], Unwind{Rows: rows})
	st := c.Stats()
	if st.Bytes > 40<<10 || st.Evicted == 0 {
		t.Fatalf("stats %+v: over budget or nothing evicted", st)
	}
	if _, ok := c.GetUnwind(ids[0]); !ok {
		t.Error("the recently used entry was evicted")
	}
	if _, ok := c.GetUnwind(ids[1]); ok {
		t.Error("the least recently used entry survived")
	}
	c.PutUnwind(fileid.ID{Inode: 99}, Unwind{Rows: make([]unwindtable.Row, 2000)})
	if _, ok := c.GetUnwind(fileid.ID{Inode: 99}); ok {
		t.Error("an entry over a quarter of the budget was stored")
	}
	// Files on disk agree with the accounting.
	var onDisk int64
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		fi, _ := de.Info()
		onDisk += fi.Size()
	}
	if onDisk != c.Stats().Bytes {
		t.Errorf("%d bytes on disk, %d accounted", onDisk, c.Stats().Bytes)
	}
}

// A directory that cannot be created is an error at Open, with the path.
func TestOpenUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(filepath.Join(file, "cache"), 1<<20, nil); err == nil {
		t.Fatal("a directory below a regular file was accepted")
	}
}

func TestConcurrentUse(t *testing.T) {
	c := open(t, t.TempDir(), 1<<20)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				id := fileid.ID{Inode: uint64(i % 10), Mtime: int64(g % 2)}
				if u, ok := c.GetUnwind(id); ok && len(u.Rows) != int(id.Inode) {
					t.Errorf("entry %v has %d rows", id, len(u.Rows))
				}
				c.PutUnwind(id, Unwind{Rows: make([]unwindtable.Row, id.Inode)})
			}
		}()
	}
	wg.Wait()
}

// BenchmarkGlibc compares reading glibc's rows back with compiling them.
func BenchmarkGlibc(b *testing.B) {
	id, tab := glibcRows(b)
	c := open(b, b.TempDir(), 64<<20)
	c.PutUnwind(id, Unwind{Rows: tab.Rows})
	f, err := elf.Open("/usr/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	data, _ := f.Section(".eh_frame").Data()
	addr := f.Section(".eh_frame").Addr
	b.Run("cache", func(b *testing.B) {
		for range b.N {
			if _, ok := c.GetUnwind(id); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("compile", func(b *testing.B) {
		for range b.N {
			if _, err := unwindtable.Build(data, addr); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Concurrent Puts of the same key count its bytes once: the accounting
// matches the files on disk.
func TestConcurrentPutsOfOneKeyCountOnce(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 64<<20)
	id := fileid.ID{Inode: 7}
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.PutUnwind(id, Unwind{Rows: make([]unwindtable.Row, 500)})
		}()
	}
	wg.Wait()
	var onDisk int64
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		fi, _ := de.Info()
		onDisk += fi.Size()
	}
	if st := c.Stats(); st.Bytes != onDisk || st.Entries != 1 {
		t.Errorf("accounted %d bytes in %d entries, %d bytes on disk in %d files", st.Bytes, st.Entries, onDisk, len(des))
	}
}
