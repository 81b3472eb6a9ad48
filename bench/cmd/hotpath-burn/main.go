// Command hotpath-burn is the CPU-bound workload of `make bench`: it keeps
// every core busy with a fixed mix of work (hashing, sorting, formatting,
// map updates) for a set time and prints how many units of work it did, so
// runs with and without the agent can be compared by throughput.
//
//	hotpath-burn -duration 10s -threads 2
//
// Output is one JSON object: {"ops":..., "seconds":..., "ops_per_sec":...}.
package main

import (
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

type result struct {
	Ops       int64   `json:"ops"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	Threads   int     `json:"threads"`
}

func main() {
	duration := flag.Duration("duration", 10*time.Second, "how long to run")
	threads := flag.Int("threads", runtime.NumCPU(), "worker goroutines (one per core loads the machine)")
	flag.Parse()
	if *duration <= 0 || *threads <= 0 {
		fmt.Fprintln(os.Stderr, "hotpath-burn: -duration and -threads must be positive")
		os.Exit(2)
	}
	res := run(*duration, *threads)
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "hotpath-burn:", err)
		os.Exit(1)
	}
}

// run starts the workers, stops them after d and counts completed units.
// Throughput is over the measured elapsed time, not the requested one.
func run(d time.Duration, threads int) result {
	var ops atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for i := range threads {
		wg.Add(1)
		go func(seed int) {
			defer wg.Done()
			w := newWorker(seed)
			var n int64
			for !stop.Load() {
				w.unit()
				n++
			}
			ops.Add(n)
		}(i)
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	el := time.Since(start).Seconds()
	return result{Ops: ops.Load(), Seconds: el, OpsPerSec: float64(ops.Load()) / el, Threads: threads}
}

// worker holds one goroutine's buffers so a unit of work allocates little:
// the measurement is CPU, not the garbage collector.
type worker struct {
	buf   []byte
	ints  []int
	table map[int]int
	sink  uint64
	rng   uint64
}

func newWorker(seed int) *worker {
	w := &worker{buf: make([]byte, 4096), ints: make([]int, 512), table: make(map[int]int, 1024), rng: uint64(seed)*0x9e3779b97f4a7c15 + 1}
	for i := range w.buf {
		w.buf[i] = byte(i * 7)
	}
	return w
}

// unit is one unit of work: a few distinct call paths, so the profiler sees
// a handful of stacks rather than one.
func (w *worker) unit() {
	w.hash()
	w.sortInts()
	w.format()
	w.mapUpdate()
}

//go:noinline
func (w *worker) hash() {
	sum := sha256.Sum256(w.buf)
	w.sink += uint64(sum[0])
	w.buf[w.sink%uint64(len(w.buf))]++
}

//go:noinline
func (w *worker) sortInts() {
	for i := range w.ints {
		w.ints[i] = int(w.next() % 100000)
	}
	slices.Sort(w.ints)
	w.sink += uint64(w.ints[len(w.ints)/2])
}

//go:noinline
func (w *worker) format() {
	var b [32]byte
	for i := 0; i < 64; i++ {
		out := strconv.AppendInt(b[:0], int64(w.next()), 10)
		w.sink += uint64(len(out))
	}
}

//go:noinline
func (w *worker) mapUpdate() {
	for i := 0; i < 256; i++ {
		k := int(w.next() % 2048)
		w.table[k]++
	}
	if len(w.table) > 1500 {
		clear(w.table)
	}
}

// next is xorshift64: cheap, deterministic per worker.
func (w *worker) next() uint64 {
	w.rng ^= w.rng << 13
	w.rng ^= w.rng >> 7
	w.rng ^= w.rng << 17
	return w.rng
}
