//go:build linux

package python

import (
	"debug/elf"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python/pythontest"
)

// TestRecheckReadsACodeObjectReplacedAtTheSameAddress: a code object freed
// and replaced by another at the same address is named after the new one
// once the cache is checked again, and after the old one until then (the
// kernel reports an address once per process; a process that exited before
// the drain is named from the cache).
func TestRecheckReadsACodeObjectReplacedAtTheSameAddress(t *testing.T) {
	f, err := elf.Open(debianPython)
	if err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	in, err := Inspect(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := pythontest.StartReplacer(t, debianPython)
	// Debian's interpreter is not position-independent: no load bias.
	p := NewProcess("/proc", r.PID, in, 0)
	t.Cleanup(func() { _ = p.Close() })
	name := func() string {
		t.Helper()
		fr, err := p.Resolve(r.First, 0, time.Time{}) // the cache, unchecked
		if err != nil {
			t.Fatal(err)
		}
		return fr.Function + " " + fr.File
	}
	if got := name(); got != "first <first>" {
		t.Fatalf("code object at %#x read as %q, want first <first>", r.First, got)
	}
	r.Replace(t)
	if got := name(); got != "first <first>" {
		t.Fatalf("before a recheck, the cache names %#x %q; want the freed first <first>", r.First, got)
	}
	if n := p.Recheck(time.Now()); n != 1 {
		t.Fatalf("Recheck checked %d entries, want 1", n)
	}
	if got := name(); got != "second <second>" {
		t.Fatalf("after a recheck, %#x is named %q; want second <second>", r.First, got)
	}
	// Checked just now: a recheck of entries older than a minute reads
	// nothing.
	if n := p.Recheck(time.Now().Add(-time.Minute)); n != 0 {
		t.Errorf("Recheck of entries checked before a minute ago checked %d", n)
	}
}
