//go:build linux

package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// EventKind says what happened to a process.
type EventKind uint8

// Values match enum event_kind in cpu_profile.bpf.c.
const (
	// EventSeen: the process was sampled for the first time (again after
	// an exec, or after the BPF side forgot it); a good moment to read
	// /proc/PID/maps. Exec, exit and maps-changed events come only for
	// processes announced this way.
	EventSeen EventKind = 1
	// EventExec: the process replaced its image; its mappings changed.
	EventExec EventKind = 2
	// EventExit: the thread-group leader exited; per-process state can go.
	EventExit EventKind = 3
	// EventMapsChanged: a sampled process's executable memory changed
	// since its last sample (the dynamic loader at start, dlopen, unloaded
	// code); its mappings are worth reading again.
	EventMapsChanged EventKind = 4
	// EventPythonCode: a code object (Code) was on a walked CPython
	// process's stack for the first time: read it now, while the process
	// lives, since its samples are symbolized only at the interval's end.
	EventPythonCode EventKind = 5
	// EventJavaFrame: a frame (Code) of a JVM walked with its code cache
	// (SetJVMUnwind) was on a stack for the first time: name it now, while
	// the JVM lives, since its samples are symbolized only at the
	// interval's end.
	EventJavaFrame EventKind = 6
	// EventV8Function: a JavaScript function (Code: its
	// SharedFunctionInfo, tagged) of a Node.js process walked with its V8
	// layout (SetV8) was on a stack for the first time: name it now,
	// while the process lives.
	EventV8Function EventKind = 7
)

func (k EventKind) String() string {
	switch k {
	case EventSeen:
		return "seen"
	case EventExec:
		return "exec"
	case EventExit:
		return "exit"
	case EventMapsChanged:
		return "maps_changed"
	case EventPythonCode:
		return "python_code"
	case EventJavaFrame:
		return "java_frame"
	case EventV8Function:
		return "v8_function"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// ProcEvent is one process lifecycle event. PID is the thread-group id.
type ProcEvent struct {
	Kind EventKind
	PID  uint32
	// StartTime is when the process started, in clock ticks after boot,
	// as field 22 of /proc/PID/stat gives it: with the PID it names one
	// process.
	StartTime uint64
	// Comm is the process's command name as the kernel had it at the
	// event (at most 15 bytes): the name of a process that exits before
	// its /proc files can be read.
	Comm string
	// Code is the code object's address (EventPythonCode), or the JVM's
	// frame (EventJavaFrame: an interpreted frame's entry, JavaInterpreted,
	// or a code address; a caller's is its call's, one before the return
	// address), or the JavaScript function's SharedFunctionInfo
	// (EventV8Function).
	Code uint64
	// CgroupID is the process's cgroup on the cgroup v2 hierarchy at the
	// event (the inode number of its directory; at an exec, the cgroup the
	// new image runs in): the container of a process that exits before
	// /proc/PID/cgroup can be read (cgroupattr.IDs). On a host with cgroup
	// v1 alone it is the root's.
	CgroupID uint64
	// PPID is the process's parent at the event: at an exec, the process
	// whose image a forked child ran until then (0: not known).
	PPID uint32
	// At is when the kernel sent the event, in ns on CLOCK_MONOTONIC
	// (MonotonicNow's clock).
	At uint64
}

// lifecycleEventSize is sizeof(struct lifecycle_event), and commOffset
// where its comm starts: taken from the type bpf2go generates from it, so
// that the two cannot drift apart.
const (
	lifecycleEventSize = int(unsafe.Sizeof(cpuProfileLifecycleEvent{}))
	commOffset         = int(unsafe.Offsetof(cpuProfileLifecycleEvent{}.Comm))
	commEnd            = commOffset + len(cpuProfileLifecycleEvent{}.Comm)
	codeOffset         = int(unsafe.Offsetof(cpuProfileLifecycleEvent{}.Code))
	cgroupOffset       = int(unsafe.Offsetof(cpuProfileLifecycleEvent{}.CgroupId))
	ppidOffset         = int(unsafe.Offsetof(cpuProfileLifecycleEvent{}.Ppid))
	atOffset           = int(unsafe.Offsetof(cpuProfileLifecycleEvent{}.AtNs))
)

// nsPerClockTick converts the kernel's start_boottime to /proc's clock
// ticks: USER_HZ is 100 on every architecture the agent runs on (x86-64,
// arm64), whatever the kernel's own HZ.
const nsPerClockTick = 1e9 / 100

// readEvents forwards ring buffer records to s.events until Close.
//
// It waits for records in the Go runtime's network poller (s.rbWait), not
// in the ring buffer reader's own blocking epoll_wait: a goroutine blocked in
// a system call keeps its processor from being idle, and the runtime's
// sysmon thread then polls every 20 µs to 10 ms until it takes the processor
// back, after up to 10 ms. A wait follows every batch of events, so on a
// node where processes start and exit all the time sysmon hardly slept: in
// 30 s of such churn the agent made 12,800-15,000 sysmon sleeps and
// 18,000-21,000 context switches this way, 3,100-3,500 and 7,800-8,400 with
// the wait in the poller.
func (s *Sampler) readEvents() {
	defer s.wg.Done()
	defer close(s.events)
	if s.rbWait == nil {
		s.readEventsBlocking()
		return
	}
	raw, err := s.rbWait.SyscallConn()
	if err != nil {
		s.log.Error("lifecycle events stopped", "error", err)
		return
	}
	// A deadline in the past: ReadInto reads what the ring holds and
	// returns os.ErrDeadlineExceeded instead of waiting.
	s.rb.SetDeadline(time.Unix(1, 0))
	var rec ringbuf.Record
	var stop error
	err = raw.Read(func(uintptr) bool {
		// Runs again each time the poller reports the ring readable; false
		// waits for that.
		for s.rb.AvailableBytes() > 0 {
			err := s.rb.ReadInto(&rec)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if err != nil {
				stop = err
				return true
			}
			if !s.forward(rec.RawSample) {
				return true
			}
		}
		return false
	})
	select {
	case <-s.done: // Close: the waiter or the ring closed
	default:
		// Not expected; stop rather than spin on a broken reader.
		s.log.Error("lifecycle events stopped", "error", errors.Join(stop, err))
	}
}

// readEventsBlocking is readEvents where the ring buffer cannot be waited
// for in the network poller: the reader's own blocking wait.
func (s *Sampler) readEventsBlocking() {
	var rec ringbuf.Record
	for {
		if err := s.rb.ReadInto(&rec); err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				// Not expected; stop rather than spin on a broken reader.
				s.log.Error("lifecycle events stopped", "error", err)
			}
			return
		}
		if !s.forward(rec.RawSample) {
			return
		}
	}
}

// forward decodes one record and hands it on; false once the sampler closes.
func (s *Sampler) forward(raw []byte) bool {
	if len(raw) < lifecycleEventSize {
		return true
	}
	ev := ProcEvent{
		Kind:      EventKind(binary.NativeEndian.Uint32(raw[0:4])),
		PID:       binary.NativeEndian.Uint32(raw[4:8]),
		StartTime: binary.NativeEndian.Uint64(raw[8:16]) / nsPerClockTick,
		Comm:      unix.ByteSliceToString(raw[commOffset:commEnd]),
		Code:      binary.NativeEndian.Uint64(raw[codeOffset : codeOffset+8]),
		CgroupID:  binary.NativeEndian.Uint64(raw[cgroupOffset : cgroupOffset+8]),
		PPID:      binary.NativeEndian.Uint32(raw[ppidOffset : ppidOffset+4]),
		At:        binary.NativeEndian.Uint64(raw[atOffset : atOffset+8]),
	}
	select {
	case s.events <- ev:
		return true
	case <-s.done:
		return false
	}
}

// newEventWaiter is eventWaiter; a test replaces it to run the fallback.
var newEventWaiter = eventWaiter

// eventWaiter is the ring buffer's map registered with the Go runtime's
// network poller (a non-blocking duplicate of its descriptor: the kernel
// reports a BPF ring buffer readable through poll), or nil when the poller
// does not take it.
func eventWaiter(m *ebpf.Map) *os.File {
	fd, err := unix.Dup(m.FD())
	if err != nil {
		return nil
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "lifecycle ring buffer")
	// Only a descriptor in the poller takes deadlines.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil
	}
	return f
}
