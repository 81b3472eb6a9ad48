// Package testworkload builds small CPU-bound programs with a known profile
// (75% of samples in hot_a/main.hotA, 25% in hot_b/main.hotB, both called by
// dispatch) for tests that sample real processes.
package testworkload

import (
	"bufio"
	"debug/elf"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
)

//go:embed src/spin.c
var spinC []byte

//go:embed src/spin.go.txt
var spinGo []byte

// Expected shares of the hot functions' samples.
const (
	ShareA = 0.75
	ShareB = 0.25
)

// BuildC compiles the C workload with gcc (frame pointers on, no
// optimization so every function keeps its frame) and returns its path.
func BuildC(t testing.TB, extraFlags ...string) string {
	t.Helper()
	return CompileC(t, "spin_c", spinC, append([]string{"-O0", "-g", "-fno-omit-frame-pointer"}, extraFlags...)...)
}

// CompileC compiles the C program src with gcc and flags into a temporary
// directory and returns the executable's path, name.
func CompileC(t testing.TB, name string, src []byte, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, name+".c")
	if err := os.WriteFile(path, src, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-o", bin, path)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// Strip writes a copy of bin without its symbol tables (strip(1), as
// distributions ship binaries: .eh_frame and the build ID note stay) and
// returns its path. FunctionFrames names the copy's functions.
func Strip(t testing.TB, bin string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(bin)+"_stripped")
	if b, err := exec.Command("strip", "-o", out, bin).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	return out
}

// FunctionFrames maps the frame the agent stores for a function of a
// stripped copy of bin (named stripped) that it cannot name, the file's
// name and the function's start as a file offset ("spin_c_stripped+0x1139"),
// to the function's name in bin: what `hotpath symbolize` renames later.
func FunctionFrames(t testing.TB, bin, stripped string) map[string]string {
	t.Helper()
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	syms, err := ef.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	table, err := symbolize.OpenSymbolTable(bin)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			continue
		}
		if off, ok := table.FileOffset(s.Value); ok {
			names[fmt.Sprintf("%s%x", profileschema.RawFramePrefix(stripped), off)] = s.Name
		}
	}
	return names
}

// BuildGo compiles the Go workload and returns its path.
func BuildGo(t testing.TB, ldflags string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), spinGo, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module spin\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "spin_go")
	cmd := exec.Command("go", "build", "-ldflags="+ldflags, "-o", bin, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// ExpectedSamples is how many samples a sampler at hz should have taken of
// an exited cmd, from the CPU time the kernel accounted to it.
func ExpectedSamples(cmd *exec.Cmd, hz int) float64 {
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return cpu.Seconds() * float64(hz)
}

// StartGated is Start for workloads that, once ready, wait for a line on
// standard input before their measured work (the unwind tests' settle): it
// sends that line only once gate(pid) holds — say, once the agent has read
// the process — polling it for up to 30 s. Tests then measure steady state
// however loaded the machine is, without sleeping a guessed time.
func StartGated(t testing.TB, bin string, seconds string, gate func(pid int) bool, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, seconds)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	start(t, cmd, env)
	for deadline := time.Now().Add(30 * time.Second); !gate(cmd.Process.Pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d): the gate did not open in 30 s", bin, cmd.Process.Pid)
		}
	}
	if _, err := io.WriteString(in, "go\n"); err != nil {
		t.Fatalf("%s: start the measured work: %v", bin, err)
	}
	return cmd
}

// Start runs bin for seconds, waits until it is running its loop, and kills
// it at the end of the test.
func Start(t testing.TB, bin string, seconds string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, seconds)
	start(t, cmd, env)
	return cmd
}

// start runs cmd with env added, kills it at the end of the test, and waits
// for its "ready" line.
func start(t testing.TB, cmd *exec.Cmd, env []string) {
	t.Helper()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("%s did not start: %q %v", cmd.Path, line, err)
	}
}
