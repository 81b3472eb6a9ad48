package framedict

import (
	"context"
	"database/sql"
	"fmt"
	"hash/maphash"
	"math/bits"

	"github.com/hotpath-dev/hotpath/internal/stacknames"
)

// StackKey identifies a frame list by a 128-bit hash of its names: the
// writer looks a row's stack up with one map access, without resolving its
// frames, and the cache stays small (a gateway keeps hundreds of thousands
// of stacks). Seeds are per process; keys are recomputed when a file is
// loaded, never stored.
type StackKey struct{ a, b uint64 }

// NameKey is a frame name's 128-bit hash. A stack's key is built from its
// frames' NameKeys (StackHasher), so a converter hashes each name once per
// request however many stacks hold it, and a stack costs a few
// multiplications per frame.
type NameKey struct{ a, b uint64 }

var seedA, seedB = maphash.MakeSeed(), maphash.MakeSeed()

// NameKeyOf is the key of one frame name: two independently seeded hashes.
func NameKeyOf(name string) NameKey {
	return NameKey{maphash.String(seedA, name), maphash.String(seedB, name)}
}

// StackHasher builds a StackKey from NameKeys, root first. Each lane is a
// chain of bijections of its state (xor with the frame's hash, multiply by
// an odd constant, rotate), so two lists that differ in one frame differ
// in both lanes; the name hashes being seeded per process, a collision of
// distinct lists is a 2^-128 event per pair in practice.
type StackHasher struct {
	a, b uint64
	n    uint64
}

const (
	mulA = 0x9e3779b97f4a7c15 // odd: multiplication is a bijection
	mulB = 0xc2b2ae3d27d4eb4f
)

// Add appends one frame.
func (h *StackHasher) Add(k NameKey) {
	h.a = bits.RotateLeft64((h.a^k.a)*mulA, 29)
	h.b = bits.RotateLeft64((h.b^k.b)*mulB, 31)
	h.n++
}

// Sum is the key of the frames added so far.
func (h *StackHasher) Sum() StackKey {
	k := StackKey{fmix(h.a ^ h.n), fmix(h.b ^ (h.n * mulA))}
	if k == (StackKey{}) {
		k.a = 1 // the zero key means "not computed"
	}
	return k
}

// fmix is MurmurHash3's 64-bit finaliser: every input bit affects every
// output bit, so keys spread evenly in the dictionary's map.
func fmix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

// KeyOf is the key of frames (root first).
func KeyOf(frames []string) StackKey {
	var h StackHasher
	for _, f := range frames {
		h.Add(NameKeyOf(f))
	}
	return h.Sum()
}

// IsZero reports whether k was never computed.
func (k StackKey) IsZero() bool { return k == StackKey{} }

// StackDict maps frame lists to stack IDs, like FrameDict does names. It
// keeps no map back from IDs to keys: Forget finds the keys by a scan.
// That map cost as much memory as the dictionary itself (3.5 MB at an
// agent's 90,000 stacks, 7 MB at a gateway's 200,000) and an insert per
// new stack, where a retention run scans 200,000 entries in a few ms.
// Nothing needs the assigned IDs undone: a batch that fails makes the
// writer reload its dictionaries from the file.
type StackDict struct {
	ids  map[StackKey]int32
	next int32
}

// NewStacks returns an empty stack dictionary whose first ID is 1.
func NewStacks() *StackDict {
	return &StackDict{ids: map[StackKey]int32{}, next: 1}
}

// LoadStacks reads table's stacks, naming their frames with the file's
// frame dictionary, loaded already (Load). Each frame's name is hashed
// once (a NameKey per frame ID), and a stack's key is built from its
// frames' NameKeys with StackHasher, as KeyOf does from the names: on a
// 3-hour agent file (168,398 stacks of 15 frames, 6,299 frames) that is
// 6,299 name hashes instead of 2.5 million.
func LoadStacks(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, table string, fd *FrameDict) (*StackDict, error) {
	type frameKey struct {
		id  int32
		key NameKey
	}
	frames := make([]frameKey, 0, len(fd.ids))
	maxID := int32(0)
	for name, id := range fd.ids {
		frames = append(frames, frameKey{id, NameKeyOf(name)})
		maxID = max(maxID, id)
	}
	// Frame IDs are handed out from 1 up, so a slice indexed by ID is
	// small; a map takes a file whose IDs are sparse.
	var keyOf func(fid int64) (NameKey, bool)
	if int64(maxID) <= 4*int64(len(frames))+1024 {
		dense := make([]NameKey, maxID+1)
		known := make([]bool, maxID+1)
		for _, f := range frames {
			if f.id >= 0 {
				dense[f.id], known[f.id] = f.key, true
			}
		}
		keyOf = func(fid int64) (NameKey, bool) {
			if fid < 0 || fid >= int64(len(dense)) || !known[fid] {
				return NameKey{}, false
			}
			return dense[fid], true
		}
	} else {
		sparse := make(map[int64]NameKey, len(frames))
		for _, f := range frames {
			sparse[int64(f.id)] = f.key
		}
		keyOf = func(fid int64) (NameKey, bool) {
			k, ok := sparse[fid]
			return k, ok
		}
	}
	var n int
	if err := q.QueryRowContext(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	missing := NameKeyOf(stacknames.Missing)
	// The frame lists come as text ("12 7 3"): the driver hands a list over
	// as []any, one boxed value per frame, which took longer than the rest
	// of the load together.
	rows, err := q.QueryContext(ctx, "SELECT stack_id, array_to_string(stack_frame_ids, ' ') FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := NewStacks()
	if n > 0 {
		// Sized once: growing the map a stack at a time rehashed it
		// about as long as the hashing took.
		d.ids = make(map[StackKey]int32, n)
	}
	var list sql.RawBytes
	for rows.Next() {
		var id int32
		if err := rows.Scan(&id, &list); err != nil {
			return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
		}
		var h StackHasher
		for rest := list; len(rest) > 0; {
			fid, used, ok := leadingInt(rest)
			if !ok {
				return nil, fmt.Errorf("load stack dictionary %s: stack %d: frame list %q", table, id, list)
			}
			rest = rest[used:]
			k, ok := keyOf(fid)
			if !ok {
				k = missing
			}
			h.Add(k)
		}
		k := h.Sum()
		d.ids[k] = id
		if id >= d.next {
			d.next = id + 1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	return d, nil
}

// leadingInt parses the integer at the start of b and the space after it,
// if any: it returns the value and the bytes consumed.
func leadingInt(b []byte) (v int64, n int, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		n = 1
	}
	start := n
	for ; n < len(b) && b[n] >= '0' && b[n] <= '9'; n++ {
		if v > (1<<62)/10 {
			return 0, 0, false
		}
		v = v*10 + int64(b[n]-'0')
	}
	if n == start || n < len(b) && b[n] != ' ' {
		return 0, 0, false
	}
	if n < len(b) {
		n++
	}
	if neg {
		v = -v
	}
	return v, n, true
}

// ID returns the stack ID of key, assigning the next free one if it is new.
func (d *StackDict) ID(k StackKey) (id int32, isNew bool) {
	if id, ok := d.ids[k]; ok {
		return id, false
	}
	id = d.next
	d.next++
	d.ids[k] = id
	return id, true
}

// Forget drops stacks that retention removed from the file.
func (d *StackDict) Forget(ids []int32) {
	if len(ids) == 0 {
		return
	}
	gone := make(map[int32]struct{}, len(ids))
	for _, id := range ids {
		gone[id] = struct{}{}
	}
	for k, id := range d.ids {
		if _, ok := gone[id]; ok {
			delete(d.ids, k)
		}
	}
}

// Len is the number of known stacks.
func (d *StackDict) Len() int { return len(d.ids) }
