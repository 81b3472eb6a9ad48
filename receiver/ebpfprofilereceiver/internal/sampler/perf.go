//go:build linux

package sampler

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/cpulist"
)

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
	cpus, err := cpulist.Online()
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
