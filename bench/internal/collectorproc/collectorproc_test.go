package collectorproc

import (
	"strings"
	"testing"
	"time"
)

// TestWaitForTimesLines runs a real child process: the line's time is when
// it was read, after Started, and a missing line fails with the log tail.
func TestWaitForTimesLines(t *testing.T) {
	dir := t.TempDir()
	p, err := Start("echoer", "/bin/sh", []string{"-c", "echo starting; sleep 0.2; echo 'sampling every CPU {\"bpf_map_bytes\": 42}'; exec sleep 30"}, nil, dir+"/log")
	if err != nil {
		t.Fatal(err)
	}
	l, after, err := p.WaitFor("sampling every CPU", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(l.Text, "bpf_map_bytes") || after <= 0 || l.At.Before(p.Started) {
		t.Fatalf("line %q after %v", l.Text, after)
	}
	if p.Count("starting") != 1 {
		t.Fatal("first line not recorded")
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.WaitFor("never printed", time.Second); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Fatalf("want an exit error quoting the log, got %v", err)
	}
}
