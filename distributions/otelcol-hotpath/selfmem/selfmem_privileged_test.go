//go:build privileged

package selfmem

import (
	"encoding/binary"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

const uprobeEnv = "SELFMEM_TEST_UPROBE"

// A uprobe on a function of the collector (a user's, or a debugger's
// breakpoint) patches a private copy of that function's page into the
// executable's mapping. The release leaves that mapping, so the probe keeps
// firing; dropping the copy would bring the file's page back without the
// breakpoint. It runs in a child process: the copy stays in the mapping
// after the probe is gone, and the other tests release this process's pages.
func TestReleaseKeepsAUprobe(t *testing.T) {
	if os.Getenv(uprobeEnv) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReleaseKeepsAUprobe$", "-test.v")
		cmd.Env = append(os.Environ(), uprobeEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestReleaseKeepsAUprobe") {
			t.Fatalf("the test's child process: %v\n%s", err, out)
		}
		return
	}

	// The perf event counts the calls of the thread that opened it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pc := uint64(reflect.ValueOf(probed).Pointer())
	fd := openUprobe(t, selfExe, fileOffset(t, pc))
	defer unix.Close(fd)
	hits := func() uint64 {
		t.Helper()
		var b [8]byte
		if _, err := unix.Read(fd, b[:]); err != nil {
			t.Fatal(err)
		}
		return binary.NativeEndian.Uint64(b[:])
	}
	before := hits()
	probed()
	fired := hits()
	if fired == before {
		t.Fatal("the uprobe did not fire")
	}

	vmas, err := executableMappings()
	if err != nil {
		t.Fatal(err)
	}
	err = eachCleanMapping(vmas, func(v procmaps.SmapsEntry) error {
		if v.Start <= pc && pc < v.Limit {
			t.Errorf("the mapping %#x-%#x (%s) holds the uprobe's breakpoint and was passed as clean", v.Start, v.Limit, v.Perms)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReleaseExecutablePages(); err != nil {
		t.Fatal(err)
	}
	probed()
	if hits() == fired {
		t.Fatal("the uprobe did not fire after the release: the release dropped its breakpoint")
	}
}

// probed is the function the uprobe is placed on.
//
//go:noinline
func probed() int { return os.Getpid() + 1 }

// fileOffset is where the code at pc lies in this executable's file: its
// mapping's file offset plus pc's distance into the mapping.
func fileOffset(t *testing.T, pc uint64) uint64 {
	t.Helper()
	vmas, err := readOnlyMappings(selfExe)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vmas {
		if v.Start <= pc && pc < v.Limit {
			return pc - v.Start + v.Offset
		}
	}
	t.Fatalf("%#x is in no read-only mapping of the executable", pc)
	return 0
}

// openUprobe counts the calls that reach offset in the file at path on this
// thread, through the kernel's uprobe PMU (as perf probe -x does).
func openUprobe(t *testing.T, path string, offset uint64) int {
	t.Helper()
	raw, err := os.ReadFile("/sys/bus/event_source/devices/uprobe/type")
	if err != nil {
		t.Fatalf("the kernel's uprobe PMU: %v", err)
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	name, err := unix.BytePtrFromString(path)
	if err != nil {
		t.Fatal(err)
	}
	attr := unix.PerfEventAttr{
		Type: uint32(typ),
		Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Ext1: uint64(uintptr(unsafe.Pointer(name))), // config1: the file
		Ext2: offset,                                // config2: the offset in it
	}
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		t.Fatalf("open a uprobe on %s+%#x: %v", path, offset, err)
	}
	return fd
}
