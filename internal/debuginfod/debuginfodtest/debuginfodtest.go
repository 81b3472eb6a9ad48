// Package debuginfodtest runs a real debuginfod server (elfutils') for
// tests of what fetches from one.
package debuginfodtest

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/testport"
)

// BuildELF compiles the C program body with gcc, a GNU build ID and debug
// information, and returns its path and build ID.
func BuildELF(t testing.TB, body string) (path, id string) {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "p")
	if out, err := exec.Command("gcc", "-O1", "-g", "-Wl,--build-id", "-o", exe, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	info, err := buildid.Read(exe)
	if err != nil || info.GNU == "" {
		t.Fatalf("build ID of %s: %q %v", exe, info.GNU, err)
	}
	return exe, info.GNU
}

// Serve runs elfutils' debuginfod server over the ELF files in dir until
// the test ends, and waits until it serves build ready's debug file. stop
// kills it sooner (a server that went away).
func Serve(t testing.TB, dir, ready string) (url string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("debuginfod")
	if err != nil {
		t.Fatalf("debuginfod (elfutils' server) is needed: make deps installs it (Debian package debuginfod): %v", err)
	}
	port := testport.Free(t)
	cmd := exec.Command(bin, "-F", "-d", filepath.Join(t.TempDir(), "index.sqlite"), "-p", strconv.Itoa(port), dir)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	url = fmt.Sprintf("http://127.0.0.1:%d", port)
	// The server indexes dir in the background: wait until it has.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		resp, err := http.Get(url + "/buildid/" + ready + "/debuginfo")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url, stop
			}
		}
		if time.Now().After(deadline) {
			stop() // its output is whole once it has exited
			t.Fatalf("debuginfod did not serve %s within 2 minutes: %v\n%s", ready, err, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
