// Package processcontexttest runs processes that publish an OpenTelemetry
// process context (OTEP 4719), for the tests of its readers.
package processcontexttest

import (
	"bufio"
	"embed"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

//go:embed testdata/publisher.c testdata/otelprocessctx/otel_process_ctx.c testdata/otelprocessctx/otel_process_ctx.h
var publisherSources embed.FS

// Build compiles testdata/publisher.c (see its comment for what it does)
// with the OTEP's reference implementation (testdata/otelprocessctx) and
// returns the executable's path.
func Build(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	var srcs []string
	for _, name := range []string{"publisher.c", "otelprocessctx/otel_process_ctx.c", "otelprocessctx/otel_process_ctx.h"} {
		b, err := publisherSources.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(dir, filepath.Base(name))
		if err := os.WriteFile(src, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(src, ".c") {
			srcs = append(srcs, src)
		}
	}
	bin := filepath.Join(dir, "publisher")
	args := append([]string{"-O2", "-pthread", "-I", dir, "-o", bin}, srcs...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// BuildGo builds testdata/gopublisher, a Go program that publishes with
// hotpath's Go SDK (tracectx.PublishResource), and returns its path. Its
// arguments are KEY=VALUE attributes (no mode); it answers "published" and
// "updated" without an address.
func BuildGo(t testing.TB) string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(t.TempDir(), "gopublisher")
	// A module of its own, as an application using the SDK is.
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(filepath.Dir(self), "testdata", "gopublisher")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build gopublisher: %v\n%s", err, out)
	}
	return bin
}

// Publisher is a running publisher.
type Publisher struct {
	Cmd *exec.Cmd
	// Proc is its /proc directory.
	Proc string
	in   io.Writer
	out  *bufio.Reader
}

// Start runs bin with args (mode, then KEY=VALUE attributes) and env added
// to the test's environment; the process is killed when the test ends.
func Start(t testing.TB, bin string, env []string, args ...string) *Publisher {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
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
	})
	return &Publisher{Cmd: cmd, Proc: filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid)), in: in, out: bufio.NewReader(out)}
}

// Say writes line (none when empty) and waits for the publisher's answer,
// "ANSWER 0xADDR" ("published", "updated"); it returns the context's
// address (0 from gopublisher, which does not know it).
func (p *Publisher) Say(t testing.TB, line, answer string) uint64 {
	t.Helper()
	if line != "" {
		if _, err := io.WriteString(p.in, line+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	got, err := p.out.ReadString('\n')
	if err != nil {
		t.Fatalf("publisher: %v", err)
	}
	got = strings.TrimSpace(got)
	if got == answer {
		return 0
	}
	hex, ok := strings.CutPrefix(got, answer+" 0x")
	if !ok {
		t.Fatalf("publisher said %q, want %q", got, answer)
	}
	addr, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
