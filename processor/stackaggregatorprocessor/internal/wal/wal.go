// Package wal is the stackaggregator's write-ahead log: every batch the
// processor acknowledges is on disk first, so a collector killed at any
// instant loses nothing it said "accepted" to. Records are replayed on start
// to rebuild the windows that had not been written downstream.
//
// Layout of the directory:
//
//	seg-<n>.wal  segments of records, appended in order; a segment is
//	             deleted once every window its records fed is committed
//	seen.log     ids of batches whose segments were deleted, kept for the
//	             dedup window so a sender's replay is still recognised
//
// A record is [length uint32][crc32c uint32][body]. A crash mid-append
// leaves a torn record at a segment's end, which Open truncates away (it was
// never acknowledged). A bad record elsewhere ends that segment's replay
// with an error in Stats, never silently.
package wal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Route says which window one batch's samples went to, for one window start.
type Route struct {
	Start    int64  // window start, unix nanoseconds
	WindowID string // the window's identity, also the emitted batch id
}

// Record is one acknowledged batch.
type Record struct {
	Received time.Time // the processor's clock at ingest (decides lateness on replay)
	BatchID  string    // the sender's batch identity; "" when it sent none
	Routes   []Route
	Payload  []byte // the batch, OTLP protobuf
}

// Options tunes a Log.
type Options struct {
	// SegmentBytes starts a new segment past this size.
	SegmentBytes int64
	// SegmentAge starts a new segment when the current one is this old, so
	// old segments become deletable while new data keeps arriving.
	SegmentAge time.Duration
	// DedupWindow is how long a batch id is remembered.
	DedupWindow time.Duration
	// Sync makes Append durable against power loss (fsync), not only
	// against the process dying. On by default in the processor.
	Sync bool
	Now  func() time.Time
}

const (
	kindBatch     byte = 1
	kindCommitted byte = 2
	headerBytes        = 8
	// maxRecordBytes bounds what a corrupt length field can make Open
	// allocate. The OTLP receivers' own request limit is far below it.
	maxRecordBytes = 1 << 30
	segPrefix      = "seg-"
	segSuffix      = ".wal"
	seenFile       = "seen.log"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Stats reports what Open found on disk.
type Stats struct {
	Segments     int   // segments read
	Records      int   // batch records read
	TornBytes    int64 // bytes of torn records truncated from segment ends
	CorruptBytes int64 // bytes after a bad record inside a segment (skipped, reported)
	LastReceived time.Time
}

type segment struct {
	n    uint64
	path string
	// open is the ids of windows fed by this segment's records and not yet
	// committed; the segment goes when it is empty and not current.
	open map[string]struct{}
	// batches are the batch ids in the segment, moved to seen.log on delete.
	batches map[string]int64
	// lastReceived is the latest Received of its records (unix ns).
	lastReceived int64
}

// Log is an open write-ahead log. It is safe for concurrent use.
type Log struct {
	dir  string
	opts Options

	mu        sync.Mutex
	segs      []*segment // oldest first; the last is current
	cur       *os.File
	curSize   int64
	curOpened time.Time
	committed map[string]struct{} // committed window ids read at Open, until Replay
	seen      map[string]int64    // batch id → received (unix ns)
	seenOut   *os.File
	replay    []Record
	stats     Stats
	buf       []byte
}

// Open reads the log in dir (creating dir), truncates torn tails and keeps
// the uncommitted records for Replay. Appends go to a new segment.
func Open(dir string, opts Options) (*Log, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 64 << 20
	}
	if opts.SegmentAge <= 0 {
		opts.SegmentAge = time.Minute
	}
	if opts.DedupWindow <= 0 {
		opts.DedupWindow = time.Hour
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create write-ahead log directory: %w", err)
	}
	l := &Log{dir: dir, opts: opts, committed: map[string]struct{}{}, seen: map[string]int64{}}
	if err := l.loadSeen(); err != nil {
		return nil, err
	}
	if err := l.loadSegments(); err != nil {
		return nil, err
	}
	if err := l.rotateLocked(); err != nil {
		return nil, err
	}
	// Segments with nothing uncommitted can go now; their batch ids are
	// kept in seen.log first.
	if err := l.collectLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

// Stats is what Open found.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}

// Replay hands the records found by Open, oldest first, whose windows are
// not all committed. Routes to committed windows are left out of each record.
// It can be called once; the records are released afterwards.
func (l *Log) Replay(fn func(Record) error) error {
	l.mu.Lock()
	recs, committed := l.replay, l.committed
	// Only replay needs the markers read at Open.
	l.replay, l.committed = nil, nil
	l.mu.Unlock()
	for _, r := range recs {
		routes := r.Routes[:0:0]
		for _, rt := range r.Routes {
			if _, done := committed[rt.WindowID]; !done {
				routes = append(routes, rt)
			}
		}
		if len(routes) == 0 {
			continue
		}
		r.Routes = routes
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// Seen reports whether a batch with this id was appended within the dedup
// window (in this run or, from disk, an earlier one).
func (l *Log) Seen(batchID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.seen[batchID]
	return ok && l.opts.Now().UnixNano()-t < int64(l.opts.DedupWindow)
}

// Append writes r and returns once it is on disk. On error nothing of r
// remains in the log: the caller must not acknowledge the batch.
func (l *Log) Append(r Record) error {
	body := encodeBatch(r)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.maybeRotateLocked(); err != nil {
		return err
	}
	if err := l.writeLocked(kindBatch, body, l.opts.Sync); err != nil {
		return err
	}
	l.noteLocked(l.segs[len(l.segs)-1], r)
	return nil
}

// noteLocked records what segment s now holds of r: the windows it feeds,
// its batch id (also in the seen set) and its receive time.
func (l *Log) noteLocked(s *segment, r Record) {
	for _, rt := range r.Routes {
		s.open[rt.WindowID] = struct{}{}
	}
	rn := r.Received.UnixNano()
	if r.BatchID != "" {
		s.batches[r.BatchID] = rn
		l.seen[r.BatchID] = rn
	}
	s.lastReceived = max(s.lastReceived, rn)
}

// Committed records that window id is stored downstream. Segments whose
// windows are all committed are deleted. The marker is not synced: if it is
// lost, replay emits the window again under the same id and the exporter
// drops the repeat.
func (l *Log) Committed(windowID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	referenced := false
	for _, s := range l.segs {
		if _, ok := s.open[windowID]; ok {
			delete(s.open, windowID)
			referenced = true
		}
	}
	if !referenced {
		return nil
	}
	if err := l.writeLocked(kindCommitted, []byte(windowID), false); err != nil {
		return err
	}
	return l.collectLocked()
}

// LastReceived is the latest Received of any record on disk at Open, or in
// the newest deleted segment (from seen.log); zero when the log is new.
func (l *Log) LastReceived() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats.LastReceived
}

// Expire forgets batch ids older than the dedup window.
func (l *Log) Expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	cut := l.opts.Now().UnixNano() - int64(l.opts.DedupWindow)
	for id, t := range l.seen {
		if t < cut {
			delete(l.seen, id)
		}
	}
}

// Close closes the files. Uncommitted records stay for the next Open.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	if l.cur != nil {
		errs = append(errs, l.cur.Close())
		l.cur = nil
	}
	if l.seenOut != nil {
		errs = append(errs, l.seenOut.Close())
		l.seenOut = nil
	}
	return errors.Join(errs...)
}

// writeLocked appends one record to the current segment. A failed or short
// write is cut off again so the segment never holds half a record
// followed by good ones.
func (l *Log) writeLocked(kind byte, body []byte, sync bool) error {
	if l.cur == nil {
		return errors.New("write-ahead log is closed")
	}
	n := 1 + len(body)
	l.buf = l.buf[:0]
	l.buf = binary.LittleEndian.AppendUint32(l.buf, uint32(n))
	crc := crc32.Update(crc32.Checksum([]byte{kind}, castagnoli), castagnoli, body)
	l.buf = binary.LittleEndian.AppendUint32(l.buf, crc)
	l.buf = append(l.buf, kind)
	l.buf = append(l.buf, body...)
	_, err := l.cur.Write(l.buf)
	if err == nil && sync {
		err = l.cur.Sync()
	}
	if err != nil {
		if terr := l.cur.Truncate(l.curSize); terr != nil {
			err = errors.Join(err, fmt.Errorf("cut the partial record off again: %w", terr))
		}
		_, _ = l.cur.Seek(l.curSize, io.SeekStart)
		return fmt.Errorf("write-ahead log %s: %w", l.cur.Name(), err)
	}
	l.curSize += int64(len(l.buf))
	return nil
}

func (l *Log) maybeRotateLocked() error {
	if l.curSize < l.opts.SegmentBytes && l.opts.Now().Sub(l.curOpened) < l.opts.SegmentAge {
		return nil
	}
	if err := l.rotateLocked(); err != nil {
		return err
	}
	return l.collectLocked()
}

func (l *Log) rotateLocked() error {
	var n uint64 = 1
	if len(l.segs) > 0 {
		n = l.segs[len(l.segs)-1].n + 1
	}
	path := filepath.Join(l.dir, fmt.Sprintf("%s%016d%s", segPrefix, n, segSuffix))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("start write-ahead log segment: %w", err)
	}
	if err := syncDir(l.dir); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return err
	}
	if l.cur != nil {
		_ = l.cur.Close()
	}
	l.cur, l.curSize, l.curOpened = f, 0, l.opts.Now()
	l.segs = append(l.segs, &segment{n: n, path: path, open: map[string]struct{}{}, batches: map[string]int64{}})
	return nil
}

// collectLocked deletes the segments, other than the current one, whose
// windows are all committed, after saving their batch ids to seen.log.
func (l *Log) collectLocked() error {
	keep := l.segs[:0]
	var gone []*segment
	for i, s := range l.segs {
		if i < len(l.segs)-1 && len(s.open) == 0 {
			gone = append(gone, s)
			continue
		}
		keep = append(keep, s)
	}
	if len(gone) == 0 {
		return nil
	}
	if err := l.saveSeenLocked(gone); err != nil {
		l.segs = append(keep, gone...) // nothing deleted; try again later
		sort.Slice(l.segs, func(i, j int) bool { return l.segs[i].n < l.segs[j].n })
		return err
	}
	var errs []error
	for _, s := range gone {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("delete committed write-ahead log segment: %w", err))
		}
	}
	l.segs = keep
	return errors.Join(errs...)
}

// saveSeenLocked appends the batch ids of segments about to be deleted, and
// the latest receive time, to seen.log and syncs it.
func (l *Log) saveSeenLocked(segs []*segment) error {
	if l.seenOut == nil {
		f, err := os.OpenFile(filepath.Join(l.dir, seenFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("open %s: %w", seenFile, err)
		}
		l.seenOut = f
	}
	var b strings.Builder
	var last int64
	for _, s := range segs {
		for id, t := range s.batches {
			fmt.Fprintf(&b, "%d %s\n", t, strconv.Quote(id))
		}
		last = max(last, s.lastReceived)
	}
	if last > 0 {
		fmt.Fprintf(&b, "%d\n", last)
	}
	if b.Len() == 0 {
		return nil
	}
	if _, err := l.seenOut.WriteString(b.String()); err != nil {
		return fmt.Errorf("write %s: %w", seenFile, err)
	}
	if err := l.seenOut.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", seenFile, err)
	}
	return nil
}

// loadSeen reads seen.log, keeps the ids inside the dedup window and
// rewrites the file with just those (so it stays small).
func (l *Log) loadSeen() error {
	path := filepath.Join(l.dir, seenFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", seenFile, err)
	}
	cut := l.opts.Now().UnixNano() - int64(l.opts.DedupWindow)
	var last int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		ts, rest, hasID := strings.Cut(line, " ")
		t, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			continue // a torn last line
		}
		last = max(last, t)
		if !hasID || t < cut {
			continue
		}
		if id, err := strconv.Unquote(rest); err == nil {
			l.seen[id] = t
		}
	}
	_ = f.Close()
	if last > 0 {
		l.stats.LastReceived = time.Unix(0, last)
	}
	// Rewrite atomically: temp file, sync, rename.
	tmp := path + ".tmp"
	var b strings.Builder
	for id, t := range l.seen {
		fmt.Fprintf(&b, "%d %s\n", t, strconv.Quote(id))
	}
	if last > 0 {
		fmt.Fprintf(&b, "%d\n", last)
	}
	if err := writeFileSync(tmp, []byte(b.String())); err != nil {
		return fmt.Errorf("compact %s: %w", seenFile, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("compact %s: %w", seenFile, err)
	}
	return syncDir(l.dir)
}

func (l *Log) loadSegments() error {
	entries, err := os.ReadDir(l.dir)
	if err != nil {
		return fmt.Errorf("read write-ahead log directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, segPrefix) || !strings.HasSuffix(name, segSuffix) {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, segPrefix), segSuffix), 10, 64)
		if err != nil {
			continue
		}
		l.segs = append(l.segs, &segment{n: n, path: filepath.Join(l.dir, name), open: map[string]struct{}{}, batches: map[string]int64{}})
	}
	sort.Slice(l.segs, func(i, j int) bool { return l.segs[i].n < l.segs[j].n })
	for _, s := range l.segs {
		if err := l.readSegment(s); err != nil {
			return err
		}
		l.stats.Segments++
	}
	// Committed markers may come in a later segment than the records.
	for _, s := range l.segs {
		for id := range s.open {
			if _, done := l.committed[id]; done {
				delete(s.open, id)
			}
		}
	}
	return nil
}

func (l *Log) readSegment(s *segment) error {
	f, err := os.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open write-ahead log segment: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat write-ahead log segment: %w", err)
	}
	size := info.Size()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	var hdr [headerBytes]byte
	for off < size {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			break
		}
		n := int64(binary.LittleEndian.Uint32(hdr[:4]))
		crc := binary.LittleEndian.Uint32(hdr[4:])
		if n < 1 || n > maxRecordBytes || off+headerBytes+n > size {
			break
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			break
		}
		if crc32.Checksum(body, castagnoli) != crc {
			break
		}
		if err := l.apply(s, body[0], body[1:]); err != nil {
			break
		}
		off += headerBytes + n
	}
	if off < size {
		// Only the newest segment was being written when the collector
		// died: a bad tail there is a torn, never-acknowledged append.
		// Anywhere else it is damage, reported as corrupt.
		if l.isLastSegment(s) {
			l.stats.TornBytes += size - off
		} else {
			l.stats.CorruptBytes += size - off
		}
		if err := f.Truncate(off); err != nil {
			return fmt.Errorf("truncate torn write-ahead log record: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync write-ahead log segment: %w", err)
		}
	}
	return nil
}

func (l *Log) isLastSegment(s *segment) bool { return len(l.segs) > 0 && l.segs[len(l.segs)-1] == s }

func (l *Log) apply(s *segment, kind byte, body []byte) error {
	switch kind {
	case kindCommitted:
		l.committed[string(body)] = struct{}{}
		return nil
	case kindBatch:
		r, err := decodeBatch(body)
		if err != nil {
			return err
		}
		l.noteLocked(s, r)
		if r.Received.After(l.stats.LastReceived) {
			l.stats.LastReceived = r.Received
		}
		l.stats.Records++
		l.replay = append(l.replay, r)
		return nil
	default:
		return fmt.Errorf("unknown record kind %d", kind)
	}
}

func encodeBatch(r Record) []byte {
	b := make([]byte, 0, 64+len(r.Payload))
	b = binary.AppendVarint(b, r.Received.UnixNano())
	b = appendString(b, r.BatchID)
	b = binary.AppendUvarint(b, uint64(len(r.Routes)))
	for _, rt := range r.Routes {
		b = binary.AppendVarint(b, rt.Start)
		b = appendString(b, rt.WindowID)
	}
	b = binary.AppendUvarint(b, uint64(len(r.Payload)))
	return append(b, r.Payload...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("record body too short")

func decodeBatch(b []byte) (Record, error) {
	var r Record
	received, n := binary.Varint(b)
	if n <= 0 {
		return r, errShort
	}
	b = b[n:]
	r.Received = time.Unix(0, received)
	var s string
	var err error
	if s, b, err = readString(b); err != nil {
		return r, err
	}
	r.BatchID = s
	nr, n := binary.Uvarint(b)
	if n <= 0 || nr > uint64(len(b)) {
		return r, errShort
	}
	b = b[n:]
	r.Routes = make([]Route, 0, nr)
	for i := uint64(0); i < nr; i++ {
		start, n := binary.Varint(b)
		if n <= 0 {
			return r, errShort
		}
		b = b[n:]
		if s, b, err = readString(b); err != nil {
			return r, err
		}
		r.Routes = append(r.Routes, Route{Start: start, WindowID: s})
	}
	np, n := binary.Uvarint(b)
	if n <= 0 || np != uint64(len(b)-n) {
		return r, errShort
	}
	r.Payload = b[n:]
	return r, nil
}

func readString(b []byte) (string, []byte, error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return "", nil, errShort
	}
	return string(b[n : n+int(l)]), b[n+int(l):], nil
}

func writeFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a created, renamed or deleted name durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
