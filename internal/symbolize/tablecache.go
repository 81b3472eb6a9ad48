package symbolize

import (
	"container/list"
	"time"
	"weak"

	"github.com/hotpath-dev/hotpath/internal/fileid"
)

// tableCache is an LRU of SymbolTables keyed by file identity, bounded by
// count and heap bytes. Failed loads are cached too, so a file that is not
// ELF is not re-read every interval.
//
// A table leaves the LRU when the bounds need room or when no process has
// asked for it for a while (expire). A live Process may still hold it (a
// long-running service asks for its tables once, at its snapshot): held
// keeps a weak pointer to each table that left, so a new process of the
// same file gets that table back instead of loading a second copy, and a
// table nothing holds any more is garbage. Without expiry, the tables of a
// burst of short-lived binaries (a CI job's compilers and test programs)
// stayed in the heap up to the bound long after their processes were gone.
type tableCache struct {
	maxEntries, maxBytes int
	bytes                int
	ll                   *list.List // front = most recent; values *cacheEntry
	byID                 map[fileid.ID]*list.Element
	held                 map[fileid.ID]weak.Pointer[SymbolTable]
	hits, misses         uint64
	revived              uint64
	// heldTables and heldBytes are the tables of held still alive, counted
	// by expire: Stats, asked several times an interval, does not take each
	// table's size again.
	heldTables, heldBytes int
}

type cacheEntry struct {
	id    fileid.ID
	table *SymbolTable
	err   error
	bytes int
	used  time.Time // last asked for
}

func newTableCache(maxEntries, maxBytes int) *tableCache {
	return &tableCache{maxEntries: maxEntries, maxBytes: maxBytes, ll: list.New(),
		byID: map[fileid.ID]*list.Element{}, held: map[fileid.ID]weak.Pointer[SymbolTable]{}}
}

// get returns the entry of id, counted as a hit or a miss.
func (c *tableCache) get(id fileid.ID, now time.Time) (*cacheEntry, bool) {
	e, ok := c.peek(id, now)
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return e, ok
}

// peek returns the entry of id, marked used at now: from the LRU, or a
// table that left it and is still alive, which goes back in.
func (c *tableCache) peek(id fileid.ID, now time.Time) (*cacheEntry, bool) {
	if el, ok := c.byID[id]; ok {
		c.ll.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		e.used = now
		return e, true
	}
	wp, ok := c.held[id]
	if !ok {
		return nil, false
	}
	delete(c.held, id)
	t := wp.Value()
	if t == nil {
		return nil, false
	}
	c.revived++
	return c.add(id, t, nil, now), true
}

func (c *tableCache) add(id fileid.ID, t *SymbolTable, err error, now time.Time) *cacheEntry {
	e := &cacheEntry{id: id, table: t, err: err, bytes: 64, used: now}
	if t != nil {
		e.bytes = t.Size()
	}
	delete(c.held, id)
	c.byID[id] = c.ll.PushFront(e)
	c.bytes += e.bytes
	c.evict()
	return e
}

// resized accounts for a cached table that grew after it was added (its
// unwind index is built on first use).
func (c *tableCache) resized(id fileid.ID, t *SymbolTable) {
	el, ok := c.byID[id]
	if !ok || el.Value.(*cacheEntry).table != t {
		return
	}
	e := el.Value.(*cacheEntry)
	n := t.Size()
	c.bytes += n - e.bytes
	e.bytes = n
	c.evict()
}

func (c *tableCache) evict() {
	for c.ll.Len() > 1 && (c.ll.Len() > c.maxEntries || c.bytes > c.maxBytes) {
		c.remove(c.ll.Back())
	}
}

// expire removes the entries last asked for before cutoff, forgets the
// tables that left the LRU and are gone, and counts those still alive.
func (c *tableCache) expire(cutoff time.Time) {
	for el := c.ll.Back(); el != nil && el.Value.(*cacheEntry).used.Before(cutoff); el = c.ll.Back() {
		c.remove(el)
	}
	c.heldTables, c.heldBytes = 0, 0
	for id, wp := range c.held {
		if t := wp.Value(); t == nil {
			delete(c.held, id)
		} else {
			c.heldTables++
			c.heldBytes += t.Size()
		}
	}
}

func (c *tableCache) remove(el *list.Element) {
	e := c.ll.Remove(el).(*cacheEntry)
	delete(c.byID, e.id)
	c.bytes -= e.bytes
	if e.table != nil {
		c.held[e.id] = weak.Make(e.table)
	}
}

// each calls f with every table in memory that the cache knows: in the
// LRU, or held only by live processes.
func (c *tableCache) each(f func(*SymbolTable)) {
	for el := c.ll.Front(); el != nil; el = el.Next() {
		if t := el.Value.(*cacheEntry).table; t != nil {
			f(t)
		}
	}
	for _, wp := range c.held {
		if t := wp.Value(); t != nil {
			f(t)
		}
	}
}
