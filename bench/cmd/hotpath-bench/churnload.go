package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The churn phase's workload: what a CI node runs. Two steady CPU-bound
// programs, and about once a second a new C binary compiled and run,
// python3, two /bin/true; every few seconds a `go build` of a small module
// into a new binary, which is run too (each at random gaps: every). Every process is in one process group (a
// sleeping leader keeps it alive), killed as a whole when the run ends or
// the bench is interrupted. Every file is under the load's directory.

// steadyCSource is the steady native workload, built without frame
// pointers: churn_hot70 and churn_hot30 do the same work per step (the
// constants differ so the compiler cannot fold them into one function),
// 7 and 3 million steps per round, so they are 70 % and 30 % of its CPU
// time as leaf functions.
const steadyCSource = `/* hotpath-bench churn: steady native workload without frame pointers. */
#include <stdint.h>

volatile uint32_t sink;

__attribute__((noinline, noclone)) void churn_hot70(uint32_t n)
{
	uint32_t x = sink;
	for (uint32_t i = 0; i < n; i++)
		x = (x ^ (x >> 15)) * 2246822519u + i;
	sink = x;
}

__attribute__((noinline, noclone)) void churn_hot30(uint32_t n)
{
	uint32_t x = sink;
	for (uint32_t i = 0; i < n; i++)
		x = (x ^ (x >> 13)) * 3266489917u + i;
	sink = x;
}

int main(void)
{
	for (;;) {
		churn_hot70(7000000);
		churn_hot30(3000000);
	}
}
`

// steadyCLeaves are the C workload's hot functions and their designed
// share of its samples.
var steadyCLeaves = []leafShare{{Function: "churn_hot70", Want: 70}, {Function: "churn_hot30", Want: 30}}

// churnCSource is the program compiled every second; n makes each build a
// new binary (new contents, new build ID). It runs for a few ms.
const churnCSource = `/* hotpath-bench churn: build %[1]d */
int main(void)
{
	volatile unsigned x = %[1]du;
	for (unsigned i = 0; i < 2000000u; i++)
		x = x * 1664525u + i;
	return 0;
}
`

// churnGoSource is the module built by `go build` every few seconds; n
// makes each build a new binary.
const churnGoSource = `// hotpath-bench churn: build %[1]d
package main

import "fmt"

const build = %[1]d

func main() {
	s := 0
	for i := 0; i < 20_000_000; i++ {
		s += i ^ build
	}
	fmt.Println(s)
}
`

// churnPython is what each python3 start runs (-B: no .pyc written).
const churnPython = "sum(i * i for i in range(100000))"

// Kinds of process start the churn counts (its direct children; gcc and
// go build start more processes of their own: cc1, as, collect2, ld,
// compile, link).
const (
	startGCC      = "gcc (compile a new C file)"
	startBuiltC   = "the new C binary"
	startPython   = "python3 -B -c"
	startTrue     = "/bin/true"
	startGoBuild  = "go build (new module version)"
	startBuiltGo  = "the new Go binary"
	startGoPrewar = "go build (cache warm-up, before the agent)"
)

// churnLoad is one run's workload.
type churnLoad struct {
	dir    string
	leader *exec.Cmd // sleeps; its pid is the group's id
	steady []*exec.Cmd
	env    []string // TMPDIR and the Go variables, for every child
	python string
	// ctr, when not nil, is the container every process starts in; the
	// load's paths are the container's then.
	ctr *benchContainer

	mu     sync.Mutex
	starts map[string][]time.Time // start times by kind
	// cpu: each finished start's CPU time by kind (utime+stime from its
	// wait, which includes the children it waited for: gcc's cc1, as and
	// ld, go build's compile and link), with its start time.
	cpu      map[string][]startCPU
	failures map[string]int
	lastErr  map[string]string

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	once     sync.Once
}

// startCPU is one finished start's CPU time.
type startCPU struct {
	at      time.Time
	seconds float64
}

// newChurnLoad makes the directories and the process group. goCache is
// the Go build cache of every go build (inside the phase's directory, so
// the run leaves nothing outside it). With ctr, every process runs in that
// container, and dir and goCache are paths in it.
func newChurnLoad(dir, goCache, python string, ctr *benchContainer) (*churnLoad, error) {
	l := &churnLoad{dir: dir, python: python, ctr: ctr, starts: map[string][]time.Time{}, cpu: map[string][]startCPU{}, failures: map[string]int{}, lastErr: map[string]string{}, stop: make(chan struct{})}
	for _, d := range []string{"tmp", "c", "gomod", "gotmp", "config"} {
		if err := os.MkdirAll(l.host(filepath.Join(dir, d)), 0o755); err != nil {
			return nil, err
		}
	}
	l.env = append(os.Environ(),
		"TMPDIR="+filepath.Join(dir, "tmp"),
		"GOCACHE="+goCache,
		"GOTMPDIR="+filepath.Join(dir, "gotmp"),
		"GOPATH="+filepath.Join(dir, "gopath"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"), // go's telemetry and env file
		"GOENV=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "GO111MODULE=on",
	)
	if err := l.writeFile(filepath.Join(dir, "gomod", "go.mod"), []byte("module churn\n\ngo 1.21\n")); err != nil {
		return nil, err
	}
	l.leader = exec.Command("sleep", "infinity")
	l.leader.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if ctr != nil {
		ctr.enter(l.leader.SysProcAttr)
		l.leader.Dir = "/"
	}
	if err := l.leader.Start(); err != nil {
		return nil, fmt.Errorf("start the workload's process group: %w", err)
	}
	return l, nil
}

// warmGo builds the Go module once, before the agent starts: the first
// build into an empty cache compiles the standard library, later ones
// only the changed package, then link.
func (l *churnLoad) warmGo() error {
	bin, err := l.goBuild(startGoPrewar, 0)
	if err == nil {
		_ = os.Remove(bin)
	}
	return err
}

// command is cmd in the load's process group (and container) with its
// environment.
func (l *churnLoad) command(env []string, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = append(append([]string(nil), l.env...), env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: l.leader.Process.Pid, Pdeathsig: syscall.SIGKILL}
	if l.ctr != nil {
		l.ctr.enter(c.SysProcAttr)
		// Its working directory in the container too (a caller may set
		// another): a chroot alone leaves it on the host's file system.
		c.Dir = "/"
	}
	return c
}

// host is where the bench reads or writes the load's path p: in its
// container's file system, or p itself.
func (l *churnLoad) host(p string) string {
	if l.ctr == nil {
		return p
	}
	return l.ctr.host(p)
}

// writeFile writes the load's file p.
func (l *churnLoad) writeFile(p string, data []byte) error {
	return os.WriteFile(l.host(p), data, 0o644)
}

// program is the path the load runs the host's program p by: p, or the
// path of its copy in the container (a program of the image).
func (l *churnLoad) program(p string) (string, error) {
	if l.ctr == nil {
		return p, nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, l.ctr.install(abs)
}

// run starts c, counts it as a start of kind, and waits for it.
func (l *churnLoad) run(kind string, c *exec.Cmd) ([]byte, error) {
	select {
	case <-l.stop:
		return nil, errors.New("the load is stopping")
	default:
	}
	var out strings.Builder
	c.Stdout, c.Stderr = &out, &out
	err := c.Start()
	if err == nil {
		at := time.Now()
		l.mu.Lock()
		l.starts[kind] = append(l.starts[kind], at)
		l.mu.Unlock()
		err = c.Wait()
		if c.ProcessState != nil {
			cpu := (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
			l.mu.Lock()
			l.cpu[kind] = append(l.cpu[kind], startCPU{at: at, seconds: cpu})
			l.mu.Unlock()
		}
	}
	if err != nil {
		select {
		case <-l.stop: // killed on the way out: not a failure
		default:
			l.mu.Lock()
			l.failures[kind]++
			l.lastErr[kind] = fmt.Sprintf("%v: %s", err, strings.TrimSpace(out.String()))
			l.mu.Unlock()
		}
	}
	return []byte(out.String()), err
}

// startSteady starts one steady program under service name service.
func (l *churnLoad) startSteady(service, name string, args ...string) (*exec.Cmd, error) {
	c := l.command([]string{"OTEL_SERVICE_NAME=" + service}, name, args...)
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	l.steady = append(l.steady, c)
	return c, nil
}

// startChurn starts the short-lived processes, in three loops so a slow
// build does not hold up the others: once a second a gcc build of a new C
// file and its run; once a second python3 and /bin/true twice; every
// goEvery a go build and its run; each on average, at random gaps
// (every). A start due while its loop is still busy comes once the loop is
// free; the ones missed meanwhile are dropped, not queued.
func (l *churnLoad) startChurn(goEvery time.Duration) {
	l.every(time.Second, l.cTick)
	l.every(time.Second, func(int) {
		_, _ = l.run(startPython, l.command(nil, l.python, "-B", "-c", churnPython))
		_, _ = l.run(startTrue, l.command(nil, "/bin/true"))
		_, _ = l.run(startTrue, l.command(nil, "/bin/true"))
	})
	l.every(goEvery, func(n int) {
		if bin, err := l.goBuild(startGoBuild, n); err == nil {
			_, _ = l.run(startBuiltGo, l.command(nil, bin))
			_ = os.Remove(l.host(bin))
		}
	})
}

// every runs f(1), f(2) ... until the load stops, one start per period on
// average: each start is scheduled a random time after the last one's
// schedule, drawn evenly from [period/2, 3·period/2), and comes at once
// when f ran past it. Not on a fixed period: the agent samples every CPU
// at 19 Hz, 19 sampling periods a second, so starts on whole seconds fall
// at one phase of its sampling for a whole run, and a process of a few
// tens of ms takes too many samples or too few, by run (2026-12-03, the
// churn and container phases at 57c3369: 120 starts of python3 -B -c of
// 19-20 ms CPU each took 59 samples in one run and 25 in the other, where
// 19 Hz gives 45; a loop of the same runs back to back took 19 Hz).
func (l *churnLoad) every(period time.Duration, f func(n int)) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		next := time.Now()
		t := time.NewTimer(0)
		defer t.Stop()
		for n := 1; ; n++ {
			f(n)
			next = next.Add(period/2 + rand.N(period))
			if now := time.Now(); next.Before(now) {
				next = now
			}
			t.Reset(time.Until(next))
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
		}
	}()
}

// cTick compiles build n of the tiny C program, runs it and removes it.
func (l *churnLoad) cTick(n int) {
	dir := filepath.Join(l.dir, "c")
	name := "churn-" + strconv.Itoa(n)
	bin, err := buildC(dir, name, fmt.Sprintf(churnCSource, n), l.writeFile, func(c *exec.Cmd) ([]byte, error) {
		gc := l.command(nil, c.Path, c.Args[1:]...)
		return l.run(startGCC, gc)
	})
	_ = os.Remove(l.host(filepath.Join(dir, name+".c")))
	if err != nil {
		return
	}
	_, _ = l.run(startBuiltC, l.command(nil, bin))
	_ = os.Remove(l.host(bin))
}

// goBuild writes version n of the module and builds it into a new binary.
func (l *churnLoad) goBuild(kind string, n int) (string, error) {
	mod := filepath.Join(l.dir, "gomod")
	if err := l.writeFile(filepath.Join(mod, "main.go"), []byte(fmt.Sprintf(churnGoSource, n))); err != nil {
		return "", err
	}
	bin := filepath.Join(l.dir, "gomod", "churn-go-"+strconv.Itoa(n))
	c := l.command(nil, "go", "build", "-o", bin, ".")
	c.Dir = mod
	if out, err := l.run(kind, c); err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
}

// startsIn counts the starts of each kind in [from, to).
func (l *churnLoad) startsIn(from, to time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for kind, ts := range l.starts {
		for _, t := range ts {
			if !t.Before(from) && t.Before(to) {
				out[kind]++
			}
		}
	}
	return out
}

// cpuIn is the CPU time of the finished starts of each kind that began in
// [from, to), and their count.
func (l *churnLoad) cpuIn(from, to time.Time) (seconds map[string]float64, finished map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seconds, finished = map[string]float64{}, map[string]int{}
	for kind, cs := range l.cpu {
		for _, c := range cs {
			if !c.at.Before(from) && c.at.Before(to) {
				seconds[kind] += c.seconds
				finished[kind]++
			}
		}
	}
	return seconds, finished
}

func (l *churnLoad) killGroup() {
	if err := syscall.Kill(-l.leader.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		logf("churn: kill the workload's process group %d: %v", l.leader.Process.Pid, err)
	}
}

// problems are the failures per kind, with the last error of each.
func (l *churnLoad) problems() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for kind, n := range l.failures {
		out = append(out, fmt.Sprintf("%s: %d failed (last: %s)", kind, n, l.lastErr[kind]))
	}
	slices.Sort(out)
	return out
}

// stopChurn ends the short-lived starts and waits for those under way to
// finish; the steady workloads go on.
func (l *churnLoad) stopChurn() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// kill stops every process of the group, steady and short-lived (and
// their children: cc1, ld, compile ...), and reaps the direct ones. Safe
// to call more than once and from a signal handler's goroutine.
func (l *churnLoad) kill() {
	l.once.Do(func() {
		l.stopOnce.Do(func() { close(l.stop) })
		l.killGroup()
		l.wg.Wait()
		l.killGroup() // what started between the first kill and the loops' end
		for _, c := range append(l.steady, l.leader) {
			_ = c.Wait()
		}
	})
}
