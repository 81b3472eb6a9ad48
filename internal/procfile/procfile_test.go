package procfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The same bytes as os.ReadFile, for files of /proc the kernel generates as
// they are read and for ordinary files, empty, smaller and larger than the
// buffer.
func TestReadFileMatchesOSReadFile(t *testing.T) {
	dir := t.TempDir()
	large := bytes.Repeat([]byte("0123456789abcdef"), 3*bufSize/16+5)
	for name, content := range map[string][]byte{"empty": nil, "small": []byte("x=1\x00y=2\x00"), "large": large} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	self := "/proc/" + strconv.Itoa(os.Getpid())
	for _, path := range []string{self + "/cmdline", self + "/cgroup", self + "/environ", self + "/mountinfo", self + "/limits",
		filepath.Join(dir, "empty"), filepath.Join(dir, "small"), filepath.Join(dir, "large"), filepath.Join(dir, "small")} {
		got, err := ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes, os.ReadFile %d; contents differ", path, len(got), len(want))
		}
	}
	// maps changes between two reads as the Go runtime maps memory: it
	// must at least hold this process's executable and end a line.
	maps, err := ReadFile(self + "/maps")
	exe, _ := os.Executable()
	if err != nil || !bytes.Contains(maps, []byte(exe)) || !bytes.HasSuffix(maps, []byte("\n")) {
		t.Errorf("maps: %d bytes, %v; want whole lines naming %s", len(maps), err, exe)
	}
}

// A file that is not there gives what os.ReadFile gives.
func TestReadFileMissing(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "gone"))
	var pe *os.PathError
	if !errors.Is(err, os.ErrNotExist) || !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a *os.PathError for a missing file", err)
	}
}

// A read that fails after the open gives a *os.PathError naming the read, as
// os.ReadFile does: a directory opens but cannot be read.
func TestReadFileReadError(t *testing.T) {
	dir := t.TempDir()
	_, err := ReadFile(dir)
	var pe *os.PathError
	if !errors.As(err, &pe) || pe.Op != "read" || pe.Path != dir {
		t.Fatalf("err = %v, want a *os.PathError for the read of %s", err, dir)
	}
	if _, osErr := os.ReadFile(dir); osErr == nil || osErr.Error() != err.Error() {
		t.Errorf("err = %q, os.ReadFile gives %q", err, osErr)
	}
}

// ReadRegularInRoot reads a process's own small regular file, as the
// process sees it, and nothing else: not through a symlink (as the file,
// or as a directory pointing out of the process's root), not a FIFO (no
// hang), not a file over the limit.
func TestReadRegularInRoot(t *testing.T) {
	procDir := t.TempDir() // stands for /proc/PID: its root is procDir/root
	root := filepath.Join(procDir, "root")
	outside := t.TempDir() // the agent's own files
	for path, content := range map[string]string{
		filepath.Join(root, "app/package.json"):   `{"name": "web"}`,
		filepath.Join(root, "app/big.json"):       strings.Repeat("x", 100),
		filepath.Join(outside, "package.json"):    `{"name": "agent-side"}`,
		filepath.Join(outside, "etc/secret.json"): `{"name": "agent-side"}`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(filepath.Join(outside, "package.json"), filepath.Join(root, "app/linked.json")))
	must(os.Symlink(outside, filepath.Join(root, "elsewhere")))                // absolute: inside the root, no such path
	must(os.Symlink(strings.Repeat("../", 32), filepath.Join(root, "app/up"))) // ".." stops at the root
	must(unix.Mkfifo(filepath.Join(root, "app/fifo.json"), 0o644))

	if got, err := ReadRegularInRoot(procDir, "/app/package.json", 1<<10); err != nil || string(got) != `{"name": "web"}` {
		t.Fatalf("the process's file: %q, %v", got, err)
	}
	for _, tc := range []struct{ name, want string }{
		{"/app/linked.json", "symlink"},
		{"/app/fifo.json", "not a regular file"},
		{"/app/big.json", "more than 50"},
		{"/elsewhere/package.json", os.ErrNotExist.Error()},
		{"/app/up/" + strings.TrimPrefix(outside, "/") + "/package.json", os.ErrNotExist.Error()},
		{"/app/missing.json", os.ErrNotExist.Error()},
	} {
		done := make(chan struct{})
		var got []byte
		var err error
		go func() { got, err = ReadRegularInRoot(procDir, tc.name, 50); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: blocked", tc.name)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %q, %v; want an error with %q", tc.name, got, err, tc.want)
		}
	}
}
