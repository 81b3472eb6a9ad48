package procinfo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestServiceFromEnviron(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"A=1\x00OTEL_SERVICE_NAME=checkout\x00", "checkout"},
		{"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=prod,service.name=cart\x00", "cart"},
		{"OTEL_RESOURCE_ATTRIBUTES=service.name=cart\x00OTEL_SERVICE_NAME=checkout\x00", "checkout"},
		{"OTEL_SERVICE_NAME=\x00", ""},
		{"PATH=/bin\x00", ""},
	} {
		if got := serviceFromEnviron([]byte(tc.env)); got != tc.want {
			t.Errorf("serviceFromEnviron(%q) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

// readStarted reads a child process until done says its exec has finished,
// for up to 30 s: Start returns once exec has closed the child's
// close-on-exec pipe, which the kernel does before it lays out the new
// program's environment and executable link.
func readStarted(t *testing.T, pid int, done func(Info) bool) Info {
	t.Helper()
	var info Info
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var err error
		if info, err = Read("/proc", pid, 0); err != nil {
			t.Fatal(err)
		}
		if done(info) {
			break
		}
	}
	return info
}

// A real child process: its executable, and the service name it got from its
// environment.
func TestReadRealProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(sleep, "30")
	cmd.Env = append(os.Environ(), "OTEL_SERVICE_NAME=sleepy")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	info := readStarted(t, cmd.Process.Pid, func(info Info) bool { return info.EnvService != "" })
	want, _ := filepath.EvalSymlinks(sleep)
	if info.ExePath != want || info.ExeName != filepath.Base(want) {
		t.Errorf("exe = %q (%q), want %q", info.ExePath, info.ExeName, want)
	}
	if info.EnvService != "sleepy" {
		t.Errorf("EnvService = %q, want sleepy", info.EnvService)
	}

	_, start, err := ReadStat("/proc", cmd.Process.Pid)
	if err != nil || info.StartTime != start || info.Comm != "sleep" {
		t.Errorf("start time %d, comm %q; want %d (%v) and sleep from /proc/PID/stat", info.StartTime, info.Comm, start, err)
	}
	// With the start time the kernel reported, stat is not read: no comm.
	if given, err := Read("/proc", cmd.Process.Pid, start); err != nil || given.StartTime != start || given.Comm != "" ||
		given.ExePath != info.ExePath || given.EnvService != "sleepy" {
		t.Errorf("Read with the start time given = %+v, %v; want start %d, no comm, the same executable and service", given, err, start)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	for _, start := range []uint64{0, start} {
		if _, err := Read("/proc", cmd.Process.Pid, start); err == nil {
			t.Errorf("Read (start time %d) of an exited process succeeded; want an error", start)
		}
	}
}

// A program run from a memfd (as runc and sandboxes do) is named by the
// argv[0] it was started as, not by the memfd's label ("exe" for runc's
// "/memfd:runc_cloned:/proc/self/exe", a hash for others); its path stays
// the label.
func TestReadProcessRunFromMemfd(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	code, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.MemfdCreate("runc_cloned:/proc/self/exe", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	memfd := os.NewFile(uintptr(fd), "memfd")
	defer memfd.Close()
	if _, err := memfd.Write(code); err != nil {
		t.Fatal(err)
	}
	// Executed through this process's descriptor, as fexecve does.
	cmd := exec.Command(fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), "30")
	cmd.Args[0] = "/usr/local/bin/sleepy-tool"
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	// Until the name comes (exec switches the executable link before it
	// lays out the command line).
	info := readStarted(t, cmd.Process.Pid, func(info Info) bool { return info.ExeName == "sleepy-tool" })
	if info.ExePath != "/memfd:runc_cloned:/proc/self/exe" || info.ExeName != "sleepy-tool" {
		t.Errorf("exe = %q (%q), want /memfd:runc_cloned:/proc/self/exe named sleepy-tool", info.ExePath, info.ExeName)
	}
}

// A process without an executable (a kernel thread) is named by its comm,
// read from stat even when the start time came with the event.
func TestReadWithoutExecutable(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "2"), 0o755); err != nil {
		t.Fatal(err)
	}
	stat := "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 18446744073709551615\n"
	if err := os.WriteFile(filepath.Join(root, "2", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, start := range []uint64{0, 5} {
		info, err := Read(root, 2, start)
		if err != nil || info.ExeName != "kthreadd" || info.Comm != "kthreadd" || info.StartTime != 5 || info.ExePath != "" {
			t.Errorf("Read (start time %d) = %+v, %v; want kthreadd, start 5, no executable", start, info, err)
		}
	}
}

// The command name ends at the last ')': it may hold spaces and parentheses.
// A malformed or short stat line is an error, not a wrong start time.
func TestReadStat(t *testing.T) {
	root := t.TempDir()
	write := func(pid, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "stat"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("7", "7 (my (odd) name) S 1 7 7 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 987654 1000 100 18446744073709551615\n")
	write("8", "8 (x) S 1 2 3\n")
	write("9", "9 no parens here\n")
	comm, start, err := ReadStat(root, 7)
	if err != nil || comm != "my (odd) name" || start != 987654 {
		t.Errorf("ReadStat = %q, %d, %v; want \"my (odd) name\", 987654", comm, start, err)
	}
	for _, pid := range []int{8, 9, 10} {
		if _, _, err := ReadStat(root, pid); err == nil {
			t.Errorf("pid %d: malformed or missing stat accepted", pid)
		}
	}
	// The real thing: this process's start time is stable.
	_, a, err := ReadStat("/proc", os.Getpid())
	if err != nil || a == 0 {
		t.Fatalf("own stat: %d, %v", a, err)
	}
	if _, b, _ := ReadStat("/proc", os.Getpid()); b != a {
		t.Errorf("start time changed between reads: %d, %d", a, b)
	}
}
