package framedict

import (
	"context"
	"database/sql"
	"fmt"
	"hash/maphash"
)

// StackKey identifies a frame list by a 128-bit hash of its names: the
// writer looks a row's stack up with one map access, without resolving its
// frames, and the cache stays small (a gateway keeps hundreds of thousands
// of stacks). Seeds are per process; keys are recomputed when a file is
// loaded, never stored.
type StackKey struct{ a, b uint64 }

var seedA, seedB = maphash.MakeSeed(), maphash.MakeSeed()

// KeyOf is the key of frames (root first).
func KeyOf(frames []string) StackKey {
	var ha, hb maphash.Hash
	ha.SetSeed(seedA)
	hb.SetSeed(seedB)
	for _, f := range frames {
		_, _ = ha.WriteString(f)
		_ = ha.WriteByte(0)
		_, _ = hb.WriteString(f)
		_ = hb.WriteByte(0)
	}
	k := StackKey{ha.Sum64(), hb.Sum64()}
	if k == (StackKey{}) {
		k.a = 1 // the zero key means "not computed"
	}
	return k
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

// LoadStacks reads table's stacks, naming their frames with frames' table.
func LoadStacks(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table, frameTable string) (*StackDict, error) {
	rows, err := q.QueryContext(ctx, `WITH dict AS (SELECT map(list(frame_id), list(frame_name)) AS names FROM `+frameTable+`)
SELECT stack_id, list_transform(stack_frame_ids, lambda f: coalesce(dict.names[f], '[missing]')) FROM `+table+`, dict`)
	if err != nil {
		return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := NewStacks()
	for rows.Next() {
		var id int32
		var names []any
		if err := rows.Scan(&id, &names); err != nil {
			return nil, fmt.Errorf("load stack dictionary %s: %w", table, err)
		}
		frames := make([]string, len(names))
		for i, n := range names {
			frames[i], _ = n.(string)
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
