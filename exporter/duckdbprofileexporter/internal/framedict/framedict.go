// Package framedict keeps the in-memory copies of a file's dictionaries
// (frames, stacks, series). The frame dictionary maps
// frame name ↔ integer ID. IDs are loaded from the file on start so they stay
// stable across restarts. A dictionary runs ahead of the file while a batch
// is written: when the batch fails, the writer loads the dictionaries from
// the file again rather than undoing them here.
package framedict

import (
	"context"
	"database/sql"
	"fmt"
)

// FrameDict maps frame names to IDs. It is not safe for concurrent use: the
// writer owns it and serialises batches.
type FrameDict struct {
	ids  map[string]int32
	next int32
	// untyped are frames stored with neither type nor file (written
	// before schema version 6, or sent without them): the first stack
	// that says what they are fills them in.
	untyped map[int32]bool
}

// New returns an empty dictionary whose first ID is 1 (0 is never used, so a
// zero in a stack is always an error).
func New() *FrameDict {
	return &FrameDict{ids: make(map[string]int32), untyped: map[int32]bool{}, next: 1}
}

// Load reads table's frames into a new dictionary.
func Load(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table string) (*FrameDict, error) {
	rows, err := q.QueryContext(ctx, "SELECT frame_id, frame_name, frame_type IS NULL AND file_name IS NULL FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := New()
	for rows.Next() {
		var id int32
		var name string
		var untyped bool
		if err := rows.Scan(&id, &name, &untyped); err != nil {
			return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
		}
		d.ids[name] = id
		if untyped {
			d.untyped[id] = true
		}
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
	return id, true
}

// MarkUntyped records that frame id was stored with neither type nor file.
func (d *FrameDict) MarkUntyped(id int32) { d.untyped[id] = true }

// Fill reports whether frame id was stored untyped, and from now on counts
// it as filled: the caller writes its type and file in the current batch.
func (d *FrameDict) Fill(id int32) bool {
	if !d.untyped[id] {
		return false
	}
	delete(d.untyped, id)
	return true
}

// Forget drops frames that retention removed from the file.
func (d *FrameDict) Forget(names []string) {
	for _, n := range names {
		delete(d.ids, n)
	}
}

// Len is the number of known frames.
func (d *FrameDict) Len() int { return len(d.ids) }
