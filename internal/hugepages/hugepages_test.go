package hugepages

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"
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
	anonHuge := 0
	for _, m := range vmas {
		if !slices.Contains(m.flags, "hg") {
			t.Errorf("mapping %s has VmFlags %v: not advised MADV_HUGEPAGE", m.span, m.flags)
		}
		anonHuge += m.anonHugeKB
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

type mapping struct {
	span       string
	flags      []string
	anonHugeKB int
}

// mappings are the entries of /proc/self/smaps that overlap r.
func mappings(t *testing.T, r Range) []mapping {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []mapping
	var cur *mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			cur = nil
			if err1 == nil && err2 == nil && uintptr(start) < r.End && r.Start < uintptr(end) {
				out = append(out, mapping{span: fields[0]})
				cur = &out[len(out)-1]
			}
			continue
		}
		if cur == nil {
			continue
		}
		switch fields[0] {
		case "VmFlags:":
			cur.flags = fields[1:]
		case "AnonHugePages:":
			if len(fields) >= 2 {
				cur.anonHugeKB, _ = strconv.Atoi(fields[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
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
