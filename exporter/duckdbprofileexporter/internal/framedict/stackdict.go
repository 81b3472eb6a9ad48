package framedict

import (
	"context"
	"database/sql"
	"fmt"
	"hash/maphash"
	"math/bits"
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

// StackDict maps frame lists to stack IDs, like FrameDict does names.
type StackDict struct {
	ids     map[StackKey]int32
	next    int32
	pending []StackKey
	byID    map[int32]StackKey // for Forget
}

// NewStacks returns an empty stack dictionary whose first ID is 1.
func NewStacks() *StackDict {
	return &StackDict{ids: map[StackKey]int32{}, byID: map[int32]StackKey{}, next: 1}
}

// LoadStacks reads table's stacks, naming their frames with frameTable
// (read once into memory: decoding in SQL costs more than the hashing).
func LoadStacks(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table, frameTable string) (*StackDict, error) {
	names := map[int32]string{}
	frows, err := q.QueryContext(ctx, "SELECT frame_id, frame_name FROM "+frameTable)
	if err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	for frows.Next() {
		var id int32
		var name string
		if err := frows.Scan(&id, &name); err != nil {
			frows.Close()
			return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
		}
		names[id] = name
	}
	frows.Close()
	if err := frows.Err(); err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	rows, err := q.QueryContext(ctx, "SELECT stack_id, stack_frame_ids FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := NewStacks()
	var frames []string
	for rows.Next() {
		var id int32
		var ids []any
		if err := rows.Scan(&id, &ids); err != nil {
			return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
		}
		frames = frames[:0]
		for _, v := range ids {
			fid, _ := v.(int32)
			name, ok := names[fid]
			if !ok {
				name = "[missing]"
			}
			frames = append(frames, name)
		}
		k := KeyOf(frames)
		d.ids[k] = id
		d.byID[id] = k
		if id >= d.next {
			d.next = id + 1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	return d, nil
}

// ID returns the stack ID of key, assigning the next free one if it is new.
func (d *StackDict) ID(k StackKey) (id int32, isNew bool) {
	if id, ok := d.ids[k]; ok {
		return id, false
	}
	id = d.next
	d.next++
	d.ids[k] = id
	d.byID[id] = k
	d.pending = append(d.pending, k)
	return id, true
}

// Commit makes the IDs assigned since the last Commit permanent.
func (d *StackDict) Commit() { d.pending = d.pending[:0] }

// Forget drops stacks that retention removed from the file.
func (d *StackDict) Forget(ids []int32) {
	for _, id := range ids {
		if k, ok := d.byID[id]; ok {
			delete(d.ids, k)
			delete(d.byID, id)
		}
	}
}

// Len is the number of known stacks.
func (d *StackDict) Len() int { return len(d.ids) }
