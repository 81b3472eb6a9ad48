package symbolize

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"
	"unsafe"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// mappingRSS is the resident size in kB of this process's mapping that
// starts at addr, from /proc/self/smaps.
func mappingRSS(t *testing.T, addr uintptr) int {
	t.Helper()
	vmas, err := procmaps.ReadSmaps("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmas {
		if v.Start == uint64(addr) {
			return int(v.Rss >> 10)
		}
	}
	t.Fatalf("no mapping at %#x", addr)
	return 0
}

// Trim gives back the pages lookups faulted in, and lookups keep working.
func TestTrimReleasesFilePages(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	table, err := OpenSymbolTable(exe) // this Go test binary: pclntab read in place
	if err != nil {
		t.Fatal(err)
	}
	if table.data == nil {
		t.Fatal("the table of a Go binary keeps no file mapping; nothing to trim")
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(table.data)))

	// Resolve many functions of this binary, touching much of its pclntab.
	fns := []any{TestTrimReleasesFilePages, OpenSymbolTable, New, fmt.Sprintf, strconv.Atoi, bufio.NewScanner, os.Open, reflect.ValueOf}
	lookupAll := func() {
		for _, fn := range fns {
			pc := uint64(reflect.ValueOf(fn).Pointer())
			sym, ok := table.Lookup(pc)
			if !ok || sym.Function == "" {
				t.Fatalf("no symbol for %#x", pc)
			}
		}
	}
	lookupAll()
	before := mappingRSS(t, start)
	if before == 0 {
		t.Fatal("lookups left no resident pages: the test measures nothing")
	}
	table.Trim()
	if after := mappingRSS(t, start); after >= before || after > 8 {
		t.Errorf("after Trim the mapping holds %d kB resident (before: %d kB)", after, before)
	}
	lookupAll()
}

// A table whose names stay in the file mapping resolves exactly like one
// that copies them, and keeps only offsets on the heap.
func TestNamesInImageResolveTheSame(t *testing.T) {
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	// libc's separate debug file would merge its names in (copied): this
	// test is about the file's own.
	oldDebug := DebugDir
	DebugDir = t.TempDir()
	defer func() { DebugDir = oldDebug }()
	copied, err := OpenSymbolTable(libc)
	if err != nil {
		t.Fatal(err)
	}
	old := namesInImageBytes
	namesInImageBytes = 0
	defer func() { namesInImageBytes = old }()
	inImage, err := OpenSymbolTable(libc)
	if err != nil {
		t.Fatal(err)
	}
	if copied.namesInImage || !inImage.namesInImage {
		t.Fatalf("namesInImage: copied %v, in image %v", copied.namesInImage, inImage.namesInImage)
	}
	if inImage.Size() >= copied.Size() {
		t.Errorf("heap: %d bytes with names in the image, %d copied", inImage.Size(), copied.Size())
	}
	if len(copied.addrs) < 1000 {
		t.Fatalf("only %d libc symbols", len(copied.addrs))
	}
	for _, addr := range copied.addrs {
		a, okA := copied.Lookup(addr)
		b, okB := inImage.Lookup(addr)
		if a != b || okA != okB {
			t.Fatalf("%#x: copied %+v %v, in image %+v %v", addr, a, okA, b, okB)
		}
	}
	inImage.Trim() // names fault back in from the page cache
	if sym, ok := inImage.Lookup(copied.addrs[len(copied.addrs)/2]); !ok || sym.Function == "" {
		t.Errorf("lookup after Trim: %+v %v", sym, ok)
	}
}
