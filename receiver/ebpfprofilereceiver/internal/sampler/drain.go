//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Batch is what one Drain returns: the samples of one interval and the
// counters for exactly those samples. It is freshly allocated and owned by
// the caller (the sampler keeps no reference to it).
type Batch struct {
	Samples []Sample
	Stats   Stats
}

// Sample is one distinct (process, thread, stacks) key and how often it was
// sampled.
type Sample struct {
	PID, TID uint32
	// TraceID and SpanID are the trace context active when the samples
	// were taken (Config.TraceContext); zero when there was none.
	TraceID [16]byte
	SpanID  [8]byte
	// UserStack and KernelStack are instruction addresses, leaf first; nil
	// when the stack could not be taken (see Stats).
	UserStack   []uint64
	KernelStack []uint64
	Count       uint64
}

// Stats counts what happened to samples in one interval. Every sample is in
// Samples; the non-idle ones are either in a Sample's Count or in
// LostMapFull, so sum(Count) == Samples - Idle - LostMapFull.
type Stats struct {
	Samples     uint64 // all samples taken, idle included
	Idle        uint64 // pid 0: the CPU was idle; not recorded
	LostMapFull uint64 // dropped: MaxUniqueKeys distinct keys already held
	// A collision means another stack already holds the hash bucket; the
	// sample is counted without that stack. Missing means there was none to
	// take (kernel thread for user stacks, user mode for kernel stacks) or
	// it could not be read.
	UserStackCollisions   uint64
	UserStackMissing      uint64
	KernelStackCollisions uint64
	KernelStackMissing    uint64
	LostEvents            uint64 // lifecycle events dropped: ring buffer full
	// Traced samples found a trace context (goroutine or thread); they
	// carry non-zero TraceID/SpanID.
	Traced uint64
}

func (s *Stats) add(o cpuProfileSampleStats) {
	s.Samples += o.Samples
	s.Idle += o.Idle
	s.LostMapFull += o.LostMapFull
	s.UserStackCollisions += o.UserStackCollision
	s.UserStackMissing += o.UserStackMissing
	s.KernelStackCollisions += o.KernelStackCollision
	s.KernelStackMissing += o.KernelStackMissing
	s.LostEvents += o.EventsLost
	s.Traced += o.Traced
}

// drainScratch holds buffers reused across drains; only the returned
// Samples and their stacks are allocated per drain.
type drainScratch struct {
	keys      []cpuProfileSampleKey
	counts    []uint64
	perCPU    []cpuProfileSampleStats
	zeroStats []cpuProfileSampleStats
	raw       [maxStackDepth]uint64
	stackID   uint32         // passed by pointer: a boxed uint32 key would allocate
	frames    []uint64       // every distinct stack, back to back
	spans     map[int32]span // stack id -> its frames
	staleIDs  []uint32       // stack ids left over after reading
	noBatch   bool           // kernel lacks batch ops for hash maps
	noLAD     bool           // kernel lacks lookup-and-delete for stack maps
}

type span struct{ off, n int32 }

// Drain switches BPF to the other map set, waits until no program still
// writes the old set, then reads and clears it. Samples taken while Drain
// runs land in the new set and come with the next Drain.
func (s *Sampler) Drain() (Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Batch{}, errors.New("drain: sampler is closed")
	}
	old := s.active
	next := old ^ 1
	if err := s.objs.ActiveSet.Set(next); err != nil {
		return Batch{}, fmt.Errorf("drain: switch map set: %w", err)
	}
	s.active = next
	waitForRunningPrograms()
	return s.readSet(old)
}

// waitForRunningPrograms returns once every BPF program that may have read
// the old active_set has finished. perf_event and tp_btf programs run inside
// an RCU read-side section (preemption or interrupts off), so an RCU grace
// period is exactly the wait needed; membarrier(MEMBARRIER_CMD_GLOBAL) waits
// for one (synchronize_rcu). Where it is refused (nohz_full kernels), a
// sleep stands in: the programs run for microseconds, so 10 ms is ample
// unless the whole machine is stalled.
func waitForRunningPrograms() {
	const membarrierCmdGlobal = 1
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierCmdGlobal, 0, 0); errno == 0 {
		return
	}
	time.Sleep(10 * time.Millisecond)
}

func (s *Sampler) readSet(set uint32) (Batch, error) {
	var b Batch
	d := &s.drain
	st, err := s.readStats(set)
	if err != nil {
		return b, err
	}
	b.Stats = st

	n, err := s.readCounts(s.sets[set].counts)
	if err != nil {
		return b, err
	}

	// Read each referenced stack once (user and kernel stacks share the map
	// and so the id space), deleting as we go.
	stacks := s.sets[set].stacks
	if d.spans == nil {
		d.spans = make(map[int32]span)
	}
	clear(d.spans)
	d.frames = d.frames[:0]
	for i := range n {
		k := &d.keys[i]
		for _, id := range [2]int32{k.UserStackId, k.KernelStackId} {
			if id < 0 {
				continue
			}
			if _, ok := d.spans[id]; ok {
				continue
			}
			sp, err := s.readStack(stacks, uint32(id))
			if err != nil {
				return b, err
			}
			d.spans[id] = sp
		}
	}
	if err := s.clearStacks(stacks); err != nil {
		return b, err
	}

	// Two allocations per drain: the samples and one array for all frames.
	frames := make([]uint64, len(d.frames))
	copy(frames, d.frames)
	stackOf := func(id int32) []uint64 {
		sp, ok := d.spans[id]
		if id < 0 || !ok || sp.n == 0 {
			return nil
		}
		return frames[sp.off : sp.off+sp.n : sp.off+sp.n]
	}
	b.Samples = make([]Sample, n)
	for i := range n {
		k := &d.keys[i]
		smp := &b.Samples[i]
		smp.PID, smp.TID = k.Pid, k.Tid
		smp.TraceID, smp.SpanID = k.TraceId, k.SpanId
		smp.Count = d.counts[i]
		smp.UserStack = stackOf(k.UserStackId)
		smp.KernelStack = stackOf(k.KernelStackId)
		// A stack id that resolves to nothing means the frames are gone;
		// count it as missing so the numbers still add up.
		if k.UserStackId >= 0 && smp.UserStack == nil {
			b.Stats.UserStackMissing += smp.Count
		}
		if k.KernelStackId >= 0 && smp.KernelStack == nil {
			b.Stats.KernelStackMissing += smp.Count
		}
	}
	return b, nil
}

// readStats sums the per-CPU stats of one set and zeroes them.
func (s *Sampler) readStats(set uint32) (Stats, error) {
	d := &s.drain
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return Stats{}, fmt.Errorf("drain: possible CPUs: %w", err)
	}
	if len(d.perCPU) != ncpu {
		d.perCPU = make([]cpuProfileSampleStats, ncpu)
		d.zeroStats = make([]cpuProfileSampleStats, ncpu)
	}
	if err := s.objs.Stats.Lookup(set, d.perCPU); err != nil {
		return Stats{}, fmt.Errorf("drain: read stats: %w", err)
	}
	var st Stats
	for _, c := range d.perCPU {
		st.add(c)
	}
	if err := s.objs.Stats.Update(set, d.zeroStats, ebpf.UpdateExist); err != nil {
		return Stats{}, fmt.Errorf("drain: reset stats: %w", err)
	}
	return st, nil
}

// readCounts moves every key and count of a counts map into d.keys and
// d.counts, leaving the map empty. It returns the number of keys.
func (s *Sampler) readCounts(m *ebpf.Map) (int, error) {
	d := &s.drain
	if size := int(m.MaxEntries()); len(d.keys) < size {
		d.keys = make([]cpuProfileSampleKey, size)
		d.counts = make([]uint64, size)
	}
	if !d.noBatch {
		n, err := batchDrain(m, d.keys, d.counts)
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return n, err
		}
		d.noBatch = true
	}
	return iterDrain(m, d.keys, d.counts)
}

// batchDrain uses BPF_MAP_LOOKUP_AND_DELETE_BATCH. keys and counts hold
// max_entries, so one call normally returns everything.
func batchDrain(m *ebpf.Map, keys []cpuProfileSampleKey, counts []uint64) (int, error) {
	var cursor ebpf.MapBatchCursor
	total := 0
	for total < len(keys) {
		n, err := m.BatchLookupAndDelete(&cursor, keys[total:], counts[total:], nil)
		total += n
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return total, nil
		}
		if err != nil {
			return total, fmt.Errorf("drain: read counts: %w", err)
		}
		if n == 0 {
			break
		}
	}
	return total, nil
}

// iterDrain is the fallback for kernels without batch operations. The set
// is quiescent, so iterating and then deleting is consistent.
func iterDrain(m *ebpf.Map, keys []cpuProfileSampleKey, counts []uint64) (int, error) {
	n := 0
	it := m.Iterate()
	for n < len(keys) && it.Next(&keys[n], &counts[n]) {
		n++
	}
	if err := it.Err(); err != nil {
		return 0, fmt.Errorf("drain: read counts: %w", err)
	}
	for i := range n {
		if err := m.Delete(&keys[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return 0, fmt.Errorf("drain: clear counts: %w", err)
		}
	}
	return n, nil
}

// readStack appends one stack's frames (leaf first, up to the first zero)
// to d.frames and deletes it from the map.
func (s *Sampler) readStack(m *ebpf.Map, id uint32) (span, error) {
	d := &s.drain
	clear(d.raw[:])
	d.stackID = id
	var err error
	if !d.noLAD {
		err = m.LookupAndDelete(&d.stackID, &d.raw)
		if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, unix.EINVAL) {
			d.noLAD = true
		}
	}
	if d.noLAD {
		if err = m.Lookup(&d.stackID, &d.raw); err == nil {
			err = m.Delete(&d.stackID)
		}
	}
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return span{}, nil
	}
	if err != nil {
		return span{}, fmt.Errorf("drain: read stack %d: %w", id, err)
	}
	depth := 0
	for depth < len(d.raw) && d.raw[depth] != 0 {
		depth++
	}
	off := len(d.frames)
	d.frames = append(d.frames, d.raw[:depth]...)
	return span{off: int32(off), n: int32(depth)}, nil
}

// clearStacks deletes stacks no key referenced (their sample was lost to a
// full counts map) so the next interval starts with an empty stack map.
func (s *Sampler) clearStacks(m *ebpf.Map) error {
	d := &s.drain
	d.staleIDs = d.staleIDs[:0]
	var id uint32
	var next uint32
	var prev any // nil: start from the first key
	for {
		if err := m.NextKey(prev, &next); err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return fmt.Errorf("drain: list stale stacks: %w", err)
		}
		d.staleIDs = append(d.staleIDs, next)
		id = next
		prev = &id
	}
	for _, id := range d.staleIDs {
		if err := m.Delete(id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("drain: clear stack %d: %w", id, err)
		}
	}
	return nil
}
