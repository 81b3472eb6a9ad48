//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/controlapi"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// Programs built without frame pointers: the frame-pointer chain cannot
// walk them, the DWARF unwinder (unwinding: auto) must.

// chainC burns CPU six calls deep: main → level1 → … → level5 → level6.
// Every level keeps a stack buffer and works after the call returns, so
// nothing is inlined or turned into a tail call, and each has its own CFA
// offset from rsp.
const chainC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;

#define LEVEL(name, next, size)                                  \
	__attribute__((noinline)) unsigned long name(unsigned long x) { \
		volatile unsigned char buf[size];                        \
		buf[0] = (unsigned char)x;                               \
		unsigned long r = next(x + buf[0]);                      \
		sink += buf[size - 1];                                   \
		return r * 3 + 1;                                        \
	}

__attribute__((noinline)) unsigned long level6(unsigned long x) {
	for (int i = 0; i < 4000; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}
LEVEL(level5, level6, 24)
LEVEL(level4, level5, 40)
LEVEL(level3, level4, 56)
LEVEL(level2, level3, 72)
LEVEL(level1, level2, 88)

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	double end;

	printf("ready\n");
	fflush(stdout);
	SETTLE();
	end = now() + atof(argv[1]);
	while (now() < end)
		for (int i = 0; i < 100; i++)
			sink += level1(sink);
	return 0;
}
`

// qsortC spends its time in a comparison function glibc's qsort calls
// from inside its own (frame-pointer-less) merge sort.
const qsortC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 4096
static unsigned long data[N];

__attribute__((noinline)) int slow_compare(const void *a, const void *b) {
	unsigned long x = *(const unsigned long *)a, y = *(const unsigned long *)b;
	for (int i = 0; i < 200; i++) {
		x = x * 6364136223846793005UL + 1;
		__asm__ volatile("" : "+r"(x));
	}
	return (x & 1) ? -1 : (y < x) - (x < y);
}

__attribute__((noinline)) void sort_batch(unsigned seed) {
	for (int i = 0; i < N; i++)
		data[i] = (unsigned long)rand_r(&seed);
	qsort(data, N, sizeof(data[0]), slow_compare);
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
	double end;

	printf("ready\n");
	fflush(stdout);
	SETTLE();
	end = now() + atof(argv[1]);
	for (unsigned s = 1; now() < end; s++)
		sort_batch(s);
	return 0;
}
`

// settle is what SETTLE() does in the C programs: spin (so the agent samples
// the process and reads it, attaching its libraries' tables) until a line
// arrives on standard input, then start the measured work. The test sends
// the line once the receivers have read the process (startSettled), however
// long that takes on a loaded machine. Samples before that are frame-pointer
// stacks (except in the code of a binary whose table the agent already has:
// the kernel attaches it at exec; TestUnwindTablesAtExec).
// HOTPATH_TEST_NO_SETTLE=1, or standard input at end of file, skips it.
const settle = `#include <poll.h>
#include <stdlib.h>
#include <unistd.h>
static void settle(void)
{
	struct pollfd in = { .fd = 0, .events = POLLIN };
	char line[8];

	if (getenv("HOTPATH_TEST_NO_SETTLE"))
		return;
	while (poll(&in, 1, 0) == 0)
		;
	if (read(0, line, sizeof line) < 0)
		return;
}
#define SETTLE() settle()
`

// startSettled starts a settling workload and lets it burn once every
// receiver has read it as it is now, all its code mapped (and, with
// unwinding: auto, attached its tables). A read taken while the dynamic
// loader was at work has tables for part of the libraries, and the re-read
// after the loader's next mapping waits up to a second (mapsRereadEvery):
// on a loaded machine stacks through the others were cut for that long.
func startSettled(t *testing.T, bin, seconds string, rs ...*profileReceiver) *exec.Cmd {
	t.Helper()
	return testworkload.StartGated(t, bin, seconds, settled(t, rs...))
}

// settled is startSettled's gate: every receiver of rs has read pid and
// has every executable mapping of it (and its unwind tables, with
// unwinding: auto).
func settled(t *testing.T, rs ...*profileReceiver) func(pid int) bool {
	return func(pid int) bool {
		raw, err := procmaps.Read("/proc", pid)
		if err != nil {
			return false
		}
		code, err := procmaps.ParseExecutable(raw)
		if err != nil {
			t.Fatalf("pid %d's memory map: %v", pid, err)
		}
		for _, r := range rs {
			r.procs.mu.Lock()
			e := r.procs.entries[pid]
			r.procs.mu.Unlock()
			if e == nil || e.snapshot == nil || (r.cfg.Unwinding == UnwindingAuto && !e.dwarf.Load()) {
				return false
			}
			for _, m := range code {
				if m.Path != "" && !strings.HasPrefix(m.Path, "[") && !slices.ContainsFunc(e.snapshot.Mappings, func(s symbolize.Mapping) bool { return s.Start == m.Start }) {
					return false
				}
			}
		}
		return true
	}
}

// buildNoFP compiles src with -O2 -fomit-frame-pointer and checks that no
// function of fns sets up a frame pointer (else the test proves nothing).
func buildNoFP(t testing.TB, name, src string, fns ...string) string {
	t.Helper()
	bin := testworkload.CompileC(t, name, []byte(settle+src), "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls")
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump: %v\n%s", err, out)
	}
	for _, fn := range fns {
		body := regexp.MustCompile(`(?s)<` + fn + `>:\n(.*?)\n\n`).FindSubmatch(out)
		if body == nil {
			t.Fatalf("%s not found in %s", fn, bin)
		}
		if strings.Contains(string(body[1]), "mov    %rsp,%rbp") {
			t.Fatalf("%s sets up a frame pointer:\n%s", fn, body[1])
		}
	}
	return bin
}

// chainShare is, among the samples whose innermost user frame is leaf, the
// share whose user stack holds want (root first) as a contiguous run ending
// at the leaf.
func chainShare(tl testworkload.Tally, want []string) (share float64, leafSamples int64) {
	var full int64
	for stack, n := range tl.Folded {
		frames := testworkload.UserFrames(stack)
		if len(frames) == 0 || frames[len(frames)-1] != want[len(want)-1] {
			continue
		}
		leafSamples += n
		if len(frames) >= len(want) && slices.Equal(frames[len(frames)-len(want):], want) {
			full += n
		}
	}
	if leafSamples == 0 {
		return 0, 0
	}
	return float64(full) / float64(leafSamples), leafSamples
}

// TestDWARFUnwindingWithoutFramePointers samples the chain and qsort
// workloads with two receivers at once, one per unwinding mode. With auto
// the whole chain main → level1..level6 must be there in ≥ 95 % of
// level6's samples and slow_compare must be reached from main through
// glibc's qsort; with frame_pointer the chains break (which shows the
// checks can fail).
func TestDWARFUnwindingWithoutFramePointers(t *testing.T) {
	chain := buildNoFP(t, "chain", chainC, "main", "level1", "level2", "level3", "level4", "level5", "level6")
	qs := buildNoFP(t, "qsort", qsortC, "main", "sort_batch", "slow_compare")

	fpCfg, autoCfg := testConfig(), testConfig()
	fpCfg.Unwinding, autoCfg.Unwinding = UnwindingFramePointer, UnwindingAuto
	fpCfg.TraceContext.Enabled, autoCfg.TraceContext.Enabled = false, false
	fp, fpSink := startReceiver(t, fpCfg)
	auto, autoSink := startReceiver(t, autoCfg)

	c := startSettled(t, chain, "3", fp, auto)
	q := startSettled(t, qs, "3", fp, auto)
	_ = c.Wait()
	_ = q.Wait()
	for _, r := range []*profileReceiver{fp, auto} {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("six_deep_chain", func(t *testing.T) {
		want := []string{"main", "level1", "level2", "level3", "level4", "level5", "level6"}
		minSamples := int64(0.25 * testworkload.ExpectedSamples(c, autoCfg.FrequencyHz))
		autoT := testworkload.TallyProcess(autoSink.AllProfiles(), c.Process.Pid)
		fpT := testworkload.TallyProcess(fpSink.AllProfiles(), c.Process.Pid)
		autoShare, autoN := chainShare(autoT, want)
		fpShare, fpN := chainShare(fpT, want)
		t.Logf("full chain above level6: auto %.3f of %d samples, frame_pointer %.3f of %d", autoShare, autoN, fpShare, fpN)
		if autoN < minSamples || fpN < minSamples {
			t.Fatalf("too few level6 samples (auto %d, frame_pointer %d; want ≥ %d); auto top:%s", autoN, fpN, minSamples, autoT.Top(5))
		}
		if autoShare < 0.95 {
			t.Errorf("auto: full chain in %.3f of level6 samples, want ≥ 0.95; top:%s", autoShare, autoT.Top(5))
		}
		if fpShare > 0.5 {
			t.Errorf("frame_pointer: full chain in %.3f of samples; expected broken stacks; top:%s", fpShare, fpT.Top(5))
		}
	})

	t.Run("glibc_qsort", func(t *testing.T) {
		autoT := testworkload.TallyProcess(autoSink.AllProfiles(), q.Process.Pid)
		fpT := testworkload.TallyProcess(fpSink.AllProfiles(), q.Process.Pid)
		autoShare, autoN := throughShare(autoT, "slow_compare")
		fpShare, fpN := throughShare(fpT, "slow_compare")
		t.Logf("main → sort_batch → qsort … → slow_compare: auto %.3f of %d samples, frame_pointer %.3f of %d; auto top:%s", autoShare, autoN, fpShare, fpN, autoT.Top(3))
		minSamples := int64(0.25 * testworkload.ExpectedSamples(q, autoCfg.FrequencyHz))
		if autoN < minSamples {
			t.Fatalf("too few slow_compare samples (%d; want ≥ %d); top:%s", autoN, minSamples, autoT.Top(5))
		}
		if autoShare < 0.95 {
			t.Errorf("auto: main → sort_batch → qsort above slow_compare in %.3f of samples, want ≥ 0.95; top:%s", autoShare, autoT.Top(5))
		}
		if fpShare > 0.5 {
			t.Errorf("frame_pointer: %.3f of samples reach main; expected broken stacks; top:%s", fpShare, fpT.Top(5))
		}
		// glibc's own frames between qsort and the callback are named
		// (from its symbol table, or its separate debug file when
		// installed), never raw addresses. A sample can catch glibc in
		// one of its PLT stubs (msort_with_tmp's memcpy goes through
		// glibc's own PLT): that leaf is named after the stub's target
		// ("…@plt"). Only the lazy binder's jump (PLT0, the first entry
		// of .plt) has no name: a leaf there is "libc.so.6+0x<.plt>".
		plt0 := glibcPLT0(t)
		for stack := range autoT.Folded {
			frames := testworkload.UserFrames(stack)
			for i, f := range frames {
				if strings.Contains(f, "libc.so.6+0x") && (i < len(frames)-1 || f != plt0) {
					t.Errorf("unnamed glibc frame %q in %s", f, stack)
				}
			}
		}
	})

	auto.mu.Lock()
	ended := auto.endedEarly
	auto.mu.Unlock()
	t.Logf("auto: stacks ended early %+v", ended)
}

// glibcPLT0 returns the frame a leaf in the C compiler's glibc's PLT0
// shows as: "libc.so.6+0x<file offset of .plt>".
func glibcPLT0(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		t.Fatalf("gcc -print-file-name=libc.so.6: %v", err)
	}
	f, err := elf.Open(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("glibc: %v", err)
	}
	defer f.Close()
	plt := f.Section(".plt")
	if plt == nil {
		t.Fatal("glibc has no .plt section")
	}
	return "libc.so.6+0x" + strconv.FormatUint(plt.Offset, 16)
}

// throughShare is, among the samples whose innermost user frame is leaf,
// the share that reach it from main → sort_batch → qsort* (qsort or the
// qsort_r it tail-calls) through any frames of glibc's.
func throughShare(tl testworkload.Tally, leaf string) (share float64, leafSamples int64) {
	var ok int64
	for stack, n := range tl.Folded {
		frames := testworkload.UserFrames(stack)
		if len(frames) == 0 || frames[len(frames)-1] != leaf {
			continue
		}
		leafSamples += n
		i := slices.Index(frames, "main")
		if i >= 0 && i+3 < len(frames) && frames[i+1] == "sort_batch" && strings.HasPrefix(frames[i+2], "qsort") {
			ok += n
		}
	}
	if leafSamples == 0 {
		return 0, 0
	}
	return float64(ok) / float64(leafSamples), leafSamples
}

// signalC spends part of its time in a SIGALRM handler, which interrupts
// interrupted() under outer() under main (the handler arms the next alarm,
// 10 ms on, when it is done: the program goes on however slow the
// machine): the handler's stack goes through glibc's signal trampoline
// (__restore_rt), whose CFI says the interrupted code's registers are in
// the ucontext the kernel saved on the stack.
const signalC = `#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static volatile unsigned long sink;

__attribute__((noinline)) void in_handler(void) {
	for (int i = 0; i < 1000000; i++)
		sink = sink * 7 + i;
}

static const struct itimerval next = {{0, 0}, {0, 10000}};

__attribute__((noinline)) void on_alarm(int sig) {
	in_handler();
	sink += sig;
	setitimer(ITIMER_REAL, &next, 0);
}

__attribute__((noinline)) void interrupted(double secs) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 1000000; i++)
			sink = sink * 3 + i;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}

__attribute__((noinline)) void outer(double secs) { interrupted(secs); sink++; }

int main(int argc, char **argv) {
	printf("ready\n");
	fflush(stdout);
	SETTLE();
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, 0);
	setitimer(ITIMER_REAL, &next, 0);
	outer(atof(argv[1]));
	return 0;
}
`

// A sample in a signal handler is unwound through the signal trampoline
// into the code the signal interrupted: the trampoline's row
// (unwindtable.Signal) takes rip, rsp and rbp from the ucontext the kernel
// saved, and the interrupted frame's own row (its pc is no return
// address). Before, the trampoline had no row the kernel could follow, the
// walk fell back to the frame pointer, and code built without one ended
// there: main, outer and interrupted were missing from every handler
// sample (0 of 73 here).
func TestDWARFUnwindingThroughASignalHandler(t *testing.T) {
	bin := buildNoFP(t, "signal", signalC, "main", "outer", "interrupted", "on_alarm", "in_handler")
	cfg := testConfig()
	cfg.Unwinding = UnwindingAuto
	cfg.TraceContext.Enabled = false
	r, sink := startReceiver(t, cfg)
	cmd := startSettled(t, bin, "3", r)
	_ = cmd.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tl := testworkload.TallyProcess(sink.AllProfiles(), cmd.Process.Pid)
	// main, outer, interrupted, the trampoline (named from glibc's debug
	// file, libc6-dbg, which make test installs: its address is no return
	// address, and looked up one byte before it, as one, it was in the
	// padding before the symbol), on_alarm, in_handler.
	var whole, inHandler int64
	for stack, n := range tl.Folded {
		frames := testworkload.UserFrames(stack)
		if len(frames) == 0 || frames[len(frames)-1] != "in_handler" {
			continue
		}
		inHandler += n
		if i := slices.Index(frames, "main"); i >= 0 &&
			slices.Equal(frames[i:], []string{"main", "outer", "interrupted", "__restore_rt", "on_alarm", "in_handler"}) {
			whole += n
		}
	}
	t.Logf("in_handler: %d samples, %d with main → outer → interrupted → __restore_rt → on_alarm above it; top:%s", inHandler, whole, tl.Top(3))
	if want := int64(0.1 * testworkload.ExpectedSamples(cmd, cfg.FrequencyHz)); inHandler < want {
		t.Fatalf("%d samples in in_handler, want at least %d; top:%s", inHandler, want, tl.Top(5))
	}
	if float64(whole) < 0.9*float64(inHandler) {
		t.Errorf("the interrupted code under %d of %d handler samples, want ≥ 90 %%; top:%s", whole, inHandler, tl.Top(8))
	}
}

// lazyBindC calls a libc function (rand_r: not one GCC may call once for
// the loop) through its PLT entry in a loop. Run
// with LD_BIND_NOT=1, ld.so resolves the symbol at every call and never
// writes the GOT, so much of the time goes to the lazy-binding trampoline
// (_dl_runtime_resolve_xsavec, or _xsave or _fxsave by the CPU) and the
// symbol lookup it calls (_dl_fixup, _dl_lookup_symbol_x, …): what a
// dynamically linked program does at each first call of a function, all
// through its start-up. The trampoline realigns the stack to save the
// vector registers and keeps its frame in rbx.
const lazyBindC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile long sink;
static unsigned seed = 1;

__attribute__((noinline)) void resolving(double secs) {
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 1000; i++)
			sink += rand_r(&seed);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}

__attribute__((noinline)) void outer(double secs) { resolving(secs); sink++; }

int main(int argc, char **argv) {
	printf("ready\n");
	fflush(stdout);
	SETTLE();
	outer(atof(argv[1]));
	return 0;
}
`

// A sample in the dynamic loader's lazy binding is unwound through its
// trampoline into the program: the trampoline's rows compute the CFA from
// rbx (unwindtable.RBX), which the walk takes from the sample's registers
// or from where a frame below saved it (each row says where the caller's
// rbx is). Before, those rows had no rule the kernel could follow, the
// walk fell back to the frame pointer, and code built without one lost its
// callers at the trampoline: main, outer and resolving were above none of
// the resolver's samples.
func TestDWARFUnwindingThroughLazyBinding(t *testing.T) {
	bin := testworkload.CompileC(t, "lazybind", []byte(settle+lazyBindC), "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-Wl,-z,lazy")
	cfg := testConfig()
	cfg.Unwinding = UnwindingAuto
	cfg.TraceContext.Enabled = false
	r, sink := startReceiver(t, cfg)
	cmd := testworkload.StartGated(t, bin, "3", settled(t, r), "LD_BIND_NOT=1")
	_ = cmd.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tl := testworkload.TallyProcess(sink.AllProfiles(), cmd.Process.Pid)
	// ld.so's functions are named from its debug file (libc6-dbg, which
	// make test installs).
	var whole, inResolver int64
	for stack, n := range tl.Folded {
		frames := testworkload.UserFrames(stack)
		at := slices.IndexFunc(frames, func(f string) bool { return strings.HasPrefix(f, "_dl_runtime_resolve") })
		if at < 0 {
			continue
		}
		inResolver += n
		if at >= 3 && slices.Equal(frames[at-3:at], []string{"main", "outer", "resolving"}) {
			whole += n
		}
	}
	t.Logf("%d samples in the lazy-binding trampoline or below, %d with main → outer → resolving above it; top:%s", inResolver, whole, tl.Top(3))
	if want := int64(0.1 * testworkload.ExpectedSamples(cmd, cfg.FrequencyHz)); inResolver < want {
		t.Fatalf("%d samples in the lazy-binding trampoline or below, want at least %d; top:%s", inResolver, want, tl.Top(5))
	}
	if float64(whole) < 0.9*float64(inResolver) {
		t.Errorf("the program above %d of %d of the resolver's samples, want ≥ 90 %%; top:%s", whole, inResolver, tl.Top(8))
	}
}

// deepC burns CPU at the bottom of a recursion deeper than the 127 frames
// a stack holds.
const deepC = `#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile unsigned long sink;
static double end;

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long recurse(int depth) {
	volatile char pad[16];
	pad[0] = (char)depth;
	if (depth == 0) {
		while (now() < end)
			for (int i = 0; i < 100000; i++)
				sink += i;
		return sink;
	}
	unsigned long r = recurse(depth - 1);
	return r + pad[0];
}

int main(int argc, char **argv) {
	end = now() + atof(argv[1]);
	printf("ready\n");
	fflush(stdout);
	return (int)recurse(300);
}
`

// TestUnwindTablesAtExec: once the agent has loaded a binary's table, a new
// process of that binary is unwound with it from its very first samples —
// the kernel attaches the table at exec, before the agent reads the process
// — with no settling time (HOTPATH_TEST_NO_SETTLE), and nothing read per
// process start.
func TestUnwindTablesAtExec(t *testing.T) {
	chain := buildNoFP(t, "chain", chainC, "main", "level1", "level2", "level3", "level4", "level5", "level6")
	cfg := testConfig()
	cfg.Unwinding = UnwindingAuto
	cfg.TraceContext.Enabled = false
	r, sink := startReceiver(t, cfg)

	chainID, err := fileid.Of(chain)
	if err != nil {
		t.Fatal(err)
	}
	// The first process runs until its binary's table is in the kernel (on
	// a busy machine the table is built by the worker, later than the
	// process's first sample); any table would not do: the libraries'
	// tables are loaded for the machine's other processes.
	first := testworkload.Start(t, chain, "30")
	waitFor(t, 20*time.Second, "the chain binary's unwind table loaded", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.unwind != nil && r.unwind.ExecTable(chainID)
	})
	_ = first.Process.Kill()
	_ = first.Wait()
	second := testworkload.Start(t, chain, "2", "HOTPATH_TEST_NO_SETTLE=1")
	_ = second.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := []string{"main", "level1", "level2", "level3", "level4", "level5", "level6"}
	tl := testworkload.TallyProcess(sink.AllProfiles(), second.Process.Pid)
	share, n := chainShare(tl, want)
	t.Logf("full chain above level6 in a process started after the table was loaded, with no settling: %.3f of %d samples", share, n)
	if minSamples := int64(0.25 * testworkload.ExpectedSamples(second, cfg.FrequencyHz)); n < minSamples {
		t.Fatalf("too few level6 samples (%d; want ≥ %d); top:%s", n, minSamples, tl.Top(5))
	}
	if share < 0.97 {
		t.Errorf("full chain in %.3f of level6 samples, want ≥ 0.97; top:%s", share, tl.Top(5))
	}
}

// TestStacksEndedEarlyPerProcess: a recursion 300 deep fills every stack
// (the unwinder stops at 127 frames); the agent says so per process, as the
// control endpoint's /v1/targets shows it, and in its counters.
func TestStacksEndedEarlyPerProcess(t *testing.T) {
	deep := buildNoFP(t, "deep", deepC, "recurse")
	cfg := testConfig()
	cfg.TraceContext.Enabled = false
	r, _ := startReceiver(t, cfg)
	defer r.Shutdown(context.Background())
	cmd := testworkload.Start(t, deep, "20")
	pid := cmd.Process.Pid

	deadline := time.Now().Add(15 * time.Second)
	for {
		var tg controlapi.Target
		for _, x := range r.procs.targets() {
			if x.PID == pid {
				tg = x
			}
		}
		if tg.Unwinding == "dwarf" && tg.StacksEndedEarly["truncated"] >= 10 {
			t.Logf("target: %+v", tg)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no truncated stacks counted for pid %d: %+v", pid, tg)
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.mu.Lock()
	ended := r.endedEarly
	r.mu.Unlock()
	if ended.Truncated < 10 {
		t.Errorf("receiver counters: %+v", ended)
	}
}

// On a kernel that refuses the DWARF unwinder (older than 5.17: no
// bpf_loop), unwinding: auto still samples, with frame pointers, and says
// so.
func TestAutoFallsBackToFramePointers(t *testing.T) {
	real := openSampler
	defer func() { openSampler = real }()
	var tried []bool
	openSampler = func(c sampler.Config) (*sampler.Sampler, error) {
		tried = append(tried, c.DWARFUnwind)
		if c.DWARFUnwind {
			return nil, errors.New("load BPF sampling program: unknown func bpf_loop#181")
		}
		return real(c)
	}
	cfg := testConfig()
	cfg.TraceContext.Enabled = false
	core, logs := observer.New(zap.WarnLevel)
	set := receivertest.NewNopSettings(typeStr)
	set.Logger = zap.New(core)
	r, err := newReceiver(set, cfg, new(consumertest.ProfilesSink))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer r.Shutdown(context.Background())
	if !slices.Equal(tried, []bool{true, false}) {
		t.Fatalf("sampler opened with DWARFUnwind %v, want [true false]", tried)
	}
	if r.unwind != nil || r.sampler == nil {
		t.Fatalf("unwinder %v, sampler %v: want sampling without tables", r.unwind, r.sampler)
	}
	if logs.FilterMessageSnippet("could not load its DWARF unwinder").Len() != 1 {
		t.Errorf("no warning; logs: %v", logs.All())
	}
}

// cgoGo is a Go program whose CPU goes to C built without frame pointers
// (as the C and C++ linked into cgo binaries usually is: DuckDB, SQLite).
const cgoGo = `package main

/*
#cgo CFLAGS: -O2 -fomit-frame-pointer
volatile unsigned long csink;
__attribute__((noinline)) static unsigned long burn_leaf(unsigned long x) {
	for (int i = 0; i < 100000; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}
__attribute__((noinline)) static unsigned long burn_mid(unsigned long x) {
	volatile char pad[40];
	pad[0] = (char)x;
	unsigned long r = burn_leaf(x + pad[0]);
	csink += pad[39];
	return r + 1;
}
unsigned long burn(unsigned long x) { return burn_mid(x) + 1; }
*/
import "C"

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	fmt.Println("ready")
	// See settle: spin (outside burn_leaf) until the test says go.
	var started atomic.Bool
	go func() { bufio.NewReader(os.Stdin).ReadString('\n'); started.Store(true) }()
	for !started.Load() {
	}
	end := time.Now().Add(time.Duration(secs * float64(time.Second)))
	var x C.ulong
	for time.Now().Before(end) {
		x = C.burn(x)
	}
}
`

// TestCgoBinary: a Go binary's C part without frame pointers is unwound
// from the binary's own .eh_frame (Go code has no FDEs and keeps the
// frame-pointer steps).
func TestCgoBinary(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"main.go": cgoGo, "go.mod": "module cgoburn\n\ngo 1.26\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "cgoburn")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir, build.Env = dir, append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fpCfg, autoCfg := testConfig(), testConfig()
	fpCfg.Unwinding, autoCfg.Unwinding = UnwindingFramePointer, UnwindingAuto
	fpCfg.TraceContext.Enabled, autoCfg.TraceContext.Enabled = false, false
	fp, fpSink := startReceiver(t, fpCfg)
	auto, autoSink := startReceiver(t, autoCfg)
	cmd := startSettled(t, bin, "3", fp, auto)
	_ = cmd.Wait()
	for _, r := range []*profileReceiver{fp, auto} {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	autoT := testworkload.TallyProcess(autoSink.AllProfiles(), cmd.Process.Pid)
	fpT := testworkload.TallyProcess(fpSink.AllProfiles(), cmd.Process.Pid)
	want := []string{"burn", "burn_mid", "burn_leaf"}
	autoShare, autoN := chainShare(autoT, want)
	fpShare, fpN := chainShare(fpT, want)
	t.Logf("burn;burn_mid;burn_leaf: auto %.3f of %d samples, frame_pointer %.3f of %d; auto top:%s", autoShare, autoN, fpShare, fpN, autoT.Top(3))
	if min := int64(0.25 * testworkload.ExpectedSamples(cmd, autoCfg.FrequencyHz)); autoN < min {
		t.Fatalf("too few burn_leaf samples (%d, want ≥ %d); top:%s", autoN, min, autoT.Top(5))
	}
	if autoShare < 0.95 {
		t.Errorf("auto: C chain in %.3f of burn_leaf samples, want ≥ 0.95; top:%s", autoShare, autoT.Top(5))
	}
	if fpShare > 0.5 {
		t.Errorf("frame_pointer: C chain in %.3f of samples; expected broken stacks; top:%s", fpShare, fpT.Top(5))
	}
}
