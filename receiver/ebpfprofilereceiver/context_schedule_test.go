package ebpfprofilereceiver

import (
	"fmt"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/processcontext"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// A process without a process context is looked at again one interval
// after its read, then two, four, eight and sixteen, then no more; one
// with a context is checked each interval; one whose context went keeps
// its service and is looked at again from the start.
func TestProcessContextLooks(t *testing.T) {
	table, _ := newTestTable(t, newBinaryWork(1, time.Second), false)
	iv := table.cfg.Interval
	e := &processEntry{}
	at := time.Unix(1000, 0)
	var gaps []int
	for {
		table.applyContext(e, processcontext.Resource{}, processcontext.ErrNotPublished, at)
		if e.contextDue.IsZero() {
			break
		}
		gaps = append(gaps, int(e.contextDue.Sub(at)/iv))
		at = e.contextDue
	}
	if fmt.Sprint(gaps) != "[1 2 4 8 16]" || e.contextMisses != contextLooks {
		t.Errorf("looks after %v intervals and %d misses, want [1 2 4 8 16] and %d", gaps, e.contextMisses, contextLooks)
	}

	e = &processEntry{}
	table.applyContext(e, processcontext.Resource{}, processcontext.ErrNotPublished, at)
	found := processcontext.Resource{Address: 0x7f0000001000, PublishedAt: 5, Attributes: map[string]string{
		"service.name": "checkout", "service.version": "1.4.2", "service.namespace": "shop",
		"service.instance.id": "i-1", "deployment.environment.name": "prod", "other": "x"}}
	table.applyContext(e, found, nil, at)
	want := profilebuilder.ServiceAttributes{Version: "1.4.2", Namespace: "shop", InstanceID: "i-1", Environment: "prod"}
	if e.contextService != "checkout" || e.resource.Published != want || e.contextAddr != found.Address ||
		e.contextPublishedAt != 5 || e.contextDue != at.Add(iv/2) {
		t.Errorf("after a context was found: service %q, %+v at %#x (%d), due %v; want checkout, %+v, due at the next interval",
			e.contextService, e.resource.Published, e.contextAddr, e.contextPublishedAt, e.contextDue.Sub(at), want)
	}
	table.applyContext(e, processcontext.Resource{}, processcontext.ErrNotPublished, at.Add(iv))
	if e.contextService != "checkout" || e.resource.Published != want || e.contextAddr != 0 || e.contextPublishedAt != 0 ||
		e.contextMisses != 1 || e.contextDue != at.Add(2*iv) {
		t.Errorf("after the context went: service %q, %+v at %#x (%d), %d misses, due %v after; want the same service, looked at again one interval later",
			e.contextService, e.resource.Published, e.contextAddr, e.contextPublishedAt, e.contextMisses, e.contextDue.Sub(at))
	}
}
