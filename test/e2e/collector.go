// Package e2e runs the real ocb-built collector binary (make build) and
// checks what comes out of it. `make test` sets HOTPATH_COLLECTOR.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/pdata/pprofile/pprofileotlp"
)

// collectorBinary is the path of the built collector; the tests fail, not
// skip, without it: CI must run them.
func collectorBinary(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("HOTPATH_COLLECTOR")
	if bin == "" {
		t.Fatal("HOTPATH_COLLECTOR is not set: run these tests with `make test`, which builds bin/otelcol-hotpath first")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("collector binary: %v", err)
	}
	return bin
}

// collector is a running collector process.
type collector struct {
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{} // closed when the process is reaped (shippedCollector)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startCollector writes config to a file and starts the collector with it.
func startCollector(t *testing.T, config string, args ...string) *collector {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &collector{out: &syncBuffer{}}
	c.cmd = exec.Command(collectorBinary(t), append([]string{"--config", path}, args...)...)
	c.cmd.Stdout = c.out
	c.cmd.Stderr = c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		if t.Failed() {
			t.Logf("collector output:\n%s", c.out.String())
		}
	})
	return c
}

// stop asks the collector to shut down (it flushes what it holds).
func (c *collector) stop(t *testing.T) {
	t.Helper()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("collector did not stop within 30 s:\n%s", c.out.String())
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// profileSink is an OTLP/HTTP profiles endpoint on loopback that keeps what
// it receives.
type profileSink struct {
	URL string
	mu  sync.Mutex
	all []pprofile.Profiles
}

func newProfileSink(t *testing.T) *profileSink {
	t.Helper()
	s := &profileSink{}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1development/profiles", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := pprofileotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.all = append(s.all, req.Profiles())
		s.mu.Unlock()
		resp, _ := pprofileotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	s.URL = fmt.Sprintf("http://%s", l.Addr())
	return s
}

func (s *profileSink) profiles() []pprofile.Profiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pprofile.Profiles(nil), s.all...)
}
