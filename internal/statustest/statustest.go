// Package statustest is a collector host that records the component status
// events reported to it (componentstatus), for tests that check what a
// component tells health checks.
package statustest

import (
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
)

// Host is a component.Host and a componentstatus.Reporter.
type Host struct {
	component.Host

	mu     sync.Mutex
	events []*componentstatus.Event
}

// NewHost returns a host without extensions that records events.
func NewHost() *Host { return &Host{Host: componenttest.NewNopHost()} }

// Report records ev.
func (h *Host) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

// Events returns the events reported so far, oldest first.
func (h *Host) Events() []*componentstatus.Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*componentstatus.Event(nil), h.events...)
}
