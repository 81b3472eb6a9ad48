// Package framedict keeps the in-memory copy of a file's frame dictionary:
// frame name ↔ integer ID. IDs are loaded from the file on start so they stay
// stable across restarts; new IDs are staged per batch and only become
// permanent when the batch's transaction commits.
package framedict

import (
	"context"
	"database/sql"
	"fmt"
)

// FrameDict maps frame names to IDs. It is not safe for concurrent use: the
// writer owns it and serialises batches.
type FrameDict struct {
	ids     map[string]int32
	next    int32
	pending []string // names assigned since the last Commit/Rollback
}

// New returns an empty dictionary whose first ID is 1 (0 is never used, so a
// zero in a stack is always an error).
func New() *FrameDict {
	return &FrameDict{ids: make(map[string]int32), next: 1}
}

// Load reads table's frames into a new dictionary.
func Load(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table string) (*FrameDict, error) {
	rows, err := q.QueryContext(ctx, "SELECT frame_id, frame_name FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := New()
	for rows.Next() {
		var id int32
		var name string
		if err := rows.Scan(&id, &name); err != nil {
			return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
		}
		d.ids[name] = id
		if id >= d.next {
			d.next = id + 1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
	}
	return d, nil
}

// ID returns name's ID, assigning the next free one if it is new. isNew tells
// the caller to insert the frame in the current batch.
func (d *FrameDict) ID(name string) (id int32, isNew bool) {
	if id, ok := d.ids[name]; ok {
		return id, false
	}
	id = d.next
	d.next++
	d.ids[name] = id
	d.pending = append(d.pending, name)
	return id, true
}

// Commit makes the IDs assigned since the last Commit permanent.
func (d *FrameDict) Commit() { d.pending = d.pending[:0] }

// Rollback forgets the IDs assigned since the last Commit (their batch was
// not written). The counter is not rewound: an ID is never handed out twice
// within a process, which keeps a half-failed batch from aliasing frames.
func (d *FrameDict) Rollback() {
	for _, name := range d.pending {
		delete(d.ids, name)
	}
	d.pending = d.pending[:0]
}

// Forget drops frames that retention removed from the file.
func (d *FrameDict) Forget(names []string) {
	for _, n := range names {
		delete(d.ids, n)
	}
}

// Len is the number of known frames.
func (d *FrameDict) Len() int { return len(d.ids) }
