package perfmap

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestParseLine(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Symbol
	}{
		{"7fdb9a7c6180 298 JS:*hotA /tmp/x.js:1:14\n", Symbol{0x7fdb9a7c6180, 0x7fdb9a7c6180 + 0x298, "JS:*hotA /tmp/x.js:1:14"}},
		{"0x00007f3c1d00a6a0 0x1e0 Main::hotA", Symbol{0x7f3c1d00a6a0, 0x7f3c1d00a6a0 + 0x1e0, "Main::hotA"}},
		{"10 8 py::f:/a b/c.py\r\n", Symbol{0x10, 0x18, "py::f:/a b/c.py"}},
		{"10 8 bad\x01name\xff", Symbol{0x10, 0x18, "bad?name?"}},
	} {
		got, err := ParseLine([]byte(tc.line), 512)
		if err != nil || got != tc.want {
			t.Errorf("ParseLine(%q) = %+v, %v; want %+v", tc.line, got, err, tc.want)
		}
	}
	for _, bad := range []string{
		"", "garbage", "10 8", "10 8 ", "zz 8 f", "10 zz f", "10 0 f",
		"ffffffffffffffff 2 wraps", "1 10000000000000000 f", "-1 8 f",
		"0x 8 f", strings.Repeat("f", 17) + " 8 f",
	} {
		if s, err := ParseLine([]byte(bad), 512); err == nil {
			t.Errorf("ParseLine(%q) = %+v, want an error", bad, s)
		}
	}
	long, err := ParseLine([]byte("10 8 "+strings.Repeat("x", 100)), 10)
	if err != nil || long.Name != strings.Repeat("x", 10)+"…" {
		t.Errorf("long name: %q %v", long.Name, err)
	}
}

func TestMergeNewerWins(t *testing.T) {
	var tb table
	tb, _ = tb.merge([]Symbol{{0x100, 0x200, "a"}, {0x300, 0x400, "b"}, {0x180, 0x280, "a2"}}, 0)
	// a2 replaced a (overlap, newer); b stays.
	for addr, want := range map[uint64]string{0x100: "", 0x190: "a2", 0x27f: "a2", 0x280: "", 0x3ff: "b"} {
		s, ok := tb.lookup(addr)
		if got := map[bool]string{true: s.Name}[ok]; got != want {
			t.Errorf("lookup(%#x) = %q, want %q", addr, got, want)
		}
	}
	// A later batch overrides older entries too, and an older entry never
	// overrides a newer one.
	tb, _ = tb.merge([]Symbol{{0x350, 0x360, "c"}}, 0)
	if s, ok := tb.lookup(0x300); ok {
		t.Errorf("b survived its replacement: %+v", s)
	}
	if s, _ := tb.lookup(0x355); s.Name != "c" {
		t.Errorf("lookup(0x355) = %+v", s)
	}
	// The bound keeps the newest.
	tb, dropped := tb.merge([]Symbol{{0x1000, 0x1010, "d"}, {0x2000, 0x2010, "e"}}, 2)
	if dropped != 2 || len(tb) != 2 || tb[0].Name != "d" || tb[1].Name != "e" {
		t.Errorf("bounded merge: %+v, dropped %d", tb, dropped)
	}
}

func TestDescribe(t *testing.T) {
	for name, want := range map[string]Frame{
		"JS:*hotA /tmp/x.js:1:14":                {"hotA", "/tmp/x.js", 1},
		"JS:^hotB file:///srv/a:b.mjs:20:3":      {"hotB", "file:///srv/a:b.mjs", 20},
		"JS:*'hotA /tmp/x.js:1:14":               {"hotA", "/tmp/x.js", 1}, // node 24: context-specialized TurboFan code
		"JS:+'timed /tmp/x.js:2:15":              {"timed", "/tmp/x.js", 2},
		"LazyCompile:~f /x.js:3:1":               {"f", "/x.js", 3},
		"JS:* /x.js:3:1":                         {"(anonymous)", "/x.js", 3},
		"py::hot_a:/srv/app.py":                  {"hot_a", "/srv/app.py", 0},
		"Builtin:ArgumentsAdaptorTrampoline":     {"Builtin:ArgumentsAdaptorTrampoline", "", 0},
		"Main::hotA":                             {"Main::hotA", "", 0},
		"py::":                                   {"py::", "", 0},
		"[unknown] void Foo.Bar(int)[Optimized]": {"[unknown] void Foo.Bar(int)[Optimized]", "", 0},
	} {
		if got := Describe(name); got != want {
			t.Errorf("Describe(%q) = %+v, want %+v", name, got, want)
		}
	}
}

// fakeProc lays out procRoot/PID/{status,root/tmp} for a process that sees
// itself as nspid and runs as uid.
func fakeProc(t *testing.T, pid, nspid int, uid int) (procRoot, tmp string) {
	t.Helper()
	procRoot = t.TempDir()
	dir := filepath.Join(procRoot, fmt.Sprint(pid))
	tmp = filepath.Join(dir, "root", "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	status := fmt.Sprintf("Name:\tnode\nNSpid:\t%d\t%d\nUid:\t%d\t%d\t%d\t%d\n", pid, nspid, uid, uid, uid, uid)
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	return procRoot, tmp
}

func appendFile(t *testing.T, path, text string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func lookupName(m *Map, addr uint64) string {
	s, _ := m.Lookup(addr, time.Now())
	return s.Name
}

// The file is named with the pid the process sees (NSpid), read as it
// grows (a partial last line waits for its end), and read again from the
// start when it is replaced.
func TestMapGrowsAndUsesNamespacePID(t *testing.T) {
	procRoot, tmp := fakeProc(t, 4242, 7, os.Getuid())
	path := filepath.Join(tmp, "perf-7.map")
	m := New(procRoot, 4242, DefaultLimits)
	if name := lookupName(m, 0x100); name != "" {
		t.Fatalf("no file yet, got %q", name)
	}
	if st, err := m.Stats(); st.Present || err != nil {
		t.Fatalf("missing file: %+v %v", st, err)
	}
	appendFile(t, path, "100 10 first\n200 10 sec")
	if name := lookupName(m, 0x105); name != "first" {
		t.Fatalf("lookup = %q", name)
	}
	if name := lookupName(m, 0x205); name != "" {
		t.Fatalf("partial line was used: %q", name)
	}
	appendFile(t, path, "ond\n")
	if name := lookupName(m, 0x205); name != "second" {
		t.Fatalf("after growth: %q", name)
	}
	// Not re-read for a miss in the same interval.
	appendFile(t, path, "300 10 third\n")
	if s, ok := m.Lookup(0x305, time.Now().Add(-time.Hour)); ok {
		t.Fatalf("re-read although fresh: %+v", s)
	}
	if name := lookupName(m, 0x305); name != "third" {
		t.Fatalf("third: %q", name)
	}
	if m.Path() != "/tmp/perf-7.map" {
		t.Errorf("path %q", m.Path())
	}
	// Replaced by a new file: its content only.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	appendFile(t, path, "400 10 fourth\n")
	if name := lookupName(m, 0x405); name != "fourth" {
		t.Fatalf("new file: %q", name)
	}
	if name := lookupName(m, 0x105); name != "" {
		t.Errorf("old file's entry survived: %q", name)
	}
}

// A file rewritten in place and left larger (HotSpot's Compiler.perfmap
// truncates its map and writes every entry again) passes for one that grew:
// read from where the last read stopped, it loses the new entries before
// that point. Reread makes the next lookup read it whole.
func TestMapRereadAfterRewriteInPlace(t *testing.T) {
	procRoot, tmp := fakeProc(t, 13, 13, os.Getuid())
	path := filepath.Join(tmp, "perf-13.map")
	appendFile(t, path, "1000 10 Busy.old\n")
	m := New(procRoot, 13, DefaultLimits)
	if name := lookupName(m, 0x1005); name != "Busy.old" {
		t.Fatalf("before the rewrite: %q", name)
	}
	rewrite := "2000 10 Busy.spin\n1000 10 Busy.recompiled\n3000 10 Busy.more\n"
	if err := os.WriteFile(path, []byte(rewrite), 0o644); err != nil { // same inode, truncated
		t.Fatal(err)
	}
	m.Reread()
	for addr, want := range map[uint64]string{0x2005: "Busy.spin", 0x1005: "Busy.recompiled", 0x3005: "Busy.more"} {
		if name := lookupName(m, addr); name != want {
			t.Errorf("after Reread, %#x named %q, want %q", addr, name, want)
		}
	}
}

// Code memory freed and reused: the runtime appends the new code's entry
// over the old one's range. A lookup in a later interval reads it although
// the address was already known, and names the new code; within the
// interval the map was read in, the file is not read again.
func TestMapReusedCodeNamedByItsNewEntry(t *testing.T) {
	procRoot, tmp := fakeProc(t, 12, 12, os.Getuid())
	path := filepath.Join(tmp, "perf-12.map")
	appendFile(t, path, "100 40 JS:*hotA /srv/app.js:1:1\n")
	m := New(procRoot, 12, DefaultLimits)
	if name := lookupName(m, 0x110); name != "JS:*hotA /srv/app.js:1:1" {
		t.Fatalf("before reuse: %q", name)
	}
	appendFile(t, path, "100 20 JS:*hotB /srv/app.js:2:1\n")
	if s, _ := m.Lookup(0x110, time.Now().Add(-time.Hour)); s.Name != "JS:*hotA /srv/app.js:1:1" {
		t.Fatalf("re-read within the interval the map was read in: %q", s.Name)
	}
	if name := lookupName(m, 0x110); name != "JS:*hotB /srv/app.js:2:1" {
		t.Errorf("reused code named %q, want its new entry's name", name)
	}
	// The old entry is dropped whole: its range beyond the new one's
	// names nothing (merge).
	if name := lookupName(m, 0x130); name != "" {
		t.Errorf("the freed entry's rest named %q", name)
	}
}

// Hostile content: garbage lines, overlong lines, binary junk are counted
// and skipped; the good entries around them still work.
func TestMapHostileLines(t *testing.T) {
	procRoot, tmp := fakeProc(t, 10, 10, os.Getuid())
	lim := DefaultLimits
	lim.MaxLineBytes = 128
	var b strings.Builder
	b.WriteString("100 10 good1\n")
	b.WriteString("not a line at all\n")
	b.WriteString(strings.Repeat("A", 10_000) + "\n")
	b.WriteString("\x00\x01\x02\xff\xfe\n")
	b.WriteString("ffffffffffffffff 10 wraps\n")
	b.WriteString("200 10 good2\n")
	appendFile(t, filepath.Join(tmp, "perf-10.map"), b.String())
	m := New(procRoot, 10, lim)
	if lookupName(m, 0x100) != "good1" || lookupName(m, 0x20f) != "good2" {
		t.Fatalf("good entries lost: %+v", m.syms)
	}
	st, err := m.Stats()
	if err != nil || st.Rejected != 4 || st.Symbols != 2 {
		t.Errorf("stats %+v %v, want 4 rejected, 2 symbols", st, err)
	}
}

// A file far larger than the read limit costs at most the limit: its tail
// (the newest code) is read, the rest skipped and counted.
func TestMapHugeFile(t *testing.T) {
	procRoot, tmp := fakeProc(t, 11, 11, os.Getuid())
	lim := DefaultLimits
	lim.MaxReadBytes = 64 << 10
	lim.MaxSymbols = 1000
	f, err := os.Create(filepath.Join(tmp, "perf-11.map"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000 // ~5 MB
	for i := range n {
		fmt.Fprintf(f, "%x 10 fn%d\n", 0x10000+i*0x10, i)
	}
	f.Close()
	m := New(procRoot, 11, lim)
	last := uint64(0x10000 + (n-1)*0x10)
	if name := lookupName(m, last); name != fmt.Sprintf("fn%d", n-1) {
		t.Fatalf("newest entry: %q", name)
	}
	if name := lookupName(m, 0x10000); name != "" {
		t.Errorf("head of a huge file was read: %q", name)
	}
	st, _ := m.Stats()
	if st.Symbols > lim.MaxSymbols || st.Skipped == 0 || st.Dropped == 0 {
		t.Errorf("stats %+v: want ≤ %d symbols, bytes skipped, symbols dropped", st, lim.MaxSymbols)
	}
	if m.offset != fileSize(t, filepath.Join(tmp, "perf-11.map")) {
		t.Errorf("offset %d", m.offset)
	}
}

func fileSize(t *testing.T, path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// A perf map that is a symlink, sits behind a symlinked /tmp pointing out
// of the process's root, or is a FIFO is never read (another user's file:
// TestMapRefusesAnotherUsersFile, which needs root to chown).
func TestMapRefusesWhatIsNotTheProcesssOwnFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "secret.map")
	appendFile(t, secret, "100 10 agent_side_secret\n")

	t.Run("symlink_file", func(t *testing.T) {
		procRoot, tmp := fakeProc(t, 20, 20, os.Getuid())
		if err := os.Symlink(secret, filepath.Join(tmp, "perf-20.map")); err != nil {
			t.Fatal(err)
		}
		m := New(procRoot, 20, DefaultLimits)
		if name := lookupName(m, 0x105); name != "" {
			t.Fatalf("followed a symlink: %q", name)
		}
		if _, err := m.Stats(); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("error %v, want one naming the symlink", err)
		}
	})
	t.Run("symlinked_tmp_stays_in_root", func(t *testing.T) {
		procRoot, tmp := fakeProc(t, 21, 21, os.Getuid())
		if err := os.Remove(tmp); err != nil {
			t.Fatal(err)
		}
		// /tmp → the directory holding the agent-side file, as an
		// absolute path: inside the process's root that path does not
		// exist.
		outside := t.TempDir()
		appendFile(t, filepath.Join(outside, "perf-21.map"), "100 10 agent_side_secret\n")
		if err := os.Symlink(outside, tmp); err != nil {
			t.Fatal(err)
		}
		m := New(procRoot, 21, DefaultLimits)
		if name := lookupName(m, 0x105); name != "" {
			t.Fatalf("left the process's root: %q", name)
		}
	})
	t.Run("fifo", func(t *testing.T) {
		procRoot, tmp := fakeProc(t, 22, 22, os.Getuid())
		if err := syscall.Mkfifo(filepath.Join(tmp, "perf-22.map"), 0o644); err != nil {
			t.Fatal(err)
		}
		m := New(procRoot, 22, DefaultLimits)
		done := make(chan string)
		go func() { done <- lookupName(m, 0x105) }()
		select {
		case name := <-done:
			if name != "" {
				t.Fatalf("read a FIFO: %q", name)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("blocked on a FIFO")
		}
		if _, err := m.Stats(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("error %v", err)
		}
	})
}

// A process that exited before its map was first looked for has no map and
// no error: its samples are not reported as JIT frames left unnamed.
func TestMapOfExitedProcess(t *testing.T) {
	m := New(t.TempDir(), 4343, DefaultLimits)
	if name := lookupName(m, 0x100); name != "" {
		t.Fatalf("lookup in an exited process's map = %q", name)
	}
	if st, err := m.Stats(); st.Present || st.Symbols != 0 || err != nil {
		t.Fatalf("exited process: %+v %v", st, err)
	}
}

// A process that exits before its map is first read (a script of a few
// seconds; the agent reads maps at the end of an interval): what it wrote
// until its end is read from the file Hold opened while it ran, which /proc
// no longer leads to. Close releases the file and ends holding.
func TestMapHeldAfterProcessExit(t *testing.T) {
	procRoot, tmp := fakeProc(t, 21, 21, os.Getuid())
	path := filepath.Join(tmp, "perf-21.map")
	m := New(procRoot, 21, DefaultLimits)
	if err := m.Hold(); err != nil || m.Held() {
		t.Fatalf("no map yet: held %v, error %v", m.Held(), err)
	}
	appendFile(t, path, "100 10 early\n")
	if err := m.Hold(); err != nil || !m.Held() {
		t.Fatalf("map written: held %v, error %v", m.Held(), err)
	}
	appendFile(t, path, "200 10 late\n")
	// The process exits: its /proc directory goes, and the way to its /tmp.
	if err := os.RemoveAll(filepath.Join(procRoot, "21")); err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[uint64]string{0x105: "early", 0x205: "late"} {
		if name := lookupName(m, addr); name != want {
			t.Errorf("after the exit, %#x named %q, want %q", addr, name, want)
		}
	}
	if st, err := m.Stats(); !st.Present || st.Symbols != 2 || err != nil {
		t.Errorf("after the exit: %+v %v", st, err)
	}
	if err := m.Close(); err != nil || m.Held() {
		t.Fatalf("Close: held %v, error %v", m.Held(), err)
	}
	if name := lookupName(m, 0x105); name != "early" {
		t.Errorf("entries read before Close: %#x named %q", 0x105, name)
	}
}

// A map read once (at an interval's end) stays open: what the runtime
// appends in its last interval is read after it exited.
func TestMapReadStaysOpenForTheLastInterval(t *testing.T) {
	procRoot, tmp := fakeProc(t, 22, 22, os.Getuid())
	path := filepath.Join(tmp, "perf-22.map")
	appendFile(t, path, "100 10 first\n")
	m := New(procRoot, 22, DefaultLimits)
	defer m.Close()
	if name := lookupName(m, 0x105); name != "first" {
		t.Fatalf("first read: %q", name)
	}
	appendFile(t, path, "200 10 last\n")
	if err := os.RemoveAll(filepath.Join(procRoot, "22")); err != nil {
		t.Fatal(err)
	}
	if name := lookupName(m, 0x205); name != "last" {
		t.Errorf("entry written in the last interval: %q", name)
	}
}
