package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal: the command writes to the terminal side,
// the test reads what a person would see from the other.
func openPTY(t *testing.T) (reader, terminal *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty: %v", err)
	}
	t.Cleanup(func() { pts.Close(); ptmx.Close() })
	// A new pty is 0×0; a person's terminal has a size.
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 100}); err != nil {
		t.Fatalf("set pty size: %v", err)
	}
	return ptmx, pts
}

// TestProgressOnlyOnTerminal: on a terminal the indicator appears (once the
// operation has run for progressAfter) and is erased when it stops; a pipe,
// a file, /dev/null or a buffer get nothing.
func TestProgressOnlyOnTerminal(t *testing.T) {
	reader, terminal := openPTY(t)
	if !isTerminal(terminal) {
		t.Fatal("a pty is not taken for a terminal")
	}
	stop := startProgress(terminal, "reading profiles", 0)
	seen := make(chan string, 1)
	go func() {
		var got bytes.Buffer
		buf := make([]byte, 4096)
		for !strings.Contains(got.String(), "reading profiles") {
			n, err := reader.Read(buf)
			if err != nil {
				break
			}
			got.Write(buf[:n])
		}
		seen <- got.String()
	}()
	select {
	case got := <-seen:
		if !strings.Contains(got, "reading profiles") {
			t.Fatalf("terminal shows %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no progress indicator on the terminal")
	}
	stop()
	stop() // stopping twice is harmless (deferred and explicit stops)

	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for name, f := range map[string]*os.File{"/dev/null": devNull, "pipe": w} {
		if isTerminal(f) {
			t.Fatalf("%s taken for a terminal", name)
		}
	}
	var buf bytes.Buffer
	for _, target := range []interface{ Write([]byte) (int, error) }{w, &buf} {
		startProgress(target, "capturing", time.Minute)()
	}
	w.Close()
	if b, _ := os.ReadFile("/dev/fd/" + fmt.Sprint(r.Fd())); len(b) > 0 || buf.Len() > 0 {
		t.Fatalf("progress written off a terminal: %q %q", b, buf.String())
	}
}
