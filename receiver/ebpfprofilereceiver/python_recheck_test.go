//go:build linux

package ebpfprofilereceiver

import (
	"debug/elf"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/python/pythontest"
)

// TestAReportedCodeObjectLeadsToARecheck: a code object freed and replaced
// by another at the same address is not reported again by the kernel, but
// the code objects compiled with the new one are, and their reports make
// the receiver check its cache again (at once, or at the end of
// codeRecheckEvery after the last check), so that the process's frames are
// named after the new one even when it exits before the drain (a site
// module's top-level code at startup, then the script's functions in its
// memory: TestPythonFramesOfAnExitedProcess once named the script's timed
// after a module's <module>).
func TestAReportedCodeObjectLeadsToARecheck(t *testing.T) {
	const py = "/usr/bin/python3.11"
	f, err := elf.Open(py)
	if err != nil {
		t.Fatalf("Debian's python3.11 is needed: %v", err)
	}
	in, err := python.Inspect(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := pythontest.StartReplacer(t, py)
	// Debian's interpreter is not position-independent: no load bias.
	proc := &pythonProcess{Process: python.NewProcess("/proc", r.PID, in, 0), in: in}
	frames := &pythonFrames{procs: map[int]*pythonProcess{r.PID: proc}}
	t.Cleanup(frames.close)
	name := func() string {
		frames.mu.Lock()
		defer frames.mu.Unlock()
		fr, err := proc.Resolve(r.First, 0, time.Time{}) // the cache, unchecked
		if err != nil {
			t.Fatal(err)
		}
		return fr.Function
	}

	frames.readCode(r.PID, r.First) // the kernel's report of first
	r.Replace(t)
	if got := name(); got != "first" {
		t.Fatalf("with no report since the replacement, %#x is named %q; want the cached first", r.First, got)
	}
	frames.readCode(r.PID, r.Make) // a report of another code object
	waitFor(t, 10*time.Second, "the cache to name the replacing code object second", func() bool { return name() == "second" })
}
