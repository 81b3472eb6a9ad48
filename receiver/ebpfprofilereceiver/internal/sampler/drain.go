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
	// UserLeafRet is the word at the user stack pointer when the samples
	// were taken (0 when unreadable or there is no user stack): the return
	// address into the leaf's caller while the leaf has no frame of its own
	// (see symbolize.Symbolizer.RecoverLeafCaller).
	UserLeafRet uint64
	// UserUnwind says how UserStack was unwound and why it ended.
	UserUnwind StackUnwind
	Count      uint64
}

// Stats counts what happened to samples in one interval. Every sample is in
// Samples; the non-idle ones are either in a Sample's Count or in
// LostMapFull, so sum(Count) == Samples - Idle - LostMapFull.
type Stats struct {
	Samples     uint64 // all samples taken, idle included
	Idle        uint64 // pid 0: the CPU was idle; not recorded
	LostMapFull uint64 // dropped: MaxUniqueKeys distinct keys already held
	// Lost means the stacks map was full; the sample is counted without
	// that stack. Missing means there was none to take (kernel thread for
	// user stacks, user mode for kernel stacks) or it could not be read.
	UserStackLost      uint64
	UserStackMissing   uint64
	KernelStackLost    uint64
	KernelStackMissing uint64
	LostEvents         uint64 // lifecycle events dropped: ring buffer full (an announcement is tried again, and counted again, at the process's next sample)
	// Traced samples found a trace context (goroutine or thread); they
	// carry non-zero TraceID/SpanID.
	Traced uint64
	// DWARF user stacks were unwound with unwind tables.
	DWARF uint64
	// VMALookups frames of such stacks lay outside the mappings user
	// space gave their process and were looked up in its memory map;
	// VMATables of them found a loaded table (a library the process
	// mapped since it was read, or before: a short-lived program's).
	VMALookups, VMATables uint64
	// MappedFiles of such frames were found instead in the list of the
	// executable files the process mapped, kept as it mapped them (no
	// memory-map look-up).
	MappedFiles uint64
}

func (s *Stats) add(o cpuProfileSampleStats) {
	s.Samples += o.Samples
	s.Idle += o.Idle
	s.LostMapFull += o.LostMapFull
	s.UserStackLost += o.UserStackLost
	s.UserStackMissing += o.UserStackMissing
	s.KernelStackLost += o.KernelStackLost
	s.KernelStackMissing += o.KernelStackMissing
	s.LostEvents += o.EventsLost
	s.Traced += o.Traced
	s.DWARF += o.Dwarf
	s.VMALookups += o.VmaLookups
	s.VMATables += o.VmaTables
	s.MappedFiles += o.MappedLookups
}

// drainScratch holds buffers reused across drains; only the returned
// Samples and their stacks are allocated per drain.
type drainScratch struct {
	keys      []cpuProfileSampleKey
	counts    []uint64
	perCPU    []cpuProfileSampleStats
	zeroStats []cpuProfileSampleStats
	stackKeys []uint64               // one chunk of a stacks map
	stackVals []cpuProfileStackTrace // one chunk of a stacks map
	frames    []uint64               // every distinct stack, back to back
	spans     map[uint64]span        // stack hash -> its frames
	noBatch   bool                   // kernel lacks batch ops for hash maps
}

// stackChunk is how many stacks one batch call moves: 128 KiB of buffer
// instead of one as large as the map.
const stackChunk = 128

type span struct {
	off, n  int32
	leafRet uint64
	unwind  StackUnwind
}

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
	st, err := s.readStats(s.objs.Stats, set)
	if err != nil {
		return Batch{}, err
	}
	return s.readMaps(st, s.sets[set].counts, s.sets[set].stacks)
}

// readMaps moves every key of counts and every stack of stacks out of the
// kernel (leaving both empty) and pairs them up; keys refer to stacks by
// hash.
func (s *Sampler) readMaps(st Stats, counts, stacks *ebpf.Map) (Batch, error) {
	b := Batch{Stats: st}
	d := &s.drain
	n, err := s.readCounts(counts)
	if err != nil {
		return b, err
	}
	if d.spans == nil {
		d.spans = make(map[uint64]span)
	}
	clear(d.spans)
	d.frames = d.frames[:0]
	if err := s.readStacks(stacks); err != nil {
		return b, err
	}

	// Two allocations per drain: the samples and one array for all frames.
	frames := make([]uint64, len(d.frames))
	copy(frames, d.frames)
	stackOf := func(hash uint64) []uint64 {
		sp, ok := d.spans[hash]
		if hash == 0 || !ok || sp.n == 0 {
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
		smp.UserStack = stackOf(k.UserStack)
		if smp.UserStack != nil {
			sp := d.spans[k.UserStack]
			smp.UserLeafRet, smp.UserUnwind = sp.leafRet, sp.unwind
		}
		smp.KernelStack = stackOf(k.KernelStack)
		// A hash that resolves to nothing means the frames are gone; count
		// it as missing so the numbers still add up.
		if k.UserStack != 0 && smp.UserStack == nil {
			b.Stats.UserStackMissing += smp.Count
		}
		if k.KernelStack != 0 && smp.KernelStack == nil {
			b.Stats.KernelStackMissing += smp.Count
		}
	}
	return b, nil
}

// readStats sums the per-CPU stats at index set of m and zeroes them.
func (s *Sampler) readStats(m *ebpf.Map, set uint32) (Stats, error) {
	d := &s.drain
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return Stats{}, fmt.Errorf("drain: possible CPUs: %w", err)
	}
	if len(d.perCPU) != ncpu {
		d.perCPU = make([]cpuProfileSampleStats, ncpu)
		d.zeroStats = make([]cpuProfileSampleStats, ncpu)
	}
	if err := m.Lookup(set, d.perCPU); err != nil {
		return Stats{}, fmt.Errorf("drain: read stats: %w", err)
	}
	var st Stats
	for _, c := range d.perCPU {
		st.add(c)
	}
	if err := m.Update(set, d.zeroStats, ebpf.UpdateExist); err != nil {
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

// readStacks moves every stack of a stacks map into d.frames and d.spans,
// leaving the map empty. The set is quiescent, so reading and deleting in
// chunks is consistent.
func (s *Sampler) readStacks(m *ebpf.Map) error {
	d := &s.drain
	if d.stackKeys == nil {
		d.stackKeys = make([]uint64, stackChunk)
		d.stackVals = make([]cpuProfileStackTrace, stackChunk)
	}
	add := func(hash uint64, t *cpuProfileStackTrace) {
		n := min(int(t.Len), len(t.Ips))
		// A frame-pointer walk can end on a zero return address (a frame
		// the loader or libc start code left unterminated): not a frame.
		for n > 0 && t.Ips[n-1] == 0 {
			n--
		}
		d.spans[hash] = span{off: int32(len(d.frames)), n: int32(n), leafRet: t.LeafRet, unwind: stackUnwind(t.Flags, t.End)}
		d.frames = append(d.frames, t.Ips[:n]...)
	}
	if !d.noBatch {
		var cursor ebpf.MapBatchCursor
		for {
			n, err := m.BatchLookupAndDelete(&cursor, d.stackKeys, d.stackVals, nil)
			for i := range n {
				add(d.stackKeys[i], &d.stackVals[i])
			}
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				return nil
			}
			if errors.Is(err, ebpf.ErrNotSupported) {
				d.noBatch = true
				break
			}
			if err != nil {
				return fmt.Errorf("drain: read stacks: %w", err)
			}
			if n == 0 {
				return nil
			}
		}
	}
	// Fallback for kernels without batch operations.
	var hash uint64
	it := m.Iterate()
	for it.Next(&hash, &d.stackVals[0]) {
		add(hash, &d.stackVals[0])
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("drain: read stacks: %w", err)
	}
	for h := range d.spans {
		if err := m.Delete(h); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("drain: clear stacks: %w", err)
		}
	}
	return nil
}
