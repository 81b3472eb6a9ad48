package buildid

import (
	"container/list"
	"fmt"
	"os"
	"sync"

	"github.com/hotpath-dev/hotpath/internal/fileid"
)

// Cache remembers Info per file identity: an unchanged binary is read once,
// and a replaced one (new inode, size or mtime) is read again at once. It
// holds at most its size of entries, evicting the least recently used.
// Safe for concurrent use.
type Cache struct {
	mu      sync.Mutex
	max     int
	entries map[fileid.ID]*list.Element
	lru     *list.List // front: most recently used; values are *cacheEntry
}

type cacheEntry struct {
	id   fileid.ID
	info Info
}

// NewCache returns a cache holding at most size binaries (at least 1).
func NewCache(size int) *Cache {
	return &Cache{max: max(size, 1), entries: map[fileid.ID]*list.Element{}, lru: list.New()}
}

// Lookup identifies the binary at path. hit reports whether it came from the
// cache; id is the file identity the result belongs to.
func (c *Cache) Lookup(path string) (info Info, id fileid.ID, hit bool, err error) {
	id, err = Identity(path)
	if err != nil {
		return Info{}, fileid.ID{}, false, fmt.Errorf("stat binary: %w", err)
	}
	if info, ok := c.get(id); ok {
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
	if info, ok := c.get(id); ok {
		return info, id, true, nil
	}
	if info, err = ReadFile(f); err != nil {
		return Info{}, fileid.ID{}, false, err
	}
	c.put(id, info)
	return info, id, false, nil
}

func (c *Cache) get(id fileid.ID) (Info, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[id]
	if !ok {
		return Info{}, false
	}
	c.lru.MoveToFront(el)
	return el.Value.(*cacheEntry).info, true
}

func (c *Cache) put(id fileid.ID, info Info) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[id]; ok {
		el.Value.(*cacheEntry).info = info
		c.lru.MoveToFront(el)
		return
	}
	c.entries[id] = c.lru.PushFront(&cacheEntry{id: id, info: info})
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).id)
	}
}

// Len is the number of binaries cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
