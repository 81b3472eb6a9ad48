package symbolize

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Programs are built once per test binary into buildDir.
var (
	buildDir  string
	buildOnce = map[string]*onceResult{}
	buildMu   sync.Mutex
)

type onceResult struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "symbolize-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// built runs build once for name and returns the output path.
func built(tb testing.TB, name string, build func(out string) error) string {
	tb.Helper()
	buildMu.Lock()
	r, ok := buildOnce[name]
	if !ok {
		r = &onceResult{}
		buildOnce[name] = r
	}
	buildMu.Unlock()
	r.once.Do(func() {
		r.path = filepath.Join(buildDir, name)
		r.err = build(r.path)
	})
	if r.err != nil {
		tb.Fatalf("build %s: %v", name, r.err)
	}
	return r.path
}

func run(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

func testdata(tb testing.TB, name string) string {
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// cProg builds testdata/hot.c with extra gcc flags (e.g. -no-pie).
func cProg(tb testing.TB, name string, flags ...string) string {
	src := testdata(tb, "hot.c")
	return built(tb, name, func(out string) error {
		args := append([]string{"-O1", "-o", out, src}, flags...)
		return run(".", "gcc", args...)
	})
}

func libHot(tb testing.TB) string {
	src := testdata(tb, "libhot.c")
	return built(tb, "libhot.so", func(out string) error {
		return run(".", "gcc", "-O1", "-shared", "-fPIC", "-o", out, src)
	})
}

// goProg builds testdata/goprog with extra go build flags.
func goProg(tb testing.TB, name string, cgo bool, flags ...string) string {
	src := testdata(tb, "goprog/main.go")
	return built(tb, name, func(out string) error {
		dir, err := os.MkdirTemp(buildDir, "gosrc-")
		if err != nil {
			return err
		}
		code, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), code, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module hotprog\n\ngo 1.22\n"), 0o644); err != nil {
			return err
		}
		args := append([]string{"build", "-o", out}, flags...)
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "CGO_ENABLED=0")
		if cgo {
			cmd.Env = append(cmd.Env, "CGO_ENABLED=1")
		}
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, b)
		}
		return nil
	})
}

// runningProg is a started test program and the addresses it printed.
type runningProg struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	addrs  map[string]uint64
	values map[string]string // every name=value printed
}

// start runs a test program and parses its "name=value ..." line
// (addresses are printed as 0x hex). The
// program exits when stop is called (or at test cleanup).
func start(tb testing.TB, path string, args ...string) *runningProg {
	tb.Helper()
	cmd := exec.Command(path, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", path, err)
	}
	rp := &runningProg{cmd: cmd, stdin: stdin, addrs: map[string]uint64{}, values: map[string]string{}}
	tb.Cleanup(rp.stop)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("read addresses from %s: %v", path, err)
	}
	for _, kv := range strings.Fields(line) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			tb.Fatalf("bad output %q", line)
		}
		rp.values[k] = v
		if !strings.HasPrefix(v, "0x") {
			continue // "(nil)" or not an address
		}
		a, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64)
		if err != nil {
			tb.Fatalf("bad address in %q: %v", line, err)
		}
		rp.addrs[k] = a
	}
	return rp
}

// startSilent runs a program that prints nothing (it waits on stdin) and
// returns once it has exec'd, so its maps are its own.
func startSilent(tb testing.TB, path string) *runningProg {
	tb.Helper()
	cmd := exec.Command(path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", path, err)
	}
	rp := &runningProg{cmd: cmd, stdin: stdin}
	tb.Cleanup(rp.stop)
	exe := filepath.Join("/proc", strconv.Itoa(cmd.Process.Pid), "exe")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got, _ := os.Readlink(exe); got == path {
			// exec done; give the dynamic loader a moment to map libraries.
			time.Sleep(50 * time.Millisecond)
			return rp
		}
	}
	tb.Fatalf("%s did not exec", path)
	return nil
}

func (rp *runningProg) pid() int { return rp.cmd.Process.Pid }

func (rp *runningProg) stop() {
	if rp.stdin != nil {
		rp.stdin.Close()
		rp.stdin = nil
		rp.cmd.Wait()
	}
}

func (rp *runningProg) addr(tb testing.TB, name string) uint64 {
	tb.Helper()
	a, ok := rp.addrs[name]
	if !ok || a == 0 {
		tb.Fatalf("program did not print %s (got %v)", name, rp.addrs)
	}
	return a
}

// snapshot takes a snapshot and closes it at cleanup.
func snapshot(tb testing.TB, s *Symbolizer, pid int) *Process {
	tb.Helper()
	p, err := s.Snapshot(pid)
	if err != nil {
		tb.Fatalf("snapshot: %v", err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}
