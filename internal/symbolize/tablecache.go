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
// Files of different identities may share one table: those of one build
// (SymbolTable.contentKey), such as one image layer's binaries seen through
// each container's overlay mount, which gives every container its own
// device number. A shared table is counted once in the bytes.
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
	// byContent finds a table in memory by its build (contentKey), for a
	// file of a new identity.
	byContent map[string]weak.Pointer[SymbolTable]
	// charged is what each table the LRU holds counts in bytes, and in how
	// many entries it is; failed counts the entries of failed loads.
	charged      map[*SymbolTable]charge
	failed       int
	hits, misses uint64
	revived      uint64
	// shared counts files of a new identity given a table already in
	// memory for their build, instead of a load.
	shared uint64
	// heldTables and heldBytes are the tables of held still alive, counted
	// by expire: Stats, asked several times an interval, does not take each
	// table's size again.
	heldTables, heldBytes int
}

type cacheEntry struct {
	id    fileid.ID
	table *SymbolTable
	err   error
	used  time.Time // last asked for
}

type charge struct{ entries, bytes int }

// failedEntryBytes is what an entry without a table counts in the bytes.
const failedEntryBytes = 64

func newTableCache(maxEntries, maxBytes int) *tableCache {
	return &tableCache{maxEntries: maxEntries, maxBytes: maxBytes, ll: list.New(),
		byID: map[fileid.ID]*list.Element{}, held: map[fileid.ID]weak.Pointer[SymbolTable]{},
		byContent: map[string]weak.Pointer[SymbolTable]{}, charged: map[*SymbolTable]charge{}}
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
	e := &cacheEntry{id: id, table: t, err: err, used: now}
	delete(c.held, id)
	c.byID[id] = c.ll.PushFront(e)
	if t == nil {
		c.failed++
		c.bytes += failedEntryBytes
	} else {
		ch := c.charged[t]
		if ch.entries == 0 {
			ch.bytes = t.Size()
			c.bytes += ch.bytes
			c.remember(t)
		}
		ch.entries++
		c.charged[t] = ch
	}
	c.evict()
	return e
}

// remember makes t findable by its build.
func (c *tableCache) remember(t *SymbolTable) {
	if t.contentKey != "" {
		c.byContent[t.contentKey] = weak.Make(t)
	}
}

// ofContent returns the table in memory of the build key, or nil.
func (c *tableCache) ofContent(key string) *SymbolTable {
	wp, ok := c.byContent[key]
	if !ok {
		return nil
	}
	t := wp.Value()
	if t == nil {
		delete(c.byContent, key)
	}
	return t
}

// resized accounts for a cached table that grew after it was added (its
// unwind index is built on first use).
func (c *tableCache) resized(t *SymbolTable) {
	ch, ok := c.charged[t]
	if !ok {
		return
	}
	n := t.Size()
	c.bytes += n - ch.bytes
	ch.bytes = n
	c.charged[t] = ch
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
	for id, wp := range c.held {
		if wp.Value() == nil {
			delete(c.held, id)
		}
	}
	for key, wp := range c.byContent {
		if wp.Value() == nil {
			delete(c.byContent, key)
		}
	}
	c.heldTables, c.heldBytes = 0, 0
	c.eachHeld(func(t *SymbolTable) {
		c.heldTables++
		c.heldBytes += t.Size()
	})
}

func (c *tableCache) remove(el *list.Element) {
	e := c.ll.Remove(el).(*cacheEntry)
	delete(c.byID, e.id)
	if e.table == nil {
		c.failed--
		c.bytes -= failedEntryBytes
		return
	}
	c.held[e.id] = weak.Make(e.table)
	ch := c.charged[e.table]
	if ch.entries--; ch.entries > 0 {
		c.charged[e.table] = ch
		return
	}
	delete(c.charged, e.table)
	c.bytes -= ch.bytes
}

// tables is how many tables the LRU holds, failed loads included.
func (c *tableCache) tables() int { return len(c.charged) + c.failed }

// each calls f once with every table in memory that the cache knows: in
// the LRU, or held only by live processes.
func (c *tableCache) each(f func(*SymbolTable)) {
	for t := range c.charged {
		f(t)
	}
	c.eachHeld(f)
}

// eachHeld calls f once with every table that left the LRU and that live
// processes still hold (under one or more file identities).
func (c *tableCache) eachHeld(f func(*SymbolTable)) {
	var seen map[*SymbolTable]struct{}
	for _, wp := range c.held {
		t := wp.Value()
		if t == nil {
			continue
		}
		if _, ok := c.charged[t]; ok {
			continue
		}
		if _, ok := seen[t]; ok {
			continue
		}
		if seen == nil {
			seen = map[*SymbolTable]struct{}{}
		}
		seen[t] = struct{}{}
		f(t)
	}
}
