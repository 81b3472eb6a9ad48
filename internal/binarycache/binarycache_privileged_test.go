//go:build privileged

// Tests that need root: a full disk is a small tmpfs mounted for the test.

package binarycache

import (
	"os"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/smalldisk"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
)

// A full disk: the write fails cleanly (no entry, no temporary file), the
// cache goes read-only and says so, and what it had stays readable.
func TestFullDisk(t *testing.T) {
	dir := smalldisk.Mount(t, 64<<10)
	c := open(t, dir, 64<<20)
	small := fileid.ID{Inode: 1}
	c.PutUnwind(small, Unwind{Rows: make([]unwindtable.Row, 100)})
	big := fileid.ID{Inode: 2}
	c.PutUnwind(big, Unwind{Rows: make([]unwindtable.Row, 20000)}) // 160 KB: does not fit
	st := c.Stats()
	if st.WriteErrors != 1 || st.Entries != 1 {
		t.Fatalf("stats %+v: want one write error and the first entry kept", st)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 1 {
		t.Errorf("files after the failed write: %v, want only the first entry", des)
	}
	if _, ok := c.GetUnwind(small); !ok {
		t.Error("the entry written before the disk filled is gone")
	}
	c.PutUnwind(fileid.ID{Inode: 3}, Unwind{Rows: make([]unwindtable.Row, 10)})
	if st := c.Stats(); st.Writes != 1 {
		t.Errorf("writes after the cache went read-only: %+v", st)
	}
}
