package procfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadStatusOfThisProcess: this test's own status, whose answers are
// known: its pid (no PID namespace of its own), its effective uid, and
// SIGQUIT handled (the Go runtime installs a handler for it) while a
// signal Go leaves alone is not.
func TestReadStatusOfThisProcess(t *testing.T) {
	st, err := ReadStatus("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	if st.NSPID != os.Getpid() || st.UID != uint32(os.Geteuid()) {
		t.Errorf("ReadStatus = %+v, want NSpid %d, Uid %d", st, os.Getpid(), os.Geteuid())
	}
	if !st.Handles(int(syscall.SIGQUIT)) {
		t.Errorf("SIGQUIT not handled: SigCgt %#x", st.SigCgt)
	}
	if st.Handles(0) || st.Handles(65) {
		t.Error("signals 0 and 65 reported handled")
	}
}

// TestReadStatusRefusesMalformed: a status with no NSpid, no Uid, or a
// field that is not a number is an error naming the file and the field.
func TestReadStatusRefusesMalformed(t *testing.T) {
	for name, body := range map[string]string{
		"no NSpid":       "Name:\tx\nUid:\t0\t0\t0\t0\n",
		"no Uid":         "Name:\tx\nNSpid:\t12\t1\n",
		"NSpid not int":  "NSpid:\t12\tx\nUid:\t0\t0\t0\t0\n",
		"Uid short":      "NSpid:\t12\nUid:\t0\n",
		"SigCgt not hex": "NSpid:\t12\nUid:\t0\t0\t0\t0\nSigCgt:\tzz\n",
	} {
		path := filepath.Join(t.TempDir(), "status")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadStatus(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: ReadStatus = %v, want an error naming %s", name, err, path)
		}
	}
	// The innermost namespace's pid is the last field.
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, []byte("NSpid:\t4242\t17\t1\nUid:\t1000\t1001\t1000\t1000\nSigCgt:\t0000000000000004\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(path)
	if err != nil || st.NSPID != 1 || st.UID != 1001 || !st.Handles(3) || st.Handles(2) {
		t.Errorf("ReadStatus = %+v, %v; want NSpid 1, effective uid 1001, signal 3 only", st, err)
	}
}

// TestReadStatOfThisProcess: this test's own stat, read while it runs: its
// command name (as /proc/self/comm gives it), state R or S (the file
// gives the main thread's, which may be waiting while this goroutine runs
// on another thread) and a start time
// that does not change between reads. A name holding parentheses and
// spaces ends at the last ')'; a malformed or short line is an error.
func TestReadStatOfThisProcess(t *testing.T) {
	st, err := ReadStat("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	if st.Comm != strings.TrimSuffix(string(comm), "\n") || (st.State != 'R' && st.State != 'S') || st.StartTime == 0 {
		t.Errorf("ReadStat(/proc/self/stat) = %+v (state %c); want comm %q, state R or S, a start time", st, st.State, comm)
	}
	if again, err := ReadStat("/proc/self/stat"); err != nil || again.StartTime != st.StartTime {
		t.Errorf("start time %d, then %d (%v)", st.StartTime, again.StartTime, err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"odd":       "7 (my (odd) name) Z 1 7 7 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 100\n",
		"short":     "8 (x) S 1 2 3\n",
		"no-parens": "9 no parens here\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := ReadStat(filepath.Join(dir, "odd")); err != nil || st != (Stat{Comm: "my (odd) name", State: 'Z', StartTime: 987654}) {
		t.Errorf("ReadStat(odd) = %+v, %v", st, err)
	}
	for _, name := range []string{"short", "no-parens", "missing"} {
		if _, err := ReadStat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
