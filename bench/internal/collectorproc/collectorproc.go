// Package collectorproc runs a collector binary as a child process the way
// an operator would, and watches it from outside: when each log line
// appeared (time to first sample), what its Prometheus self-metrics say.
package collectorproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a running collector.
type Process struct {
	Name    string
	Started time.Time // just before exec
	cmd     *exec.Cmd
	log     *os.File

	mu    sync.Mutex
	lines []Line
	done  chan struct{} // closed when stderr reaches EOF
	exit  chan error
}

// Line is one log line and when it was read.
type Line struct {
	At   time.Time
	Text string
}

// Start runs bin with args and extra environment; stdout and stderr are
// copied to logPath and scanned line by line.
func Start(name, bin string, args, env []string, logPath string) (*Process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	// A child that inherited the output pipe must not keep Wait waiting.
	cmd.WaitDelay = 2 * time.Second
	p := &Process{Name: name, cmd: cmd, log: logf, done: make(chan struct{}), exit: make(chan error, 1)}
	p.Started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			at := time.Now()
			text := sc.Text()
			fmt.Fprintln(logf, text)
			p.mu.Lock()
			p.lines = append(p.lines, Line{At: at, Text: text})
			p.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		pw.Close()
		p.exit <- err
	}()
	return p, nil
}

// PID of the collector.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// WaitFor returns the first log line containing substr and how long after
// Started it was read. It fails when the process exits first or after
// timeout, quoting the last lines of the log.
func (p *Process) WaitFor(substr string, timeout time.Duration) (Line, time.Duration, error) {
	deadline := time.Now().Add(timeout)
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if strings.Contains(p.lines[seen].Text, substr) {
				l := p.lines[seen]
				p.mu.Unlock()
				return l, l.At.Sub(p.Started), nil
			}
		}
		p.mu.Unlock()
		select {
		case <-p.done:
			return Line{}, 0, fmt.Errorf("%s exited before logging %q; last lines:\n%s", p.Name, substr, p.Tail(15))
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return Line{}, 0, fmt.Errorf("%s did not log %q within %s; last lines:\n%s", p.Name, substr, timeout, p.Tail(15))
		}
	}
}

// Tail is the last n log lines.
func (p *Process) Tail(n int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	from := max(0, len(p.lines)-n)
	var b strings.Builder
	for _, l := range p.lines[from:] {
		b.WriteString("  ")
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Count is how many log lines contain substr.
func (p *Process) Count(substr string) int { return len(p.Lines(substr)) }

// Lines are the log lines that contain substr, in order.
func (p *Process) Lines(substr string) []Line {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Line
	for _, l := range p.lines {
		if strings.Contains(l.Text, substr) {
			out = append(out, l)
		}
	}
	return out
}

// Stop sends SIGTERM and waits for the collector to exit (it flushes and
// detaches on the way), killing it after timeout.
func (p *Process) Stop(timeout time.Duration) error {
	defer p.log.Close()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", p.Name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case err := <-p.exit:
		<-p.done
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return fmt.Errorf("stop %s: %w", p.Name, err)
		}
		return nil
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-p.exit
		return fmt.Errorf("stop %s: still running %s after SIGTERM; killed", p.Name, timeout)
	}
}
