//go:build privileged

package hotspot

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// busyJava spins in Busy.spin, prints "ready" once the method has run
// often enough to be compiled, and spins on until killed.
const busyJava = `
public class Busy {
    static long spin(long x) {
        for (int i = 0; i < 1000; i++) { x = x * 31 + i; }
        return x;
    }
    public static void main(String[] args) {
        long x = 1;
        for (int i = 0; i < 200000; i++) { x = spin(x); }
        System.out.println("ready " + (x & 1));
        System.out.flush();
        while (true) { x = spin(x); if (x == 42) System.out.println(x); }
    }
}
`

// startJava compiles Busy and runs it with extra JVM flags, returning the
// process once it printed its ready line.
func startJava(t testing.TB, flags ...string) *exec.Cmd {
	return startJavaAs(t, nil, flags...)
}

// startJavaAs is startJava as the user cred names (nil: the test's).
func startJavaAs(t testing.TB, cred *syscall.Credential, flags ...string) *exec.Cmd {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java is needed (make deps installs openjdk-17-jdk-headless): %v", err)
	}
	return startJVM(t, java, cred, flags...)
}

// startJVM is startJavaAs with the JDK whose java binary is java (its
// javac compiles Busy).
func startJVM(t testing.TB, java string, cred *syscall.Credential, flags ...string) *exec.Cmd {
	t.Helper()
	// Not t.TempDir: its parent is the test's alone, and another user runs
	// the class.
	dir, err := os.MkdirTemp("", "hotspot-busy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := filepath.Join(dir, "Busy.java")
	if err := os.WriteFile(src, []byte(busyJava), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(filepath.Dir(java), "javac"), "-d", dir, src).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(java, append(flags, "-cp", dir, "Busy")...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.Remove(fmt.Sprintf("/tmp/perf-%d.map", cmd.Process.Pid))
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "ready") {
			err = fmt.Errorf("first line %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("java Busy: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("java Busy printed no ready line in 60 s")
	}
	return cmd
}

// alive: the process has not exited (a zombie counts as exited).
func alive(pid int) bool {
	st, err := procfile.ReadStat(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && st.State != 'Z'
}

// TestRequestPerfMapNamesCompiledMethods: a JVM started with no flag writes
// its perf map when the agent asks, the map names the method it compiled,
// and a second request (the listener already running) works too.
func TestRequestPerfMapNamesCompiledMethods(t *testing.T) {
	cmd := startJava(t)
	pid := cmd.Process.Pid
	j, err := ReadJVM("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if !j.CatchesSIGQUIT {
		t.Fatalf("the JVM does not catch SIGQUIT: %+v", j)
	}
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", j.NSPID)
	os.Remove(mapPath) // an earlier process's with this pid
	var created *PerfMapFile
	for round := 1; round <= 2; round++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f, err := RequestPerfMap(ctx, "/proc", j)
		cancel()
		if err != nil {
			t.Fatalf("request %d: %v", round, err)
		}
		// The first request created the file; the second rewrote it.
		if (f != nil) != (round == 1) {
			t.Errorf("request %d: created the file: %v", round, f != nil)
		}
		if f != nil {
			created = f
		}
		raw, err := os.ReadFile(mapPath)
		if err != nil {
			t.Fatalf("request %d: no perf map: %v", round, err)
		}
		if !strings.Contains(string(raw), "Busy.spin") {
			t.Fatalf("request %d: the perf map (%d bytes) does not name Busy.spin", round, len(raw))
		}
	}
	if !alive(pid) {
		t.Fatal("the JVM exited")
	}
	// The requester removes the file it had written, once the JVM is gone
	// (here: before), and only that file.
	if created == nil {
		t.Fatal("no request created the file")
	}
	if err := created.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mapPath); !os.IsNotExist(err) {
		t.Errorf("%s after Remove: %v", mapPath, err)
	}
}

// TestPerfMapFileRemovesOnlyItsFile: a map replaced by another file of the
// same name (a new JVM with the pid, a user's copy) is not removed.
func TestPerfMapFileRemovesOnlyItsFile(t *testing.T) {
	cmd := startJava(t)
	j, err := ReadJVM("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	mapPath := fmt.Sprintf("/tmp/perf-%d.map", j.NSPID)
	os.Remove(mapPath)
	f, err := RequestPerfMap(context.Background(), "/proc", j)
	if err != nil || f == nil {
		t.Fatalf("RequestPerfMap = %v, %v; want the file it created", f, err)
	}
	if err := os.Remove(mapPath); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mapPath, []byte("1000 10 someone else's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.Remove(); err != nil {
		t.Fatal(err)
	}
	if raw, err := os.ReadFile(mapPath); err != nil || string(raw) != "1000 10 someone else's\n" {
		t.Errorf("the replacing file: %q, %v; want it left alone", raw, err)
	}
}

// TestRequestPerfMapOtherUsersJVM: a service's JVM runs as its own user
// (nobody here); the agent, root, is answered all the same (HotSpot answers
// its own user and root).
func TestRequestPerfMapOtherUsersJVM(t *testing.T) {
	cmd := startJavaAs(t, &syscall.Credential{Uid: 65534, Gid: 65534})
	j, err := ReadJVM("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if j.UID != 65534 {
		t.Fatalf("the JVM runs as uid %d, want 65534", j.UID)
	}
	if _, err := RequestPerfMap(context.Background(), "/proc", j); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/tmp/perf-%d.map", j.NSPID))
	if err != nil || !strings.Contains(string(raw), "Busy.spin") {
		t.Fatalf("the perf map does not name Busy.spin (%d bytes, %v)", len(raw), err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/tmp/perf-%d.map", j.NSPID), &st); err != nil || st.Uid != 65534 {
		t.Errorf("the perf map is owned by uid %d (%v), want the JVM's 65534: the agent reads only its process's or root's", st.Uid, err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("the JVM exited")
	}
}

// TestRequestPerfMapWithReducedSignals: a JVM started with -Xrs installs no
// SIGQUIT handler, and starts its attach listener at start instead: it is
// asked without a signal and writes its map.
func TestRequestPerfMapWithReducedSignals(t *testing.T) {
	cmd := startJava(t, "-Xrs")
	pid := cmd.Process.Pid
	j, err := ReadJVM("/proc", pid)
	if err != nil {
		t.Fatal(err)
	}
	if j.CatchesSIGQUIT {
		t.Fatalf("a JVM with -Xrs catches SIGQUIT: %+v", j)
	}
	if _, err := RequestPerfMap(context.Background(), "/proc", j); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/tmp/perf-%d.map", j.NSPID))
	if err != nil || !strings.Contains(string(raw), "Busy.spin") {
		t.Fatalf("the perf map does not name Busy.spin (%d bytes, %v)", len(raw), err)
	}
	if !alive(pid) {
		t.Fatal("the JVM exited")
	}
}

// TestRequestPerfMapAttachDisabled: a JVM started with
// -XX:+DisableAttachMechanism would answer SIGQUIT with a thread dump on its
// output; it is not signalled, given on the command line or in
// JAVA_TOOL_OPTIONS.
func TestRequestPerfMapAttachDisabled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
		env   string
	}{
		{"command line", []string{disableAttach}, ""},
		{"JAVA_TOOL_OPTIONS", nil, "JAVA_TOOL_OPTIONS=-Xss2m " + disableAttach},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				name, val, _ := strings.Cut(tc.env, "=")
				t.Setenv(name, val)
			}
			cmd := startJava(t, tc.flags...)
			j, err := ReadJVM("/proc", cmd.Process.Pid)
			if err != nil {
				t.Fatal(err)
			}
			_, err = RequestPerfMap(context.Background(), "/proc", j)
			if err == nil || !strings.Contains(err.Error(), "attach disabled") || !strings.Contains(err.Error(), tc.name) {
				t.Fatalf("RequestPerfMap = %v, want attach disabled (%s)", err, tc.name)
			}
			if !alive(cmd.Process.Pid) {
				t.Fatal("the JVM exited")
			}
		})
	}
}

// TestRequestPerfMapRefusesWithoutSIGQUITHandler: a process with no
// attach listener and no SIGQUIT handler, which the signal would end, is
// not signalled; the error says why, and it runs on.
func TestRequestPerfMapRefusesWithoutSIGQUITHandler(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	j, err := ReadJVM("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if j.CatchesSIGQUIT {
		t.Fatalf("sleep catches SIGQUIT: %+v", j)
	}
	_, err = RequestPerfMap(context.Background(), "/proc", j)
	if err == nil || !strings.Contains(err.Error(), "does not handle SIGQUIT") {
		t.Fatalf("RequestPerfMap = %v, want the SIGQUIT refusal", err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("the process exited")
	}
}

// TestRequestPerfMapNotAJVM: a process that catches SIGQUIT but is no JVM
// never listens; the request gives up with a readable error and the process
// runs on.
func TestRequestPerfMapNotAJVM(t *testing.T) {
	cmd := exec.Command("bash", "-c", `trap 'echo quit' QUIT; echo ready; while :; do sleep 0.1; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("bash: %q, %v", line, err)
	}
	j, err := ReadJVM("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !j.CatchesSIGQUIT {
		t.Fatalf("bash with a QUIT trap does not catch SIGQUIT: %+v", j)
	}
	_, err = RequestPerfMap(context.Background(), "/proc", j)
	if err == nil || !strings.Contains(err.Error(), "no attach listener") {
		t.Fatalf("RequestPerfMap = %v, want no attach listener", err)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil || !alive(cmd.Process.Pid) {
		t.Fatalf("the process exited: %v", err)
	}
	if _, err := os.Stat(fmt.Sprintf("/tmp/.attach_pid%d", j.NSPID)); err == nil {
		t.Error("the trigger file was left behind")
	}
}
