package hugepages

import (
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// After GoHeap, what the process allocates comes from the range it
// returned, and every mapping of that range carries the huge-page advice
// (the "hg" flag in /proc/self/smaps), whatever the machine's
// transparent-huge-page mode.
func TestGoHeap(t *testing.T) {
	r, err := GoHeap(24 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if r.Len() != 24<<20 || r.Start%Size != 0 {
		t.Fatalf("range %#x-%#x: want 24 MiB from a huge page's boundary", r.Start, r.End)
	}
	// 16 MiB in small objects, kept alive, as a command's rows are.
	objs := make([]*[64]byte, 0, 1<<18)
	in := 0
	for range cap(objs) {
		o := new([64]byte)
		o[0] = 1
		objs = append(objs, o)
		if r.Contains(uintptr(unsafe.Pointer(o))) {
			in++
		}
	}
	if in < len(objs)/2 {
		t.Fatalf("%d of %d new objects in the advised range %#x-%#x: the heap does not allocate from it", in, len(objs), r.Start, r.End)
	}
	vmas := mappings(t, r)
	if len(vmas) == 0 {
		t.Fatalf("no mapping covers %#x-%#x", r.Start, r.End)
	}
	var anonHuge uint64
	for _, m := range vmas {
		if !slices.Contains(m.VmFlags, "hg") {
			t.Errorf("mapping %#x-%#x has VmFlags %v: not advised MADV_HUGEPAGE", m.Start, m.Limit, m.VmFlags)
		}
		anonHuge += m.AnonHugePages >> 10
	}
	t.Logf("%d of %d objects in the range; %d KiB of it in huge pages (%s)", in, len(objs), anonHuge, thpMode(t))
	if len(objs) != cap(objs) {
		t.Fatal("objects lost")
	}
}

func TestGoHeapRefusesNoSize(t *testing.T) {
	if _, err := GoHeap(0); err == nil {
		t.Fatal("GoHeap(0): no error")
	}
}

// GODEBUG=disablethp=1 asks the runtime for no huge pages: GoHeap
// advises nothing then.
func TestGoHeapHonoursDisableTHP(t *testing.T) {
	t.Setenv("GODEBUG", "madvdontneed=1,disablethp=1")
	if _, err := GoHeap(Size); err == nil || !strings.Contains(err.Error(), "disablethp") {
		t.Fatalf("GoHeap with GODEBUG=%s: %v, want an error naming disablethp", os.Getenv("GODEBUG"), err)
	}
}

// mappings are the entries of /proc/self/smaps that overlap r.
func mappings(t *testing.T, r Range) []procmaps.SmapsEntry {
	t.Helper()
	vmas, err := procmaps.ReadSmaps("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var out []procmaps.SmapsEntry
	for _, v := range vmas {
		if uintptr(v.Start) < r.End && r.Start < uintptr(v.Limit) {
			out = append(out, v)
		}
	}
	return out
}

func thpMode(t *testing.T) string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Fatalf("transparent huge pages: %v", err)
	}
	return "enabled: " + strings.TrimSpace(string(b))
}
