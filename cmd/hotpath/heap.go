package main

import (
	"context"
	"sync"

	"github.com/hotpath-dev/hotpath/internal/hugepages"
	"github.com/hotpath-dev/hotpath/internal/profilequery"
)

// hugeHeapSize holds a 30-day flame graph's Go heap (27 MB at its peak
// for 20,000 stacks, GODEBUG=gctrace=1).
const hugeHeapSize = 64 << 20

var (
	hugeHeap sync.Once
	// hugeHeapRange is the memory hugepages.GoHeap advised, once a
	// command has loaded profiles (hugeHeapErr: why none).
	hugeHeapRange hugepages.Range
	hugeHeapErr   error
)

// loadInHugePages is profilequery.Load in a process whose Go heap takes
// huge pages first (once a process; internal/hugepages). A command that
// loads profiles touches every page of its heap for the first time, a
// page fault per 4 KiB; with 2 MiB pages, `hotpath profile` over 30 days
// through a running gateway took 2,100 faults instead of 9,200 and 315 ms
// instead of 470 (docs/performance-history.md, "Twenty-second pass"). The
// reservation costs a garbage collection, which a command this large
// makes anyway, so only commands that load profiles pay it: for `hotpath
// sql` it was 6-8 ms more. Where the kernel has no transparent huge pages
// the command runs as before, so an error is not the user's concern.
func loadInHugePages(ctx context.Context, src profilequery.Source, sel profilequery.Selector) (*profilequery.Profile, error) {
	hugeHeap.Do(func() { hugeHeapRange, hugeHeapErr = hugepages.GoHeap(hugeHeapSize) })
	return profilequery.Load(ctx, src, sel)
}
