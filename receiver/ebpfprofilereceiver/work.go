package ebpfprofilereceiver

import (
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// workKind names the one-time work the agent does per process or per binary,
// as opposed to the work every sample costs.
type workKind string

const (
	workProcessRead workKind = "process_read" // /proc/PID/{stat,exe,environ,cgroup,maps} of a sampled process
	workSymbolTable workKind = "symbol_table" // reading a binary's symbols
	workUnwindTable workKind = "unwind_table" // analysing a binary's .eh_frame, loading its table into the kernel
)

type workOutcome string

const (
	workDone     workOutcome = "done"
	workDeferred workOutcome = "deferred"
)

type workCount struct {
	kind    workKind
	outcome workOutcome
}

// binaryWork accounts the one-time work (a process read, a symbol table, an
// unwind table) against a CPU budget per interval. When the budget is spent,
// that work is deferred for processes with few samples — their frames keep
// their addresses and build IDs, which `hotpath symbolize` resolves later —
// instead of lowering the sampling rate for every process: on a node where
// processes start all the time, that work, not the samples, is what costs.
// Processes with many samples are always served.
type binaryWork struct {
	budget time.Duration // per interval; 0: unlimited

	mu       sync.Mutex
	used     time.Duration // this interval
	counts   map[workCount]uint64
	byThread map[int]time.Duration // since start, by the OS thread that did it
}

// newBinaryWork gives one-time work half of the agent's budget
// (maxPercent of the machine; 0: no budget) per interval: the other half is
// for the per-sample work the overhead guard watches.
func newBinaryWork(maxPercent float64, interval time.Duration) *binaryWork {
	w := &binaryWork{counts: map[workCount]uint64{}, byThread: map[int]time.Duration{}}
	if maxPercent > 0 {
		w.budget = time.Duration(maxPercent / 100 / 2 * float64(runtime.NumCPU()) * float64(interval))
	}
	return w
}

// overBudget reports whether this interval's one-time work has used its
// budget.
func (w *binaryWork) overBudget() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.budget > 0 && w.used >= w.budget
}

// charge records work of kind done at a CPU cost, by the calling thread.
func (w *binaryWork) charge(kind workKind, n uint64, cpu time.Duration) {
	tid := unix.Gettid()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.used += cpu
	w.byThread[tid] += cpu
	if n > 0 {
		w.counts[workCount{kind, workDone}] += n
	}
}

// deferred records n pieces of work of kind left for later.
func (w *binaryWork) deferred(kind workKind, n uint64) {
	if n == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.counts[workCount{kind, workDeferred}] += n
}

// chargedOnThread is the one-time work charged by the calling OS thread
// since start: a locked thread subtracts it from what it measured to get
// the per-sample cost alone.
func (w *binaryWork) chargedOnThread() time.Duration {
	tid := unix.Gettid()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byThread[tid]
}

// endInterval starts a new budget interval and returns the work counted since
// the last call and the CPU time it used.
func (w *binaryWork) endInterval() (counts map[workCount]uint64, cpu time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	counts, cpu = w.counts, w.used
	w.counts, w.used = map[workCount]uint64{}, 0
	return counts, cpu
}
