package processcontext

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// BenchmarkReadProcessWithoutContext is what every process read adds for a
// process that published nothing (the common case): the scan of its maps,
// here a python3 interpreter's.
func BenchmarkReadProcessWithoutContext(b *testing.B) {
	cmd := exec.Command("python3", "-c", "import sys; print('ready', flush=True); sys.stdin.read()")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("python3: %q, %v", line, err)
	}
	dir := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid))
	maps, err := os.ReadFile(filepath.Join(dir, "maps"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(maps)))
	b.ResetTimer()
	for range b.N {
		if _, err := ReadProcess(dir, maps); err != ErrNotPublished {
			b.Fatal(err)
		}
	}
}
