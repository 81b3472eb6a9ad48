package procfile

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
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
