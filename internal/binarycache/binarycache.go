// Package binarycache keeps what the agent derives from a binary — whether it
// keeps frame pointers and, when it does not, its compiled unwind rows — on
// disk under the agent's state directory, keyed by the file's identity
// (device, inode, size, modification time). An agent restarted on a node
// with hundreds of binaries reads them back instead of parsing every
// binary's .eh_frame again.
//
// Guarantees:
//   - An entry is one file: a header (magic, format version, kind), the
//     payload, and a CRC-32C over both. A different format version, a short,
//     corrupt or foreign-looking entry is never trusted: it is deleted,
//     counted and logged once, and the caller recomputes.
//   - Writes go to a temporary file in the same directory and are renamed
//     into place: an agent that crashes or is killed mid-write leaves either
//     the old state or the new entry, never half of one. Temporary files a
//     crash left behind are removed on Open. Entries are not fsync'ed: a
//     power loss may leave an entry whose data did not reach the disk, which
//     its checksum rejects like any corrupt entry. An fsync per entry made
//     every new binary on a node where binaries are built and run once (a CI
//     runner) wait for the disk's journal, on the worker that attaches
//     unwind tables, for a file that is only a cache.
//   - The directory is bounded (maxBytes): least recently used entries go
//     first; an entry larger than a quarter of the budget is not stored.
//   - Files in the directory that do not follow the entry naming scheme are
//     left alone (the directory may be shared by mistake).
//   - A directory that cannot be written (full disk, read-only) turns the
//     cache into a read-only one, with one log line and Stats.WriteErrors;
//     it never stops the caller.
//
// Safe for concurrent use.
package binarycache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/unwindtable"
)

// FormatVersion changes whenever the encoding of an entry (or of the rows in
// it) changes, or what decides it (the frame-pointer verdict's rule):
// entries of another version are rebuilt. 2: a binary keeps frame pointers
// only when all but one in a hundred of its functions with a frame do (1:
// half), so the verdicts of version 1 may be wrong. 3: rows carry signal
// trampolines (unwindtable.Signal) and where the caller's rbx is
// (unwindtable.RBX), which rows of version 2 lack.
const FormatVersion = 3

// errOtherVersion is an entry an agent of another format version wrote.
var errOtherVersion = errors.New("entry of another format version")

const (
	magic      = "HPBC"
	headerLen  = 4 + 2 + 1 + 1 + 4 // magic, version, kind, reserved, payload length
	trailerLen = 4                 // CRC-32C
	suffix     = ".hpbc"
	tmpMarker  = ".tmp-"
)

// Kind says what an entry holds.
type Kind uint8

const (
	// KindUnwind: frame-pointer verdict and, for a binary without frame
	// pointers, its unwind rows.
	KindUnwind Kind = 1
)

// Stats are the cache's counters since Open.
type Stats struct {
	Hits, Misses, Writes, Evicted uint64
	Corrupt                       uint64 // entries found damaged or of another format, deleted
	WriteErrors                   uint64 // writes that failed (full disk, read-only directory)
	Bytes                         int64  // bytes of entries on disk
	Entries                       int
}

// Cache is a directory of entries.
type Cache struct {
	dir      string
	maxBytes int64
	log      *zap.Logger

	mu         sync.Mutex
	index      map[string]*entry // by file name
	bytes      int64
	stats      Stats
	loggedErr  bool
	loggedDmg  bool
	loggedOld  bool
	writesDown bool
}

type entry struct {
	name string
	size int64
	used time.Time
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Open uses dir (created if missing) for at most maxBytes of entries.
func Open(dir string, maxBytes int64, log *zap.Logger) (*Cache, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if maxBytes <= 0 {
		return nil, fmt.Errorf("binary cache: budget must be positive (got %d bytes)", maxBytes)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("binary cache: create %s: %w", dir, err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("binary cache: list %s: %w", dir, err)
	}
	c := &Cache{dir: dir, maxBytes: maxBytes, log: log, index: map[string]*entry{}}
	for _, de := range des {
		name := de.Name()
		switch {
		case !de.Type().IsRegular():
		case strings.Contains(name, tmpMarker) && isEntryName(name[:strings.Index(name, tmpMarker)]):
			// A write that did not finish: never renamed into place.
			_ = os.Remove(filepath.Join(dir, name))
		case isEntryName(name):
			fi, err := de.Info()
			if err != nil {
				continue
			}
			c.index[name] = &entry{name: name, size: fi.Size(), used: fi.ModTime()}
			c.bytes += fi.Size()
		}
	}
	c.evictLocked(0)
	return c, nil
}

// isEntryName: 64 hex digits and the suffix, as entryName makes them.
func isEntryName(name string) bool {
	base, ok := strings.CutSuffix(name, suffix)
	if !ok || len(base) != 64 {
		return false
	}
	_, err := hex.DecodeString(base)
	return err == nil
}

// entryName is where the entry of kind for the file id lives.
func entryName(id fileid.ID, kind Kind) string {
	var key [8*4 + 1]byte
	binary.LittleEndian.PutUint64(key[0:], id.Dev)
	binary.LittleEndian.PutUint64(key[8:], id.Inode)
	binary.LittleEndian.PutUint64(key[16:], uint64(id.Size))
	binary.LittleEndian.PutUint64(key[24:], uint64(id.Mtime))
	key[32] = byte(kind)
	sum := sha256.Sum256(key[:])
	return hex.EncodeToString(sum[:]) + suffix
}

// Get returns the payload stored for (id, kind).
func (c *Cache) Get(id fileid.ID, kind Kind) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	name := entryName(id, kind)
	c.mu.Lock()
	e, ok := c.index[name]
	c.mu.Unlock()
	if !ok {
		c.count(func(s *Stats) { s.Misses++ })
		return nil, false
	}
	path := filepath.Join(c.dir, name)
	raw, err := os.ReadFile(path)
	if err != nil {
		c.drop(name, fmt.Errorf("read: %w", err))
		return nil, false
	}
	payload, err := decode(raw, kind)
	if err != nil {
		c.drop(name, err)
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now) // LRU order survives a restart
	c.mu.Lock()
	e.used = now
	c.stats.Hits++
	c.mu.Unlock()
	return payload, true
}

// Put stores payload for (id, kind), replacing what was there.
func (c *Cache) Put(id fileid.ID, kind Kind, payload []byte) {
	if c == nil {
		return
	}
	size := int64(headerLen + len(payload) + trailerLen)
	c.mu.Lock()
	if c.writesDown || size > c.maxBytes/4 {
		c.mu.Unlock()
		return
	}
	name := entryName(id, kind)
	if old, ok := c.index[name]; ok {
		delete(c.index, name)
		c.bytes -= old.size
	}
	c.evictLocked(size)
	c.mu.Unlock()

	if err := c.write(name, encode(kind, payload)); err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stats.WriteErrors++
		c.writesDown = true
		if !c.loggedErr {
			c.loggedErr = true
			c.log.Warn("binary cache: cannot write; binaries' unwind tables are computed again after a restart (the agent runs on)",
				zap.String("directory", c.dir), zap.Error(err))
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Two Puts of one key may race: the file holds the last rename, the
	// index one entry, counted once.
	if old, ok := c.index[name]; ok {
		c.bytes -= old.size
	}
	c.index[name] = &entry{name: name, size: size, used: time.Now()}
	c.bytes += size
	c.stats.Writes++
}

// write puts data at name atomically: temporary file, rename (no fsync: see
// the package's guarantees).
func (c *Cache) write(name string, data []byte) error {
	f, err := os.CreateTemp(c.dir, name+tmpMarker+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, name)); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// evictLocked removes least recently used entries until need more bytes fit.
func (c *Cache) evictLocked(need int64) {
	if c.bytes+need <= c.maxBytes {
		return
	}
	es := make([]*entry, 0, len(c.index))
	for _, e := range c.index {
		es = append(es, e)
	}
	sort.Slice(es, func(i, j int) bool { return es[i].used.Before(es[j].used) })
	for _, e := range es {
		if c.bytes+need <= c.maxBytes {
			return
		}
		_ = os.Remove(filepath.Join(c.dir, e.name))
		delete(c.index, e.name)
		c.bytes -= e.size
		c.stats.Evicted++
	}
}

// drop deletes a damaged entry.
func (c *Cache) drop(name string, why error) {
	_ = os.Remove(filepath.Join(c.dir, name))
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.index[name]; ok {
		delete(c.index, name)
		c.bytes -= e.size
	}
	c.stats.Corrupt++
	c.stats.Misses++
	switch {
	case errors.Is(why, errOtherVersion):
		// An upgrade: nothing is wrong.
		if !c.loggedOld {
			c.loggedOld = true
			c.log.Info("binary cache: entries of another agent version are deleted and computed again (logged once)",
				zap.String("entry", filepath.Join(c.dir, name)), zap.Error(why))
		}
	case !c.loggedDmg:
		c.loggedDmg = true
		c.log.Warn("binary cache: a damaged entry was deleted and is computed again (logged once)",
			zap.String("entry", filepath.Join(c.dir, name)), zap.Error(why))
	}
}

func (c *Cache) count(f func(*Stats)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(&c.stats)
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes, s.Entries = c.bytes, len(c.index)
	return s
}

func encode(kind Kind, payload []byte) []byte {
	out := make([]byte, headerLen, headerLen+len(payload)+trailerLen)
	copy(out, magic)
	binary.LittleEndian.PutUint16(out[4:], FormatVersion)
	out[6] = byte(kind)
	binary.LittleEndian.PutUint32(out[8:], uint32(len(payload)))
	out = append(out, payload...)
	return binary.LittleEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

func decode(raw []byte, kind Kind) ([]byte, error) {
	if len(raw) < headerLen+trailerLen {
		return nil, fmt.Errorf("entry of %d bytes is shorter than a header", len(raw))
	}
	if !bytes.Equal(raw[:4], []byte(magic)) {
		return nil, errors.New("not a binary cache entry (magic)")
	}
	if v := binary.LittleEndian.Uint16(raw[4:]); v != FormatVersion {
		return nil, fmt.Errorf("%w: %d, this agent writes %d", errOtherVersion, v, FormatVersion)
	}
	if Kind(raw[6]) != kind {
		return nil, fmt.Errorf("entry of kind %d, want %d", raw[6], kind)
	}
	n := int(binary.LittleEndian.Uint32(raw[8:]))
	if len(raw) != headerLen+n+trailerLen {
		return nil, fmt.Errorf("entry of %d bytes for a %d-byte payload", len(raw), n)
	}
	body := raw[:headerLen+n]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(raw[headerLen+n:]) {
		return nil, errors.New("checksum mismatch")
	}
	return raw[headerLen : headerLen+n], nil
}

// Unwind is what KindUnwind stores: whether the binary keeps frame pointers,
// and its rows when it does not.
type Unwind struct {
	HasFramePointers bool
	Rows             []unwindtable.Row
}

// GetUnwind returns the unwind entry of the file id.
func (c *Cache) GetUnwind(id fileid.ID) (Unwind, bool) {
	p, ok := c.Get(id, KindUnwind)
	if !ok {
		return Unwind{}, false
	}
	u, err := decodeUnwind(p)
	if err != nil {
		c.drop(entryName(id, KindUnwind), err)
		return Unwind{}, false
	}
	return u, true
}

// PutUnwind stores the unwind entry of the file id.
func (c *Cache) PutUnwind(id fileid.ID, u Unwind) {
	if c == nil {
		return
	}
	p := make([]byte, 1, 1+len(u.Rows)*unwindtable.RowBytes)
	if u.HasFramePointers {
		p[0] = 1
	}
	for _, r := range u.Rows {
		p = binary.LittleEndian.AppendUint32(p, r.PC)
		p = append(p, r.Kind, byte(r.RBPOffset))
		p = binary.LittleEndian.AppendUint16(p, r.CFAOffset)
	}
	c.Put(id, KindUnwind, p)
}

func decodeUnwind(p []byte) (Unwind, error) {
	if len(p) < 1 || (len(p)-1)%unwindtable.RowBytes != 0 || p[0] > 1 {
		return Unwind{}, fmt.Errorf("unwind payload of %d bytes", len(p))
	}
	u := Unwind{HasFramePointers: p[0] == 1}
	if n := (len(p) - 1) / unwindtable.RowBytes; n > 0 {
		u.Rows = make([]unwindtable.Row, n)
		for i := range u.Rows {
			b := p[1+i*unwindtable.RowBytes:]
			u.Rows[i] = unwindtable.Row{PC: binary.LittleEndian.Uint32(b), Kind: b[4], RBPOffset: int8(b[5]), CFAOffset: binary.LittleEndian.Uint16(b[6:])}
		}
	}
	return u, nil
}
