// Package hugepages asks the kernel to back a short-lived process's Go
// heap with 2 MiB pages.
//
// A command such as `hotpath profile` runs for a fraction of a second and
// touches every page of its heap for the first time: a page fault per
// 4 KiB. On the 2-vCPU VM docs/performance.md measures, a fault costs about
// 16 µs, and the Go heap's faults were about a third of a 30-day flame
// graph's 0.4 s through a running gateway. Transparent huge pages take one
// fault per 2 MiB, but where they are "madvise" (as on that VM) only for
// memory advised MADV_HUGEPAGE, which the Go runtime does not do for its
// heap.
//
// Long-running processes (the collectors) should not call it: a huge page
// is resident as a whole, and they keep what they touched anyway.
package hugepages

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Size is the size of a transparent huge page on x86-64 and on arm64
// with 4 KiB base pages.
const Size = 2 << 20

// Range is a range of addresses, [Start, End).
type Range struct{ Start, End uintptr }

// Len is the range's length in bytes.
func (r Range) Len() int { return int(r.End - r.Start) }

// Contains reports whether p is in the range.
func (r Range) Contains(p uintptr) bool { return r.Start <= p && p < r.End }

// GoHeap makes the Go heap's next allocations, up to size bytes (rounded
// up to whole huge pages), come from memory advised MADV_HUGEPAGE, and
// returns that memory's range. The kernel honours the advice when
// /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always",
// and ignores it when "never".
//
// It works with the runtime as it is, not through it: it allocates one
// slice of that size and a huge page more, which the heap maps afresh
// (untouched, so nothing is resident yet), advises the part of it that
// starts on a huge page's boundary, and frees it with a collection. The
// runtime's page allocator hands out the lowest free addresses first, so
// what the process allocates next lands there. Call it early, while the
// heap holds little (the CLI: before its first profile load);
// GODEBUG=disablethp=1 turns it off, as it does the runtime's own huge
// pages.
func GoHeap(size int) (Range, error) {
	if size <= 0 {
		return Range{}, fmt.Errorf("size %d: want a positive number of bytes", size)
	}
	if strings.Contains(os.Getenv("GODEBUG"), "disablethp=1") {
		return Range{}, errors.New("GODEBUG has disablethp=1: the Go heap is to have no huge pages")
	}
	size = (size + Size - 1) &^ (Size - 1)
	b := make([]byte, size+Size)
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	off := int((base+Size-1)&^(Size-1) - base)
	err := unix.Madvise(b[off:off+size], unix.MADV_HUGEPAGE)
	r := Range{base + uintptr(off), base + uintptr(off+size)}
	runtime.KeepAlive(b) // b's last use: the collection below frees it
	runtime.GC()
	if err != nil {
		return Range{}, fmt.Errorf("madvise MADV_HUGEPAGE: %w", err)
	}
	return r, nil
}
