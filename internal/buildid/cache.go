package buildid

import (
	"fmt"
	"os"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/hotpath-dev/hotpath/internal/fileid"
)

// Cache remembers Info per file identity: an unchanged binary is read once,
// and a replaced one (new inode, size or mtime) is read again at once. It
// holds at most its size of entries, evicting the least recently used.
// Safe for concurrent use.
type Cache struct {
	entries *lru.Cache[fileid.ID, Info]
}

// NewCache returns a cache holding at most size binaries (at least 1).
func NewCache(size int) *Cache {
	entries, err := lru.New[fileid.ID, Info](max(size, 1))
	if err != nil {
		panic(err) // only for a size below 1, excluded above
	}
	return &Cache{entries: entries}
}

// LookupID is Lookup for a binary whose identity the caller already has
// from a stat of its own (the agent's read of a process stats every mapped
// file): a cached binary costs no system call. Otherwise, or with a zero id
// (the caller has none), it is Lookup(path), and the result belongs to the
// identity Lookup returns.
func (c *Cache) LookupID(id fileid.ID, path string) (info Info, _ fileid.ID, hit bool, err error) {
	if id == (fileid.ID{}) {
		return c.Lookup(path)
	}
	if info, ok := c.entries.Get(id); ok {
		return info, id, true, nil
	}
	return c.Lookup(path)
}

// Lookup identifies the binary at path. hit reports whether it came from the
// cache; id is the file identity the result belongs to.
func (c *Cache) Lookup(path string) (info Info, id fileid.ID, hit bool, err error) {
	id, err = Identity(path)
	if err != nil {
		return Info{}, fileid.ID{}, false, fmt.Errorf("stat binary: %w", err)
	}
	if info, ok := c.entries.Get(id); ok {
		return info, id, true, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fileid.ID{}, false, fmt.Errorf("open binary: %w", err)
	}
	defer f.Close()
	// Key by the file actually opened: path may have been replaced since
	// the stat above.
	if id, err = fileid.OfFile(f); err != nil {
		return Info{}, fileid.ID{}, false, fmt.Errorf("stat binary: %w", err)
	}
	if info, ok := c.entries.Get(id); ok {
		return info, id, true, nil
	}
	if info, err = ReadFile(f); err != nil {
		return Info{}, fileid.ID{}, false, err
	}
	c.entries.Add(id, info)
	return info, id, false, nil
}

// Len is the number of binaries cached.
func (c *Cache) Len() int { return c.entries.Len() }
