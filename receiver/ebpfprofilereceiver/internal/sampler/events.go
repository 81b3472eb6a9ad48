//go:build linux

package sampler

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/ringbuf"
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
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// ProcEvent is one process lifecycle event. PID is the thread-group id.
type ProcEvent struct {
	Kind EventKind
	PID  uint32
}

// lifecycleEventSize is sizeof(struct lifecycle_event).
const lifecycleEventSize = 8

// readEvents forwards ring buffer records to s.events until Close.
func (s *Sampler) readEvents() {
	defer s.wg.Done()
	defer close(s.events)
	var rec ringbuf.Record
	for {
		if err := s.rb.ReadInto(&rec); err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) {
				// Not expected; stop rather than spin on a broken reader.
				s.log.Error("lifecycle events stopped", "error", err)
			}
			return
		}
		if len(rec.RawSample) < lifecycleEventSize {
			continue
		}
		ev := ProcEvent{
			Kind: EventKind(binary.NativeEndian.Uint32(rec.RawSample[0:4])),
			PID:  binary.NativeEndian.Uint32(rec.RawSample[4:8]),
		}
		select {
		case s.events <- ev:
		case <-s.done:
			return
		}
	}
}
