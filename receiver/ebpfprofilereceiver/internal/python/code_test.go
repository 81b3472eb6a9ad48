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
	r, p, name := startReplacer(t)
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

// TestAFreedCodeObjectKeepsItsNameUntilAnotherTakesItsAddress: a check that
// finds a cached code object's memory holding something else (it was freed:
// a module's top-level code after the import, any code object while the
// interpreter shuts down) keeps its name, as the samples the kernel took
// while it ran still need it, and looks again at the next check. Dropping
// it lost the name for good: the kernel reports an address once per
// process, so a code object that takes the address later (the script's
// hotB after a startup module's code) was never read, and a process that
// exited before the drain lost all its samples' frames of it (the likely
// cause, not reproduced, of a CI run of TestPythonFramesOfAnExitedProcess
// with hotB in none of its 162 samples).
func TestAFreedCodeObjectKeepsItsNameUntilAnotherTakesItsAddress(t *testing.T) {
	r, p, name := startReplacer(t)
	if got := name(); got != "first <first>" {
		t.Fatalf("code object at %#x read as %q, want first <first>", r.First, got)
	}
	r.ReplaceWithData(t)
	if n := p.Recheck(time.Now()); n != 1 {
		t.Fatalf("Recheck checked %d entries, want 1", n)
	}
	if got := name(); got != "first <first>" {
		t.Fatalf("with its memory holding a bytes object, %#x is named %q; want the freed first <first>", r.First, got)
	}
	// Not marked checked: the next check reads the address again.
	r.Replace(t)
	if n := p.Recheck(time.Now()); n != 1 {
		t.Fatalf("the second Recheck checked %d entries, want 1", n)
	}
	if got := name(); got != "second <second>" {
		t.Fatalf("after a code object took the address, %#x is named %q; want second <second>", r.First, got)
	}
	if p.Len() != 1 {
		t.Errorf("%d code objects cached, want 1", p.Len())
	}
}

// TestMakeRoomDropsFreedCodeObjectsFirst: a full cache drops the entries
// of freed code objects and keeps the live ones while that makes room.
func TestMakeRoomDropsFreedCodeObjectsFirst(t *testing.T) {
	p := &Process{codes: map[uint64]*codeInfo{}}
	add := func(code uint64, freed bool) {
		ci := &codeInfo{frame: Frame{Function: "f", File: "f.py"}, freed: freed}
		p.codes[code] = ci
		p.bytes += ci.size()
	}
	for i := range uint64(maxCachedCodes) {
		add(i, i%2 == 0)
	}
	p.makeRoom()
	if got, want := p.Len(), maxCachedCodes/2; got != want {
		t.Fatalf("%d entries kept, want the %d live ones", got, want)
	}
	for code, ci := range p.codes {
		if ci.freed {
			t.Fatalf("freed entry %d kept", code)
		}
	}
	if want := maxCachedCodes / 2 * p.codes[1].size(); p.bytes != want {
		t.Errorf("bytes %d after making room, want %d", p.bytes, want)
	}
	// Live entries only: all go.
	for i := range uint64(maxCachedCodes) {
		add(i, false)
	}
	p.makeRoom()
	if p.Len() != 0 || p.bytes != 0 {
		t.Errorf("a cache of live entries kept %d (%d bytes), want it emptied", p.Len(), p.bytes)
	}
}

// startReplacer runs pythontest's replacer under Debian's python3.11 and
// returns a Process of it and a func naming the code object at First from
// the cache.
func startReplacer(t *testing.T) (*pythontest.Replacer, *Process, func() string) {
	t.Helper()
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
	return r, p, func() string {
		t.Helper()
		fr, err := p.Resolve(r.First, 0, time.Time{}) // the cache, unchecked
		if err != nil {
			t.Fatal(err)
		}
		return fr.Function + " " + fr.File
	}
}
