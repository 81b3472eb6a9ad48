package procinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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

	// Start returns once exec has closed the child's close-on-exec pipe, which
	// the kernel does before it lays out the new environment: poll briefly.
	var info Info
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if info, err = Read("/proc", cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		if info.EnvService != "" {
			break
		}
	}
	want, _ := filepath.EvalSymlinks(sleep)
	if info.ExePath != want || info.ExeName != filepath.Base(want) {
		t.Errorf("exe = %q (%q), want %q", info.ExePath, info.ExeName, want)
	}
	if info.EnvService != "sleepy" {
		t.Errorf("EnvService = %q, want sleepy", info.EnvService)
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, err := Read("/proc", cmd.Process.Pid); err == nil {
		t.Error("Read of an exited process succeeded; want an error")
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
