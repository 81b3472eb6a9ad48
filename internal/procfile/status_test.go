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
