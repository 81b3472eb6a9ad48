// Package fileid identifies a file's contents cheaply by its metadata, so that
// caches of expensive per-binary work (symbol tables, build IDs, hashes) read
// an unchanged binary once and notice a redeployed one at once.
package fileid

import (
	"fmt"
	"os"
	"syscall"
)

// ID is a file's identity: a replaced binary (new inode, or same inode
// rewritten with a new size or mtime) gets a new ID.
type ID struct {
	Dev   uint64
	Inode uint64
	Size  int64
	Mtime int64 // nanoseconds
}

// Of stats path (following symlinks).
func Of(path string) (ID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return ID{}, err
	}
	return FromInfo(fi)
}

// OfFile stats an open file.
func OfFile(f *os.File) (ID, error) {
	fi, err := f.Stat()
	if err != nil {
		return ID{}, err
	}
	return FromInfo(fi)
}

// FromInfo builds an ID from a stat result.
func FromInfo(fi os.FileInfo) (ID, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ID{}, fmt.Errorf("fileid: no stat data for %s", fi.Name())
	}
	return ID{Dev: st.Dev, Inode: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano()}, nil
}

func (id ID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", id.Dev, id.Inode, id.Size, id.Mtime)
}
