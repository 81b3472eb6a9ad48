// Package pythontest runs CPython programs whose code objects the tests of
// the receiver's Python support read.
package pythontest

import (
	"bufio"
	_ "embed"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

//go:embed replace_code.py
var replaceCodePy string

// Replacer is a CPython process holding the code object of a function
// "first" at First (and make's at Make) until Replace frees it and has
// another function's, "second", take its address, or ReplaceWithData has
// a bytes object take it.
type Replacer struct {
	PID         int
	First, Make uint64
	stdin       io.Writer
	lines       *bufio.Reader
}

// StartReplacer runs replace_code.py under the interpreter python and
// returns once it printed its addresses; it is killed at the end of the
// test.
func StartReplacer(t testing.TB, python string) *Replacer {
	t.Helper()
	cmd := exec.Command(python, "-c", replaceCodePy)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := &Replacer{PID: cmd.Process.Pid, stdin: stdin, lines: bufio.NewReader(stdout)}
	line, err := r.lines.ReadString('\n')
	if err != nil {
		t.Fatalf("%s: %v", python, err)
	}
	fields := strings.Fields(line)
	if len(fields) != 2 {
		t.Fatalf("address line %q: want two addresses", line)
	}
	for i, dst := range []*uint64{&r.First, &r.Make} {
		if *dst, err = parseHex(fields[i]); err != nil {
			t.Fatalf("address line %q: %v", line, err)
		}
	}
	return r
}

// Replace frees what holds first's address and returns once a code object
// of "second" took it.
func (r *Replacer) Replace(t testing.TB) {
	t.Helper()
	r.refill(t, "code")
}

// ReplaceWithData frees what holds first's address and returns once a
// bytes object took it: the address holds something other than a code
// object, as a freed code object's memory often does before a code object
// takes it again.
func (r *Replacer) ReplaceWithData(t testing.TB) {
	t.Helper()
	r.refill(t, "data")
}

func (r *Replacer) refill(t testing.TB, with string) {
	t.Helper()
	if _, err := io.WriteString(r.stdin, with+"\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := r.lines.ReadString('\n'); err != nil || line != "reused\n" {
		t.Fatalf("the freed address %#x was not taken by a new object (%s): %q %v", r.First, with, line, err)
	}
}

func parseHex(s string) (uint64, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("not a hex address: %q", s)
	}
	return v, nil
}
