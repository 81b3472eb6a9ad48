package ebpfprofilereceiver

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/hotspot"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// TestInterpretedEntryOutsideAJVM: a user stack's word with bit 63 set is
// an interpreted Java frame only in a JVM, whose walk puts it there. In any
// other process it is a frame-pointer walk's stray value: it is not named
// Interpreter, and no code cache is looked for (a process without
// libjvm.so was counted as a JVM whose code cache could not be read).
func TestInterpretedEntryOutsideAJVM(t *testing.T) {
	r, err := newReceiver(receivertest.NewNopSettings(typeStr), createDefaultConfig(), new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	proc := &processEntry{snapshot: &symbolize.Process{PID: os.Getpid(), Mappings: []symbolize.Mapping{{Start: 0x400000, Limit: 0x401000, Path: "/usr/bin/app"}}}}
	stray := uint64(1)<<63 | 5<<47 | 0x7f0000001000
	frames := r.nameJITFrames(proc, []profilebuilder.Frame{{Address: stray}}, time.Now())
	if len(frames) != 1 || frames[0].Function != "" || frames[0].Address != stray || frames[0].Kind == profilebuilder.JIT {
		t.Errorf("frame of a stray word in a process that is no JVM: %+v", frames)
	}
	if j := proc.jit.Load(); j != nil {
		if j.code.tries != 0 || j.code.failed {
			t.Errorf("a code cache was looked for: %d tries, failed %v", j.code.tries, j.code.failed)
		}
		j.close()
	}
}

// TestJavaFramesSeenKeepTwoGenerations: the names of a JVM's frames read
// while it ran are bounded (two generations of maxJavaFramesSeen), and a
// frame the drains keep naming stays when the newer generation fills and
// the older one goes.
func TestJavaFramesSeenKeepTwoGenerations(t *testing.T) {
	var h hotSpotCode
	name := func(k uint64) []hotspot.Frame { return []hotspot.Frame{{Function: fmt.Sprint("m", k)}} }
	const hot = 1 << 40 // named at every drain
	for k := range uint64(3 * maxJavaFramesSeen) {
		h.remember(k, name(k), time.Time{})
		if k%1000 == 0 {
			h.remember(hot, name(hot), time.Time{})
		}
	}
	if n := h.seen.len(); n > 2*maxJavaFramesSeen {
		t.Errorf("%d names kept, want at most %d", n, 2*maxJavaFramesSeen)
	}
	if f, ok := h.remembered(hot); !ok || f.frames[0].Function != fmt.Sprint("m", uint64(hot)) {
		t.Errorf("the frame the drains keep naming: %v %v", f, ok)
	}
	last := uint64(3*maxJavaFramesSeen - 1)
	if f, ok := h.remembered(last); !ok || f.frames[0].Function != fmt.Sprint("m", last) {
		t.Errorf("the last frame reported: %v %v", f, ok)
	}
	if _, ok := h.remembered(0); ok {
		t.Error("the first frame, two generations back, is still kept")
	}
}

// TestJavaFrameNamedFromItsReport: a JVM's frame the kernel first reported
// in the interval being drained is named from that report's read, made
// within milliseconds of its first sample, not from the JVM's memory at
// the drain (where the JIT may have put other code since); one reported in
// an earlier interval is read again (here, from a process that is no JVM:
// not named).
func TestJavaFrameNamedFromItsReport(t *testing.T) {
	r, err := newReceiver(receivertest.NewNopSettings(typeStr), createDefaultConfig(), new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	proc := &processEntry{snapshot: &symbolize.Process{PID: os.Getpid()}}
	j := proc.jitFor(os.Getpid())
	defer j.close()
	drain := time.Now()
	j.code.mu.Lock()
	j.code.remember(0x1000, []hotspot.Frame{{Function: "int Hot.mix(int)"}}, drain.Add(-time.Second))
	j.code.remember(0x2000, []hotspot.Frame{{Function: "int Hot.old(int)"}}, drain.Add(-time.Hour))
	j.code.mu.Unlock()
	if f, ok := r.nameHotSpotCode(proc, j, 0x1000, drain); !ok || f[0].Function != "int Hot.mix(int)" {
		t.Errorf("a frame reported in this interval: %v %v", f, ok)
	}
	if f, ok := r.nameHotSpotCode(proc, j, 0x2000, drain); ok {
		t.Errorf("a frame reported an hour ago was not read again: %v", f)
	}
}
