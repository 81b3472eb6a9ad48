//go:build privileged

// Tests that need root: a full disk is a small tmpfs mounted for the test.

package wal

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/hotpath-dev/hotpath/internal/smalldisk"
)

// A full disk: Append fails, nothing of the record is left behind, and once
// space is back the log takes records again and replays exactly those.
func TestFullDiskFailsAppendAndLeavesNoPartialRecord(t *testing.T) {
	dir := smalldisk.Mount(t, 256<<10)
	c := &clock{t0}
	l := openLog(t, dir, c)
	big := func(i int) Record {
		r := rec(i, "w1")
		r.Payload = bytes.Repeat([]byte{'x'}, 40<<10)
		return r
	}
	var ok int
	var appendErr error
	for i := range 20 {
		if appendErr = l.Append(big(i)); appendErr != nil {
			break
		}
		ok++
	}
	if appendErr == nil {
		t.Fatal("appends to a full 256k tmpfs kept succeeding")
	}
	if !errors.Is(appendErr, syscall.ENOSPC) {
		t.Fatalf("append error %v, want ENOSPC in the chain", appendErr)
	}
	t.Logf("full disk after %d records: %v", ok, appendErr)
	if l.Seen(fmt.Sprintf("agent-%d", ok)) {
		t.Fatal("the refused batch's id was remembered; its resend would be dropped")
	}
	l.Close()
	l2 := openLog(t, dir, c)
	defer l2.Close()
	if st := l2.Stats(); st.TornBytes != 0 || st.CorruptBytes != 0 {
		t.Fatalf("the failed append left bytes behind: %+v", st)
	}
	got := replayAll(t, l2)
	if len(got) != ok {
		t.Fatalf("replayed %d records, want the %d acknowledged", len(got), ok)
	}
	for i := range ok {
		if got[i].BatchID != fmt.Sprintf("agent-%d", i) || len(got[i].Payload) != 40<<10 {
			t.Fatalf("record %d = %s (%d bytes), want agent-%d", i, got[i].BatchID, len(got[i].Payload), i)
		}
	}
}
