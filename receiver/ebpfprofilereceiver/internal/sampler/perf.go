//go:build linux

package sampler

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

const onlineCPUsPath = "/sys/devices/system/cpu/online"

// onlineCPUs reads the online CPU list ("0-3,5,7-8").
func onlineCPUs() ([]int, error) {
	b, err := os.ReadFile(onlineCPUsPath)
	if err != nil {
		return nil, fmt.Errorf("read online CPUs: %w", err)
	}
	cpus, err := parseCPUList(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", onlineCPUsPath, err)
	}
	return cpus, nil
}

func parseCPUList(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("empty CPU list")
	}
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		first, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("cpu %q: %w", part, err)
		}
		last := first
		if isRange {
			if last, err = strconv.Atoi(hi); err != nil {
				return nil, fmt.Errorf("cpu range %q: %w", part, err)
			}
		}
		if first < 0 || last < first {
			return nil, fmt.Errorf("cpu range %q: invalid", part)
		}
		for c := first; c <= last; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// cpuEvent is one CPU's sampling event with the program attached.
type cpuEvent struct {
	fd   int
	link link.Link
}

// perfEvents is the set of per-CPU events feeding the sampling program.
type perfEvents []cpuEvent

// attachPerfEvents opens a CPU-clock event on every online CPU at hz and
// attaches prog to each. On error nothing stays open.
func attachPerfEvents(prog *ebpf.Program, hz int) (perfEvents, error) {
	cpus, err := onlineCPUs()
	if err != nil {
		return nil, err
	}
	evs := make(perfEvents, 0, len(cpus))
	for _, cpu := range cpus {
		fd, err := openCPUClock(cpu, hz, false)
		if err != nil {
			evs.close()
			return nil, err
		}
		l, err := link.AttachRawLink(link.RawLinkOptions{
			Target:  fd,
			Program: prog,
			Attach:  ebpf.AttachPerfEvent,
		})
		if err != nil {
			unix.Close(fd)
			evs.close()
			return nil, fmt.Errorf("attach perf event on cpu %d: %w", cpu, explainLoadError(err))
		}
		evs = append(evs, cpuEvent{fd: fd, link: l})
	}
	return evs, nil
}

// close detaches the program (link) before closing the event.
func (evs perfEvents) close() error {
	var errs []error
	for _, e := range evs {
		if err := e.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detach perf event: %w", err))
		}
		if err := unix.Close(e.fd); err != nil {
			errs = append(errs, fmt.Errorf("close perf event: %w", err))
		}
	}
	return errors.Join(errs...)
}
