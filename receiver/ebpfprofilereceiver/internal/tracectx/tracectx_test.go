//go:build linux && privileged

package tracectx

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/overlaytest"
	sdk "github.com/hotpath-dev/hotpath/sdk/go/tracectx"
)

// These tests load real BPF programs and attach real uprobes (to this test
// binary, which links the Go SDK, and to a C program built here). They need
// root and fail, not skip, without it.

// testBPFFS mounts a private bpffs instance (through OpenMaps' own mount
// path) so tests never touch the host's /sys/fs/bpf.
func testBPFFS(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := ensureBPFFS(dir); err != nil {
		t.Fatalf("mount test bpffs (these tests need root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	return dir
}

func openTestMaps(t testing.TB) *Maps {
	t.Helper()
	m, err := OpenMaps(testBPFFS(t))
	if err != nil {
		t.Fatalf("OpenMaps: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func openProbes(t testing.TB, m *Maps) *Probes {
	t.Helper()
	p, err := NewProbes(m, nil)
	if err != nil {
		t.Fatalf("NewProbes: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var testSpan = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID: trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
	SpanID:  trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
})

// goEntries returns this process's go_traces entries. It reports errors
// with Errorf: tests call it from locked goroutines.
func goEntries(t testing.TB, m *Maps) map[traceCtxGoTraceKey]traceCtxTraceCtx {
	t.Helper()
	out := map[traceCtxGoTraceKey]traceCtxTraceCtx{}
	var k traceCtxGoTraceKey
	var v traceCtxTraceCtx
	it := m.Goroutines.Iterate()
	for it.Next(&k, &v) {
		if k.Tgid == uint32(os.Getpid()) {
			out[k] = v
		}
	}
	if err := it.Err(); err != nil {
		t.Errorf("iterate go_traces: %v", err)
	}
	return out
}

func TestOpenMapsPinsOnceAndShares(t *testing.T) {
	fs := testBPFFS(t)
	a, err := OpenMaps(fs)
	if err != nil {
		t.Fatalf("first OpenMaps: %v", err)
	}
	defer a.Close()
	if !a.Created || a.PinPath != filepath.Join(fs, "otel", "traces_ctx_v1") {
		t.Fatalf("first open: Created=%v PinPath=%s", a.Created, a.PinPath)
	}
	b, err := OpenMaps(fs)
	if err != nil {
		t.Fatalf("second OpenMaps: %v", err)
	}
	defer b.Close()
	if b.Created {
		t.Error("second open created the map again instead of opening the pinned one")
	}
	// What one user writes, the other (and any tool opening the pin) reads.
	key := uint64(42)<<32 | 43
	val := traceCtxTraceCtx{TraceId: [16]byte{1, 2, 3}, SpanId: [8]byte{4}}
	if err := a.Threads.Put(key, val); err != nil {
		t.Fatal(err)
	}
	pinned, err := ebpf.LoadPinnedMap(a.PinPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pinned.Close()
	var got traceCtxTraceCtx
	if err := pinned.Lookup(key, &got); err != nil || got != val {
		t.Errorf("pinned map lookup = %+v, %v; want %+v", got, err, val)
	}
	info, err := pinned.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != ebpf.LRUHash || info.KeySize != 8 || info.ValueSize != 24 || info.MaxEntries != 16384 {
		t.Errorf("pinned map %+v: want LRU hash, key 8, value 24, 16384 entries (the OBI layout)", info)
	}
}

func TestOpenMapsRejectsIncompatiblePin(t *testing.T) {
	fs := testBPFFS(t)
	if err := os.MkdirAll(filepath.Join(fs, "otel"), 0o755); err != nil {
		t.Fatal(err)
	}
	other, err := ebpf.NewMap(&ebpf.MapSpec{Name: "traces_ctx_v1", Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.Pin(filepath.Join(fs, "otel", "traces_ctx_v1")); err != nil {
		t.Fatal(err)
	}
	_, err = OpenMaps(fs)
	if err == nil || !strings.Contains(err.Error(), "different layout") {
		t.Fatalf("OpenMaps over an incompatible pin: %v, want a layout error", err)
	}
}

// The Go SDK in this very test binary: attach, then Set/Clear on a locked
// goroutine must write and delete its go_traces entry.
func TestGoMarkersWriteGoroutineMap(t *testing.T) {
	m := openTestMaps(t)
	p := openProbes(t, m)
	if err := p.Observe(os.Getpid()); err != nil {
		t.Fatalf("Observe(self): %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(p.Attached(), func(s string) bool { return strings.HasSuffix(s, self) }) {
		t.Fatalf("test binary %s not attached; attached: %v", self, p.Attached())
	}

	type result struct {
		during, after map[traceCtxGoTraceKey]traceCtxTraceCtx
	}
	done := make(chan result)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var r result
		sdk.Do(trace.ContextWithSpanContext(context.Background(), testSpan), func(context.Context) {
			r.during = goEntries(t, m)
		})
		r.after = goEntries(t, m)
		done <- r
	}()
	r := <-done
	want := traceCtxTraceCtx{TraceId: testSpan.TraceID(), SpanId: testSpan.SpanID()}
	if len(r.during) != 1 {
		t.Fatalf("inside Do: %d go_traces entries for this process, want 1: %v", len(r.during), r.during)
	}
	for k, v := range r.during {
		if v != want || k.G == 0 {
			t.Errorf("inside Do: entry %+v = %+v, want g != 0 and %+v", k, v, want)
		}
	}
	if len(r.after) != 0 {
		t.Errorf("after Do: %d entries left: %v", len(r.after), r.after)
	}
	st, err := p.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Set < 1 || st.Clear < 1 || st.ReadFailed != 0 || st.NoGoroutine != 0 {
		t.Errorf("marker stats %+v: want set and clear seen, no failures", st)
	}

	// Exit detaches the binary and purges what the process left behind.
	sdk.Set(testSpan) // never cleared
	if len(goEntries(t, m)) != 1 {
		t.Fatal("Set without Clear left no entry")
	}
	if err := p.Exit(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if n := len(goEntries(t, m)); n != 0 {
		t.Errorf("Exit left %d goroutine entries", n)
	}
	if a := p.Attached(); len(a) != 0 {
		t.Errorf("still attached after the only process exited: %v", a)
	}
	sdk.Set(testSpan)
	defer sdk.Clear()
	if n := len(goEntries(t, m)); n != 0 {
		t.Errorf("marker still instrumented after detach: %d entries", n)
	}
}

func TestCMarkersWriteThreadMap(t *testing.T) {
	bin := buildC(t, cProgram)
	if ms, err := FindMarkers(bin); err != nil || len(ms) != 1 || ms[0].Flavor != FlavorC {
		t.Fatalf("FindMarkers(C program) = %+v, %v; want one C marker pair", ms, err)
	}
	m := openTestMaps(t)
	p := openProbes(t, m)

	cmd := exec.Command(bin, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	out := bufio.NewReader(stdout)
	expect := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("C program said %q (%v), want %q", line, err, want)
		}
	}
	expect("ready")
	if err := p.Observe(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	key := uint64(cmd.Process.Pid)<<32 | uint64(cmd.Process.Pid)
	io.WriteString(stdin, "go\n")
	expect("set")
	var got traceCtxTraceCtx
	if err := m.Threads.Lookup(key, &got); err != nil {
		t.Fatalf("no traces_ctx_v1 entry for the C thread after set: %v", err)
	}
	if want := (traceCtxTraceCtx{TraceId: testSpan.TraceID(), SpanId: testSpan.SpanID()}); got != want {
		t.Errorf("entry %+v, want %+v", got, want)
	}
	io.WriteString(stdin, "go\n")
	expect("cleared")
	if err := m.Threads.Lookup(key, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("entry still there after clear: %+v, %v", got, err)
	}
}

// Nested Do on one goroutine: inside, the inner span is marked; after it,
// the outer span again. Repeated so the kernel's optimized uprobe path (a
// trampoline call instead of a trap, after the first hit) is exercised too.
func TestGoNestedDoRestoresOuter(t *testing.T) {
	m := openTestMaps(t)
	p := openProbes(t, m)
	if err := p.Observe(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	inner := trace.NewSpanContext(trace.SpanContextConfig{TraceID: testSpan.TraceID(), SpanID: trace.SpanID{9, 9}})
	value := func(sc trace.SpanContext) traceCtxTraceCtx {
		return traceCtxTraceCtx{TraceId: sc.TraceID(), SpanId: sc.SpanID()}
	}
	only := func(what string, want traceCtxTraceCtx) {
		t.Helper()
		got := goEntries(t, m)
		if len(got) != 1 {
			t.Errorf("%s: %d entries, want 1: %v", what, len(got), got)
		}
		for _, v := range got {
			if v != want {
				t.Errorf("%s: entry %+v, want %+v", what, v, want)
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range 5 {
			outerCtx := trace.ContextWithSpanContext(context.Background(), testSpan)
			sdk.Do(outerCtx, func(ctx context.Context) {
				only("outer", value(testSpan))
				sdk.Do(trace.ContextWithSpanContext(ctx, inner), func(context.Context) {
					only("inner", value(inner))
				})
				only("outer after inner", value(testSpan))
			})
			if n := len(goEntries(t, m)); n != 0 {
				t.Errorf("after Do: %d entries left", n)
			}
		}
	}()
	<-done
}

// Two containers of one image run its binary (C markers) from overlay
// mounts of their own over one lower layer, each in a private mount
// namespace: two file identities (two device numbers), one file underneath.
// The uprobes are attached once, they fire in both containers (the kernel
// attaches them to the file underneath), and they stay while either runs.
func TestOverlayContainersShareUprobes(t *testing.T) {
	im := overlaytest.NewImage(t, buildC(t, cProgram), "marked")
	m := openTestMaps(t)
	p := openProbes(t, m)

	type container struct {
		pid   int
		stdin io.Writer
		out   *bufio.Reader
	}
	expect := func(c container, want string) {
		t.Helper()
		line, err := c.out.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("container (pid %d) said %q (%v), want %q", c.pid, line, err, want)
		}
	}
	var cs []container
	for i := range 2 {
		cmd := im.Command(t, i, "marked", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		c := container{pid: cmd.Process.Pid, stdin: stdin, out: bufio.NewReader(stdout)}
		expect(c, "ready")
		if err := p.Observe(c.pid); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	p.mu.Lock()
	views, bins := len(p.bins), map[*binary]bool{}
	for _, b := range p.bins {
		bins[b] = true
	}
	p.mu.Unlock()
	if views != 2 || len(bins) != 1 {
		t.Fatalf("%d file identities, %d attached binaries; want the two containers' files attached once", views, len(bins))
	}
	if got := p.Attached(); len(got) != 1 {
		t.Errorf("Attached() = %q, want one binary", got)
	}

	// The second container's calls fire the uprobes attached through the
	// first's file; once the first exits they stay for the second.
	c := cs[1]
	key := uint64(c.pid)<<32 | uint64(c.pid)
	io.WriteString(c.stdin, "go\n")
	expect(c, "set")
	var got traceCtxTraceCtx
	if err := m.Threads.Lookup(key, &got); err != nil {
		t.Fatalf("no traces_ctx_v1 entry for the second container's thread after set: %v", err)
	}
	if err := p.Exit(cs[0].pid); err != nil {
		t.Fatal(err)
	}
	if got := p.Attached(); len(got) != 1 {
		t.Fatalf("after the first container exited: Attached() = %q, want its binary still attached", got)
	}
	io.WriteString(c.stdin, "go\n")
	expect(c, "cleared")
	if err := m.Threads.Lookup(key, &got); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("entry still there after clear: %+v, %v", got, err)
	}
	if err := p.Exit(c.pid); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.bins) != 0 || len(p.byFile) != 0 {
		t.Errorf("after both exited: %d identities, %d files still attached", len(p.bins), len(p.byFile))
	}
}
