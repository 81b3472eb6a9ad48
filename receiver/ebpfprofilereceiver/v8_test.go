package ebpfprofilereceiver

import (
	"os"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/nodev8"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// TestV8FunctionNamedAtTheDrain: a Node.js process's JavaScript frame (a
// stack entry with bit 62 and the function's SharedFunctionInfo) becomes
// its function, with no address, typed jit: named as it was read while the
// process ran (reported in this interval or an hour ago; the process has
// no memory to read here), else [unknown]. In a process without node's
// binary such a word is a frame-pointer walk's stray value, left as it is.
func TestV8FunctionNamedAtTheDrain(t *testing.T) {
	r, err := newReceiver(receivertest.NewNopSettings(typeStr), createDefaultConfig(), new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	proc := &processEntry{snapshot: &symbolize.Process{PID: os.Getpid(), Mappings: []symbolize.Mapping{{Start: 0x400000, Limit: 0x401000, Path: "/usr/bin/node"}}}}
	j := proc.jitFor(os.Getpid())
	defer j.close()
	drain := time.Now()
	j.v8.mu.Lock()
	j.v8.remember(0x1001, seenV8Function{f: nodev8.Function{Name: "hotA", File: "/srv/app.js", Line: 2}, reportedAt: drain.Add(-time.Second)})
	j.v8.remember(0x2001, seenV8Function{f: nodev8.Function{Name: "old", File: "/srv/app.js", Line: 9}, reportedAt: drain.Add(-time.Hour)})
	j.v8.mu.Unlock()
	entry := func(sfi uint64) uint64 { return 1<<62 | sfi }
	if _, ok := sampler.V8Function(entry(0x1001)); !ok {
		t.Fatal("the test's stack entry is not a V8 function's")
	}
	frames := r.nameJITFrames(proc, []profilebuilder.Frame{{Address: entry(0x1001)}, {Address: entry(0x2001)}, {Address: entry(0x3001)}}, drain)
	want := []profilebuilder.Frame{
		{Function: "hotA", File: "/srv/app.js", Line: 2, Kind: profilebuilder.JIT},
		{Function: "old", File: "/srv/app.js", Line: 9, Kind: profilebuilder.JIT},
		{Function: "[unknown]", Kind: profilebuilder.JIT},
	}
	for i := range want {
		if f := frames[i]; f.Function != want[i].Function || f.File != want[i].File || f.Line != want[i].Line || f.Kind != want[i].Kind || f.Address != 0 {
			t.Errorf("frame %d: %+v, want %+v", i, f, want[i])
		}
	}
	// In a process without node's binary, such a word is a stray value.
	other := &processEntry{snapshot: &symbolize.Process{PID: os.Getpid(), Mappings: []symbolize.Mapping{{Start: 0x400000, Limit: 0x401000, Path: "/usr/bin/app"}}}}
	if f := r.nameJITFrames(other, []profilebuilder.Frame{{Address: entry(0x1001)}}, drain); f[0].Function == "hotA" || f[0].Kind == profilebuilder.JIT {
		t.Errorf("a V8 entry in a process that is no Node.js: %+v", f[0])
	}
	if j := other.jit.Load(); j != nil {
		j.close()
	}
}

// TestV8FunctionsSeenKeepTwoGenerations: the names of a Node.js process's
// functions read while it ran are bounded (two generations of
// maxV8FunctionsSeen).
func TestV8FunctionsSeenKeepTwoGenerations(t *testing.T) {
	var v v8Functions
	for k := range uint64(3 * maxV8FunctionsSeen) {
		v.remember(k, seenV8Function{})
	}
	if n := v.seen.len(); n > 2*maxV8FunctionsSeen {
		t.Errorf("%d names kept, want at most %d", n, 2*maxV8FunctionsSeen)
	}
	if _, ok := v.remembered(3*maxV8FunctionsSeen - 1); !ok {
		t.Error("the last function reported is not kept")
	}
	if _, ok := v.remembered(0); ok {
		t.Error("the first function, two generations back, is still kept")
	}
}

// TestV8NotReadWithFramePointers: with unwinding: frame_pointer the kernel
// puts no function in a stack, so a Node.js process's layout and memory
// are not read, and its perf map's looks go on as before (a V8 process
// read counted as done looking).
func TestV8NotReadWithFramePointers(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Unwinding = UnwindingFramePointer
	r, err := newReceiver(receivertest.NewNopSettings(typeStr), cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	proc := &processEntry{snapshot: &symbolize.Process{PID: os.Getpid(), Mappings: []symbolize.Mapping{{Start: 0x400000, Limit: 0x401000, Path: "/usr/bin/node"}}}}
	r.procs = &processTable{procRoot: "/proc"}
	j := proc.jitFor(os.Getpid())
	defer j.close()
	r.openV8Early(proc, j)
	j.v8.mu.Lock()
	defer j.v8.mu.Unlock()
	if j.v8.namer != nil || j.v8.failed {
		t.Errorf("a Node.js process was read with unwinding: frame_pointer (memory open %v, failed %v)", j.v8.namer != nil, j.v8.failed)
	}
}
