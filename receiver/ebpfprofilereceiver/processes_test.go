package ebpfprofilereceiver

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procfile"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/procinfo"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/unwinder"
)

// newTestTable is a process table over a real symbolizer and, when dwarf is
// set, a real unwinder on a real sampler.
func newTestTable(t *testing.T, work *binaryWork, dwarf bool) (*processTable, *symbolize.Symbolizer) {
	t.Helper()
	sym := symbolize.New(symbolize.Options{
		OnTableLoad: func(cpu time.Duration) { work.charge(workSymbolTable, 1, cpu) },
	})
	table := newProcessTable(testConfig(), &profilebuilder.Host{Name: "test-host"}, zap.NewNop(), sym, work)
	if dwarf {
		s, err := sampler.Open(sampler.Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		table.unwind.Store(unwinder.New(s, sym, 64<<20, nil, zap.NewNop()))
		table.setExecClock(s.LastExec, func(_ int, err error) { t.Error(err) })
	}
	t.Cleanup(table.closeAll)
	return table, sym
}

// spentBudget is a work budget already used up for this interval.
func spentBudget() *binaryWork {
	w := newBinaryWork(1, time.Second)
	w.charge(workProcessRead, 0, time.Hour)
	return w
}

// symbolAddress is the runtime address of function name of bin in p.
func symbolAddress(t *testing.T, p *symbolize.Process, bin, name string) uint64 {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var value uint64
	for _, s := range syms {
		if s.Name == name {
			value = s.Value
		}
	}
	for _, seg := range f.Progs {
		if seg.Type != elf.PT_LOAD || value < seg.Vaddr || value >= seg.Vaddr+seg.Filesz {
			continue
		}
		off := value - seg.Vaddr + seg.Off
		for _, m := range p.Mappings {
			if m.Path == bin && off >= m.Offset && off < m.Offset+(m.Limit-m.Start) {
				return m.Start + off - m.Offset + 1 // inside the function, past its first byte
			}
		}
	}
	t.Fatalf("%s (%#x) is in no mapping of %s: %+v", name, value, bin, p.Mappings)
	return 0
}

// A first-sample event for a pid already known is ignored when it is the same
// process (the kernel forgot and re-announced it), and read anew when the
// pid now belongs to another process (its predecessor's exit was missed).
func TestSeenTellsReusedPIDApart(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// The kernel names the new executable (/proc/pid/exe) before it maps
	// it: a read in between is unsettled and read again at the next
	// announcement, which is not what this test is about.
	waitFor(t, 5*time.Second, "sleep to exec and be mapped", func() bool {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
		if err != nil || exe == "" || exe == mustExecutable(t) {
			return false
		}
		maps, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
		return err == nil && strings.Contains(string(maps), exe)
	})

	_, start, err := procinfo.ReadStat("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	// The kernel sends the start time with the event; without it (0) the
	// table reads /proc/PID/stat. Both tell the same.
	for _, sent := range []uint64{start, 0} {
		table.drop(pid)
		table.seen(pid, sent, eventView{})
		first := table.lookup(pid)
		if first.startTime != start || first.resource.ExeName != "sleep" {
			t.Fatalf("start time sent %d: entry %+v with start time %d, want %d", sent, first.resource, first.startTime, start)
		}
		table.seen(pid, sent, eventView{})
		if table.lookup(pid) != first {
			t.Errorf("start time sent %d: the same process announced again was read again", sent)
		}
		// Pretend the entry belonged to an earlier process with this pid.
		table.mu.Lock()
		first.startTime--
		table.mu.Unlock()
		table.seen(pid, sent, eventView{})
		if again := table.lookup(pid); again == first || again.startTime != start {
			t.Errorf("start time sent %d: a reused pid kept the previous process's entry", sent)
		}
	}
}

// A process is sampled on its way out, after its exit event (the kernel's
// exit work runs after the tracepoint): the first-sample event that follows
// neither replaces what was read while it lived with a zombie's nothing nor
// with an unreadable process, and its entry lasts through the next drain,
// whose counts may hold those last samples.
func TestProcessSampledOnItsWayOutKeepsItsEntry(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=leaving")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	// The environment, set last by exec (the executable changes first).
	waitFor(t, 5*time.Second, "sleep to exec", func() bool {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		return err == nil && strings.Contains(string(env), "OTEL_SERVICE_NAME=leaving")
	})
	table.seen(pid, 0, eventView{})
	lived := table.lookup(pid)
	if lived.snapshot == nil || lived.resource.ServiceName != "leaving" {
		t.Fatalf("live process read as %+v (snapshot %v)", lived.resource, lived.snapshot != nil)
	}
	current := func() *processEntry {
		table.mu.Lock()
		defer table.mu.Unlock()
		return table.entries[pid]
	}

	if unread, _ := table.exited(pid, time.Now(), eventView{}); unread {
		t.Error("the exit of a process read while it lived reported as one gone before its read")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "sleep to be a zombie", func() bool {
		st, err := procfile.ReadStat("/proc/" + strconv.Itoa(pid) + "/stat")
		return err == nil && st.State == 'Z'
	})
	table.seen(pid, 0, eventView{})
	if got := current(); got != lived {
		t.Fatalf("announced again as a zombie, the entry became %+v (snapshot %v)", got.resource, got.snapshot != nil)
	}
	_ = cmd.Wait() // reaped: /proc/PID is gone
	table.seen(pid, 0, eventView{})
	if got := current(); got != lived {
		t.Fatalf("announced again once reaped, the entry became %+v (snapshot %v)", got.resource, got.snapshot != nil)
	}

	table.forgetExitedBefore(time.Now(), time.Second)
	if current() != lived {
		t.Fatal("dropped at the first drain after its exit; that drain's successor may still count its last samples")
	}
	table.forgetExitedBefore(time.Now(), time.Second)
	if current() != nil {
		t.Error("still kept after a whole drain began after its exit")
	}
}

// A process gone before its read is sampled on its way out too, after its
// exit event: the first-sample event that follows keeps the entry its exit
// left (its exit time, and the names exited gave it from the files it
// mapped), as for a process read while it lived. Replaced by another read
// of the gone process, its last samples lost those names and the entry its
// exit, and stayed until a drain found the pid gone. A pid reused by
// another process (another start time) is read as the new process it is.
func TestProcessGoneBeforeItsReadKeepsItsEntryOnItsWayOut(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	pid := gone.Process.Pid
	current := func() *processEntry {
		table.mu.Lock()
		defer table.mu.Unlock()
		return table.entries[pid]
	}
	const start = 4242 // clock ticks after boot, as the kernel sends it with each event
	view := eventView{comm: "true", start: start}
	table.seen(pid, start, view)
	// No list of the files it mapped (no sampler here): it stays unnamed.
	if unread, named := table.exited(pid, time.Now(), eventView{}); !unread || named {
		t.Errorf("exit of a process gone before its read reported as unread %v, named %v; want true, false", unread, named)
	}
	exited := current()
	if exited == nil || exited.exitedAt.IsZero() {
		t.Fatalf("gone before its read, then its exit: entry %+v", exited)
	}
	table.seen(pid, start, view) // sampled on its way out
	if got := current(); got != exited {
		t.Fatalf("announced again on its way out, the entry became %+v (exited at %v)", got.resource, got.exitedAt)
	}
	table.seen(pid, 0, view) // the same, sent without a start time: /proc cannot tell
	if got := current(); got != exited {
		t.Fatalf("announced again without a start time, the entry became %+v (exited at %v)", got.resource, got.exitedAt)
	}
	table.seen(pid, start+1, eventView{comm: "other", start: start + 1})
	if got := current(); got == exited || got.resource.ServiceName != "other" || !got.exitedAt.IsZero() {
		t.Fatalf("a reused pid kept the previous process's entry: %+v", got.resource)
	}
}

// A process that exits between its event and its read leaves an entry
// without a snapshot (its frames stay addresses, never another process's
// names); one whose exit was never reported is found gone by the drain's
// liveness check and dropped.
func TestExitedProcessesAreHandled(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	// The kernel's event named it: its samples keep that name as their
	// service. Without a name they go to the unknown service.
	table.seen(gone.Process.Pid, 0, eventView{comm: "true"})
	e := table.lookup(gone.Process.Pid)
	if e.snapshot != nil || e.resource.ServiceName != "true" {
		t.Fatalf("exited process named true by its event: snapshot %v, service %q", e.snapshot, e.resource.ServiceName)
	}
	unnamed := exec.Command("true")
	if err := unnamed.Run(); err != nil {
		t.Fatal(err)
	}
	table.seen(unnamed.Process.Pid, 0, eventView{})
	if got := table.lookup(unnamed.Process.Pid).resource.ServiceName; got != profileschema.UnknownService {
		t.Fatalf("exited process with no name from its event: service %q, want %q", got, profileschema.UnknownService)
	}
	// Its entry dropped (an exec or exit event) while a drain wanted to
	// re-read it: refresh says there is nothing, and does not invent one.
	table.drop(gone.Process.Pid)
	if got := table.refresh(gone.Process.Pid, time.Now()); got != nil || table.tracked(gone.Process.Pid) {
		t.Fatalf("refresh of a gone, dropped process = %+v", got)
	}

	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	table.seen(pid, 0, eventView{})
	if !table.tracked(pid) {
		t.Fatal("live process not tracked")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait() // reaped: /proc/PID is gone; no exit event was delivered
	table.forgetExitedBefore(time.Now(), time.Second)
	if table.tracked(pid) {
		t.Error("a process that exited unreported is still tracked after a drain")
	}
}

func mustExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// A read that began before the process exec'd is not installed after the
// exec dropped the old entry: it may describe a half-replaced image (new
// executable, no mappings or environment yet) and would stay, since the
// new image's first sample finds the pid known.
func TestReadAcrossExecIsNotInstalled(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid

	table.mu.Lock()
	before := table.execs[pid]
	table.mu.Unlock()
	e := table.read(pid, 0, eventView{}) // the read in flight
	table.execed(pid, eventView{})       // the exec event arrives meanwhile
	table.store(pid, e, before)
	if table.tracked(pid) {
		t.Fatal("a read from before the exec was installed after it")
	}
	table.seen(pid, 0, eventView{}) // the new image's first sample
	if !table.tracked(pid) {
		t.Fatal("the new image was not read")
	}
}

// stuckProcess makes pid's stat under root a FIFO nobody writes yet, so a
// read of pid waits as a read does while the kernel holds a process's /proc
// files (an exec, a large mmap). release ends the wait with an empty file:
// the process then reads as gone.
func stuckProcess(t *testing.T, root string, pid int) (release func()) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(root, strconv.Itoa(pid)), 0o700); err != nil {
		t.Fatal(err)
	}
	stat := filepath.Join(root, strconv.Itoa(pid), "stat")
	if err := unix.Mkfifo(stat, 0o600); err != nil {
		t.Fatal(err)
	}
	return func() {
		w, err := os.OpenFile(stat, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		w.Close()
	}
}

// TestSlowReadDoesNotHoldUpOthers: a process whose /proc files cannot be
// read yet (the kernel holds them while the process execs or maps memory)
// does not hold up reading the next new process, which may be about to
// exit. Here the first process's stat is a FIFO nobody writes yet.
func TestSlowReadDoesNotHoldUpOthers(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	root := t.TempDir()
	self := os.Getpid()
	stuck := self + 1 // served by another reader than self
	if err := os.Symlink(filepath.Join("/proc", strconv.Itoa(self)), filepath.Join(root, strconv.Itoa(self))); err != nil {
		t.Fatal(err)
	}
	release := stuckProcess(t, root, stuck)
	table.procRoot = root
	r := &profileReceiver{procs: table}
	events := make(chan sampler.ProcEvent)
	done := make(chan struct{})
	go func() { defer close(done); r.watchProcesses(events) }()
	events <- sampler.ProcEvent{Kind: sampler.EventSeen, PID: uint32(stuck)}
	events <- sampler.ProcEvent{Kind: sampler.EventSeen, PID: uint32(self)}
	waitFor(t, 30*time.Second, "the next process read while another's read waits", func() bool { return table.tracked(self) })
	if table.tracked(stuck) {
		t.Fatal("the stuck process was read before its stat could be")
	}
	// The stuck read ends: the process reads as gone, and is kept under
	// the unknown service.
	release()
	close(events)
	<-done
	if !table.tracked(stuck) {
		t.Error("the stuck process was never stored")
	}
	if e := table.lookup(self); e.resource.ExePath == "" || e.snapshot == nil {
		t.Errorf("this process read as %+v, want its executable and mappings", e.resource)
	}
}

// A drain that meets a pid whose first-sample event still waits for its
// reader (busy with a slow read), the process gone since, names its samples
// after the comm the event carries, not the unknown service; once the event
// is handled, nothing of it stays queued.
func TestDrainBeforeTheEventNamesTheProcess(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	root := t.TempDir()
	stuck := os.Getpid() + 1
	gone := stuck + processReaders // the same reader as stuck
	release := stuckProcess(t, root, stuck)
	table.procRoot = root // gone has no directory: it exited
	r := &profileReceiver{procs: table}
	events := make(chan sampler.ProcEvent)
	done := make(chan struct{})
	go func() { defer close(done); r.watchProcesses(events) }()
	events <- sampler.ProcEvent{Kind: sampler.EventSeen, PID: uint32(stuck), Comm: "stuck"}
	events <- sampler.ProcEvent{Kind: sampler.EventSeen, PID: uint32(gone), Comm: "cc1"}
	// The dispatcher takes the next event only after queueing this one.
	events <- sampler.ProcEvent{Kind: sampler.EventMapsChanged, PID: uint32(stuck)}
	if table.tracked(gone) {
		t.Fatal("the gone process's event was handled while its reader was stuck")
	}
	if got := table.lookup(gone).resource.ServiceName; got != "cc1" {
		t.Errorf("a gone process met by the drain before its queued event: service %q, want %q", got, "cc1")
	}
	release()
	close(events)
	<-done
	if got := table.lookup(gone).resource.ServiceName; got != "cc1" {
		t.Errorf("after its event was handled: service %q, want %q", got, "cc1")
	}
	table.mu.Lock()
	left := len(table.queued)
	table.mu.Unlock()
	if left != 0 {
		t.Errorf("%d pids still have queued names after every event was handled", left)
	}
}

// mapperC maps each file named on its command line into its memory as code,
// one per byte read from stdin, saying "mapped" after each; then waits for
// stdin to close.
const mapperC = `#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
	char c;
	struct stat st;
	printf("ready\n");
	fflush(stdout);
	for (int i = 1; i < argc; i++) {
		if (read(0, &c, 1) != 1) return 1;
		int fd = open(argv[i], O_RDONLY);
		if (fd < 0 || fstat(fd, &st) != 0) return 2;
		if (mmap(0, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0) == MAP_FAILED) return 3;
		printf("mapped\n");
		fflush(stdout);
	}
	while (read(0, &c, 1) == 1) {
	}
	return 0;
}
`

// A process whose executable memory changes again soon after a re-read (a
// Python program importing one C extension after another, each its own
// library) is read again once mapsRereadEvery has passed since that re-read:
// the change is not dropped, and the library gets its symbols and unwind
// table while the process lives.
func TestMapsChangedSoonAfterARereadIsReadLater(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	bin := testworkload.CompileC(t, "mapper", []byte(mapperC), "-O2")
	// Two copies of the small program itself: two files of code.
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	libs := []string{filepath.Join(dir, "first.so"), filepath.Join(dir, "second.so")}
	for _, l := range libs {
		if err := os.WriteFile(l, code, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, libs...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("mapper said %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}
	expect("ready")
	pid := cmd.Process.Pid
	table.seen(pid, 0, eventView{})
	maps := func(path string) bool {
		e := table.lookup(pid)
		return e.snapshot != nil && slices.ContainsFunc(e.snapshot.Mappings, func(m symbolize.Mapping) bool { return m.Path == path })
	}
	readAt := func() time.Time {
		table.mu.Lock()
		defer table.mu.Unlock()
		return table.entries[pid].mapsReadAt
	}
	if maps(libs[0]) {
		t.Fatal("read before it mapped the library")
	}
	for i, lib := range libs {
		before := readAt()
		if _, err := stdin.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		expect("mapped")
		table.mapsChanged(pid) // the kernel's event
		waitFor(t, 30*time.Second, "the re-read that finds "+filepath.Base(lib), func() bool { return maps(lib) })
		if i > 0 && readAt().Sub(before) < mapsRereadEvery {
			t.Errorf("re-read %v after the one before, want at least %v", readAt().Sub(before), mapsRereadEvery)
		}
	}
}

// idleC waits in waiting() until it is killed.
const idleC = `
#include <unistd.h>
__attribute__((noinline)) void waiting(void) { pause(); }
int main(void) { waiting(); return 0; }
`

// startIdleProg builds and starts idleC, and returns once it runs it.
func startIdleProg(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	bin := testworkload.CompileC(t, "idleprog", []byte(idleC), "-O1")
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitFor(t, 5*time.Second, "idleprog to exec", func() bool {
		exe, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
		return err == nil && exe == bin
	})
	return bin, cmd
}

// A process read while it lived and dropped later as idle has no entry
// when it exits. Its entry from the files the kernel saw it map is named
// after the exit event (its command name and start time), not the unknown
// service: a forked child's samples from before its exec are named against
// that entry, under its service. And idle counts drains, not only time: on
// a loaded node a drain can take several intervals (the first one reads
// every process there is), and a process read during it was dropped as
// idle while it lived.
func TestIdleProcessDroppedThenExitedKeepsItsName(t *testing.T) {
	table, sym := newTestTable(t, newBinaryWork(0, time.Second), false)
	bin, cmd := startIdleProg(t)
	pid := cmd.Process.Pid
	table.seen(pid, 0, eventView{})
	lived := table.lookup(pid)
	if lived.snapshot == nil {
		t.Fatal("idleprog not read")
	}
	addr := symbolAddress(t, lived.snapshot, bin, "waiting")
	if f := sym.User(lived.snapshot, []uint64{addr}, nil); len(f) != 1 || f[0].Function != "waiting" {
		t.Fatalf("waiting() read as %+v", f)
	}
	var known []symbolize.KnownMapping
	for _, m := range lived.snapshot.Mappings {
		if m.Path == bin {
			id := m.ID
			id.Size = 0 // as the kernel's record has it
			known = append(known, symbolize.KnownMapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, File: id})
		}
	}
	table.setMappedFiles(func(uint32) ([]symbolize.KnownMapping, error) { return known, nil },
		func(_ int, err error) { t.Error(err) })

	// Drains ten intervals apart, none with its samples: it stays through
	// idleIntervals of them.
	now := time.Now()
	for k := 1; k <= idleIntervals; k++ {
		table.forgetExitedBefore(now.Add(time.Duration(k)*10*time.Second), time.Second)
		if !table.tracked(pid) {
			t.Fatalf("dropped as idle at the drain %d after its read, each drain 10 intervals long", k)
		}
	}
	table.forgetExitedBefore(now.Add((idleIntervals+1)*10*time.Second), time.Second)
	if table.tracked(pid) {
		t.Fatalf("not dropped after %d drains without samples", idleIntervals+1)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	unread, named := table.exited(pid, time.Now(), eventView{comm: "idleprog", start: lived.startTime})
	if !unread || !named {
		t.Fatalf("exit after an idle drop: unread %v, named %v; want true, true", unread, named)
	}
	table.mu.Lock()
	e := table.entries[pid]
	table.mu.Unlock()
	if e == nil || e.resource.ServiceName != "idleprog" || e.startTime != lived.startTime {
		t.Fatalf("exited after an idle drop: entry %v, want service idleprog and start %d", entrySummary(e), lived.startTime)
	}
	if f := sym.User(e.snapshot, []uint64{addr}, nil); len(f) != 1 || f[0].Function != "waiting" {
		t.Errorf("waiting() named from the files it mapped as %+v", f)
	}
}

// entrySummary is what a failure message says of an entry.
func entrySummary(e *processEntry) string {
	if e == nil {
		return "none"
	}
	return fmt.Sprintf("service %q, start %d, unread %v, snapshot %v", e.resource.ServiceName, e.startTime, e.unread, e.snapshot != nil)
}

// A process read again (its first-sample event handled after a drain read
// it and counted its samples) keeps when it was last sampled: the new
// entry is the same process, not one idle since its read.
func TestReadAgainKeepsWhenItWasSampled(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(0, time.Second), false)
	_, cmd := startIdleProg(t)
	pid := cmd.Process.Pid
	first := table.lookup(pid) // a drain met it first
	sampled := time.Now()
	table.markSampled(first, sampled)
	again := table.read(pid, 0, eventView{})
	table.store(pid, again, 0)
	table.mu.Lock()
	e := table.entries[pid]
	table.mu.Unlock()
	if e != again || !e.sampledAt.Equal(sampled) {
		t.Errorf("read again: installed %v (the new read: %v), sampled at %v; want %v", entrySummary(e), e == again, e.sampledAt, sampled)
	}
}
