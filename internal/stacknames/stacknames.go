// Package stacknames names the frames of stored stacks: a hotpath file keeps
// each distinct stack once, as a list of frame IDs into the frame
// dictionary. The exporter's views and macros decode in SQL (DictSQL,
// DecodeSQL); the CLI's queries (internal/profilequery) read the IDs and the
// names of the frames they use, and decode in Go (Names). Both name a frame
// the dictionary does not hold Missing.
package stacknames

import (
	"fmt"
	"strconv"
	"strings"
)

// Missing is the name of a frame ID that is not in the frame dictionary.
const Missing = "[missing]"

// Names is frame names by frame ID, as a query read them from the frame
// dictionary (Set). Frame IDs are small positive integers (see DictSQL), so
// names up to denseIDs are kept in a slice rather than a map: naming a
// 30-day profile looks up 300,000 IDs.
type Names struct {
	dense  []string // by ID below denseIDs
	held   []bool   // whether dense[id] was set
	sparse map[int64]string
}

// denseIDs bounds the slice of Names: a corrupt or hostile file's ID of
// billions must not allocate gigabytes.
const denseIDs = 1 << 22

// Set records frame id's name. IDs of zero and below are never named (Of).
func (n *Names) Set(id int64, name string) {
	if id <= 0 {
		return
	}
	if id >= denseIDs {
		if n.sparse == nil {
			n.sparse = map[int64]string{}
		}
		n.sparse[id] = name
		return
	}
	if int(id) >= len(n.dense) {
		size := max(int(id)+1, 2*len(n.dense))
		n.dense = append(n.dense, make([]string, size-len(n.dense))...)
		n.held = append(n.held, make([]bool, size-len(n.held))...)
	}
	n.dense[id], n.held[id] = name, true
}

// lookup is frame id's name and whether Set recorded one.
func (n *Names) lookup(id int64) (string, bool) {
	if id > 0 && id < int64(len(n.dense)) {
		return n.dense[id], n.held[id]
	}
	name, ok := n.sparse[id]
	return name, ok
}

// Of is the name of frame id, as DecodeSQL names it: Missing for an ID
// the dictionary does not hold, zero and negative ones included.
func (n *Names) Of(id int64) string {
	if name, ok := n.lookup(id); ok {
		return name
	}
	return Missing
}

// DictSQL is a one-row query of the frame dictionary frames (frame_id,
// frame_name) as the list names, where names[id] is frame id's name (NULL
// for an ID the dictionary does not hold). Callers cross-join it as dict and
// decode with DecodeSQL.
//
// Frame IDs are small positive integers, the lowest free one for each new
// frame (the exporter hands the IDs of frames retention removed to new
// ones), so the list is about as long as the most frames the file held at
// once. When IDs were never handed out again, a file on a node that starts
// processes all day (unsymbolized frames are named by address) grew a list
// of every frame it had ever held: 6,299 frames spread over IDs up to 2 M
// took 1.97 s to list, against 7 ms packed. Measured on 9,152 stacks of 15 frames
// (one DuckDB thread): indexing this list costs ~35 ms, a MAP of the
// dictionary ~115 ms (its lookup is per key), and unnesting the stacks and
// joining the frame table ~400 ms (the frames must be listed again in
// order).
func DictSQL(frames string) string {
	return `SELECT list(f.frame_name ORDER BY r.id) AS names
FROM range(1, (SELECT coalesce(max(frame_id), 0) + 1 FROM ` + frames + `)) r(id)
LEFT JOIN ` + frames + ` f ON f.frame_id = r.id`
}

// DecodeSQL is the expression naming the frames of the INTEGER[] expression
// ids through DictSQL's list (in scope as dict), in the list's order; an ID
// the dictionary does not hold (including 0 and negative ones, which would
// index from the list's end) is Missing.
func DecodeSQL(ids string) string {
	return `list_transform(` + ids + `, lambda f: coalesce(CASE WHEN f > 0 THEN dict.names[f] END, '` + Missing + `'))`
}

// ListSQL is the INTEGER[] expression ids as text for AppendList: its IDs in
// decimal, separated by single spaces (a NULL ID as 0). A query that sends
// stacks to Go sends each as one string: as a list, every ID is a value of
// its own to encode and decode, 340,000 of them for a 30-day profile of
// 20,000 stacks (the endpoint's JSON and the CLI's decoding took longer
// than the query).
func ListSQL(ids string) string {
	return `array_to_string(list_transform(` + ids + `, lambda f: coalesce(f, 0)), ' ')`
}

// AppendList appends to dst the names of the frames of a stack given as
// ListSQL's text, root first. complete says whether the dictionary held
// every one (none is Missing). A caller naming many stacks gives them one
// backing array (20,000 stacks of a 30-day profile allocated once, not
// 20,000 times).
func (n *Names) AppendList(dst []string, ids string) (frames []string, complete bool, err error) {
	if ids == "" {
		return dst, true, nil
	}
	complete = true
	for rest := ids; ; {
		field, tail, more := strings.Cut(rest, " ")
		id, err := strconv.Atoi(field) // its fast path: IDs are short
		if err != nil {
			return nil, false, fmt.Errorf("frame ID %q: %w", field, err)
		}
		name, held := n.lookup(int64(id))
		if !held {
			name, complete = Missing, false
		}
		dst = append(dst, name)
		if !more {
			return dst, complete, nil
		}
		rest = tail
	}
}
