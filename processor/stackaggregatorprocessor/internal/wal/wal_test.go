package wal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func openLog(t *testing.T, dir string, c *clock) *Log {
	t.Helper()
	l, err := Open(dir, Options{SegmentAge: time.Minute, DedupWindow: time.Hour, Sync: true, Now: c.now})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

func replayAll(t *testing.T, l *Log) []Record {
	t.Helper()
	var out []Record
	if err := l.Replay(func(r Record) error { out = append(out, r); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, segPrefix+"*"+segSuffix))
	return m
}

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func rec(i int, window string) Record {
	return Record{
		Received: t0.Add(time.Duration(i) * time.Second),
		BatchID:  fmt.Sprintf("agent-%d", i),
		Routes:   []Route{{Start: t0.UnixNano(), WindowID: window}},
		Payload:  bytes.Repeat([]byte{byte(i)}, 100+i),
	}
}

func TestRecordsSurviveReopenInOrderUntilCommitted(t *testing.T) {
	dir, c := t.TempDir(), &clock{t0}
	l := openLog(t, dir, c)
	for i := range 3 {
		if err := l.Append(rec(i, "w1")); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Append(rec(3, "w2")); err != nil {
		t.Fatal(err)
	}
	// No Close: the process died.
	l2 := openLog(t, dir, c)
	got := replayAll(t, l2)
	if len(got) != 4 {
		t.Fatalf("replayed %d records, want 4", len(got))
	}
	for i, r := range got {
		want := rec(i, "w1")
		if i == 3 {
			want = rec(3, "w2")
		}
		if !r.Received.Equal(want.Received) || r.BatchID != want.BatchID || !bytes.Equal(r.Payload, want.Payload) ||
			len(r.Routes) != 1 || r.Routes[0] != want.Routes[0] {
			t.Fatalf("record %d = %+v, want %+v", i, r, want)
		}
	}
	if !l2.Seen("agent-2") || l2.Seen("agent-9") {
		t.Fatal("batch ids of replayed records must be seen, others not")
	}
	if got := l2.LastReceived(); !got.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("LastReceived = %v", got)
	}
	// w1 is stored downstream: its records are not replayed again, w2's are.
	if err := l2.Committed("w1"); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	got = replayAll(t, openLog(t, dir, c))
	if len(got) != 1 || got[0].BatchID != "agent-3" {
		t.Fatalf("after w1 committed replayed %+v, want agent-3 only", got)
	}
}

func TestCommittedSegmentsAreDeletedAndTheirBatchIDsKept(t *testing.T) {
	dir, c := t.TempDir(), &clock{t0}
	l := openLog(t, dir, c)
	if err := l.Append(rec(1, "w1")); err != nil {
		t.Fatal(err)
	}
	c.t = c.t.Add(2 * time.Minute) // the next append starts a new segment
	if err := l.Append(rec(2, "w2")); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 2 {
		t.Fatalf("%d segments, want 2", n)
	}
	if err := l.Committed("w1"); err != nil {
		t.Fatal(err)
	}
	if n := len(segments(t, dir)); n != 1 {
		t.Fatalf("%d segments after w1 committed, want 1 (the current)", n)
	}
	l.Close()
	l2 := openLog(t, dir, c)
	if !l2.Seen("agent-1") {
		t.Fatal("a batch whose segment was deleted must still be recognised (seen.log)")
	}
	if got := replayAll(t, l2); len(got) != 1 || got[0].BatchID != "agent-2" {
		t.Fatalf("replayed %+v, want agent-2", got)
	}
	// Past the dedup window ids are forgotten, on disk and in memory.
	c.t = c.t.Add(2 * time.Hour)
	l2.Expire()
	if l2.Seen("agent-2") {
		t.Fatal("agent-2 still seen past the dedup window")
	}
	l2.Close()
	if openLog(t, dir, c).Seen("agent-1") {
		t.Fatal("agent-1 still seen past the dedup window after reopen")
	}
}

func TestTornTailIsCutAndEarlierRecordsKept(t *testing.T) {
	dir, c := t.TempDir(), &clock{t0}
	l := openLog(t, dir, c)
	for i := range 2 {
		if err := l.Append(rec(i, "w1")); err != nil {
			t.Fatal(err)
		}
	}
	seg := segments(t, dir)[0]
	whole, _ := os.ReadFile(seg)
	// A third append that got only part way to disk.
	if err := l.Append(rec(2, "w1")); err != nil {
		t.Fatal(err)
	}
	full, _ := os.ReadFile(seg)
	torn := len(full) - len(whole) - 20
	if err := os.WriteFile(seg, full[:len(whole)+torn], 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, dir, c)
	if st := l2.Stats(); st.TornBytes != int64(torn) || st.CorruptBytes != 0 || st.Records != 2 {
		t.Fatalf("stats %+v, want 2 records and %d torn bytes", st, torn)
	}
	if got := replayAll(t, l2); len(got) != 2 {
		t.Fatalf("replayed %d, want 2", len(got))
	}
	if after, _ := os.ReadFile(seg); !bytes.Equal(after, whole) {
		t.Fatal("the torn record was not cut off the segment")
	}
	// The log goes on after the cut.
	if err := l2.Append(rec(5, "w1")); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	if got := replayAll(t, openLog(t, dir, c)); len(got) != 3 {
		t.Fatalf("after append past the cut replayed %d, want 3", len(got))
	}
}

func TestDamageInsideAnOlderSegmentIsReported(t *testing.T) {
	dir, c := t.TempDir(), &clock{t0}
	l := openLog(t, dir, c)
	for i := range 3 {
		if err := l.Append(rec(i, "w1")); err != nil {
			t.Fatal(err)
		}
	}
	c.t = c.t.Add(2 * time.Minute)
	if err := l.Append(rec(3, "w2")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	first := segments(t, dir)[0]
	b, _ := os.ReadFile(first)
	b[len(b)/2] ^= 0xff // a flipped byte in the middle of the old segment
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}
	l2 := openLog(t, dir, c)
	st := l2.Stats()
	if st.CorruptBytes == 0 || st.TornBytes != 0 {
		t.Fatalf("stats %+v: damage in an older segment must count as corrupt", st)
	}
	got := replayAll(t, l2)
	var ids []string
	for _, r := range got {
		ids = append(ids, r.BatchID)
	}
	// Records before the damage and in later segments are kept.
	if strings.Join(ids, ",") != "agent-0,agent-3" {
		t.Fatalf("replayed %v, want agent-0,agent-3", ids)
	}
}
