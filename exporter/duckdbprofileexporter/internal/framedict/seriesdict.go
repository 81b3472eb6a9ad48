package framedict

import (
	"context"
	"database/sql"
	"fmt"
)

// Series is what a row says about where its samples come from, apart from
// time and stack: the strings each row of a tier would otherwise repeat.
// PodName is "" on the local tier, which has no pod column.
type Series struct {
	Service, PodName, Build string
	Container, PodUID       string
}

// SeriesDict maps series to series IDs, like StackDict does frame lists.
// A file holds few series (services × pods × builds), so the whole
// dictionary stays in memory. It is not safe for concurrent use.
type SeriesDict struct {
	ids  map[Series]int32
	byID map[int32]Series // for Forget
	next int32
}

// NewSeries returns an empty series dictionary whose first ID is 1.
func NewSeries() *SeriesDict {
	return &SeriesDict{ids: map[Series]int32{}, byID: map[int32]Series{}, next: 1}
}

// LoadSeries reads table's series. withPod: the table has a pod_name
// column (the summary tier).
func LoadSeries(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, table string, withPod bool) (*SeriesDict, error) {
	pod := "''"
	if withPod {
		pod = "pod_name"
	}
	rows, err := q.QueryContext(ctx, "SELECT series_id, service_id, "+pod+", build_id, container_id, k8s_pod_uid FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("load series dictionary %s: %w", table, err)
	}
	defer rows.Close()
	d := NewSeries()
	for rows.Next() {
		var id int32
		var s Series
		if err := rows.Scan(&id, &s.Service, &s.PodName, &s.Build, &s.Container, &s.PodUID); err != nil {
			return nil, fmt.Errorf("load series dictionary %s: %w", table, err)
		}
		d.ids[s] = id
		d.byID[id] = s
		if id >= d.next {
			d.next = id + 1
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("load series dictionary %s: %w", table, err)
	}
	return d, nil
}

// ID returns the ID of s, assigning the next free one if it is new. A
// failed batch's new IDs are not taken back: the writer reloads its
// dictionaries from the file after any failure.
func (d *SeriesDict) ID(s Series) (id int32, isNew bool) {
	if id, ok := d.ids[s]; ok {
		return id, false
	}
	id = d.next
	d.next++
	d.ids[s] = id
	d.byID[id] = s
	return id, true
}

// Forget drops series that retention removed from the file.
func (d *SeriesDict) Forget(ids []int32) {
	for _, id := range ids {
		if s, ok := d.byID[id]; ok {
			delete(d.ids, s)
			delete(d.byID, id)
		}
	}
}

// Len is the number of known series.
func (d *SeriesDict) Len() int { return len(d.ids) }
