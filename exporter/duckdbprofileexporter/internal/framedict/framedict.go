// Package framedict keeps the in-memory copies of a file's dictionaries
// (frames, stacks, series). The frame dictionary maps
// frame name ↔ integer ID. IDs are loaded from the file on start so they stay
// stable across restarts. A dictionary runs ahead of the file while a batch
// is written: when the batch fails, the writer loads the dictionaries from
// the file again rather than undoing them here.
package framedict

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
)

// FrameDict maps frame names to IDs. It is not safe for concurrent use: the
// writer owns it and serialises batches.
type FrameDict struct {
	ids  map[string]int32
	next int32 // one past the highest ID handed out
	// free are the IDs below next that no frame holds (retention removed
	// theirs), as ranges, lowest first. A new frame takes the lowest: every
	// query builds a list of next-1 names (internal/stacknames), so the
	// highest ID must follow the frames the file holds, not every frame it
	// ever held. Unsymbolized frames are named by address, so a node that
	// starts processes all day names new frames all day.
	free []idRange
	// untyped are frames stored with neither type nor file (written
	// before schema version 6, or sent without them): the first stack
	// that says what they are fills them in.
	untyped map[int32]bool
}

// idRange is the IDs lo..hi, both included.
type idRange struct{ lo, hi int32 }

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
	var held []int32
	for rows.Next() {
		var id int32
		var name string
		var untyped bool
		if err := rows.Scan(&id, &name, &untyped); err != nil {
			return nil, fmt.Errorf("load frame dictionary %s: %w", table, err)
		}
		d.ids[name] = id
		held = append(held, id)
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
	// The gaps between the IDs held are free.
	slices.Sort(held)
	prev := int32(0)
	for _, id := range held {
		if id > prev+1 {
			d.free = append(d.free, idRange{prev + 1, id - 1})
		}
		prev = id
	}
	return d, nil
}

// ID returns name's ID, assigning the next free one if it is new. isNew tells
// the caller to insert the frame in the current batch.
func (d *FrameDict) ID(name string) (id int32, isNew bool) {
	if id, ok := d.ids[name]; ok {
		return id, false
	}
	if len(d.free) > 0 {
		r := &d.free[0]
		id = r.lo
		if r.lo == r.hi {
			d.free = slices.Delete(d.free, 0, 1)
		} else {
			r.lo++
		}
	} else {
		id = d.next
		d.next++
	}
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

// Forget drops frames that retention removed from the file; their IDs go
// to new frames. Only frames no longer in the file may be forgotten: a
// batch that reuses an ID appends a row with it.
func (d *FrameDict) Forget(names []string) {
	before := len(d.free)
	for _, n := range names {
		if id, ok := d.ids[n]; ok {
			delete(d.ids, n)
			delete(d.untyped, id)
			d.free = append(d.free, idRange{id, id})
		}
	}
	if len(d.free) == before {
		return
	}
	// Merge the ranges (the freed IDs were held, so none overlaps another).
	slices.SortFunc(d.free, func(a, b idRange) int { return cmp.Compare(a.lo, b.lo) })
	merged := d.free[:1]
	for _, r := range d.free[1:] {
		if last := &merged[len(merged)-1]; r.lo == last.hi+1 {
			last.hi = r.hi
		} else {
			merged = append(merged, r)
		}
	}
	// Free IDs at the top are not handed out again from a gap: next comes
	// down to them.
	if last := merged[len(merged)-1]; last.hi == d.next-1 {
		d.next = last.lo
		merged = merged[:len(merged)-1]
	}
	d.free = merged
}

// Len is the number of known frames.
func (d *FrameDict) Len() int { return len(d.ids) }
