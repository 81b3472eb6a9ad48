package ebpfprofilereceiver

import (
	"errors"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/cputime"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/processcontext"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/profilebuilder"
)

// An OpenTelemetry SDK may publish its process context (OTEP 4719): the
// service name, version, namespace, instance id and environment its own
// telemetry carries. A process's context is looked for when the process is
// first read, from the maps that read takes anyway. An SDK starts after
// its process (a JVM loads its agent, an application sets up its SDK), and
// often after the first sample; so a sampled process without one is looked
// at again, one interval after its read, then two, four and so on
// (contextLooks in all, about 8 minutes), and a process with one has its
// header's publication time checked at each interval it is sampled in, for
// the SDK's updates; one whose context went is looked at again from the
// start. A process never sampled again costs nothing.
const contextLooks = 6

// readContext looks for e's process context in its maps; e is not
// installed yet.
func (t *processTable) readContext(e *processEntry, maps []byte, now time.Time) {
	dir := filepath.Join(t.procRoot, strconv.Itoa(int(e.resource.PID)))
	r, err := processcontext.ReadProcess(dir, maps)
	t.applyContext(e, r, err, now)
}

// checkContext looks again for the process context of e, sampled in the
// drain at now, when one is due: a new one, or an update of the one it has.
// A process the filters left out is looked at too when they name services:
// its SDK may publish one they keep. reread reports that the published
// service made the filters keep a process they had left out at its read,
// which the caller reads again (it has no snapshot). A kept process the
// published service makes them leave out becomes as one left out at its
// read: cur, its entry from then on, has no snapshot, and the kernel no
// unwind tables or Python frame walk for it. Its samples are dropped
// unsymbolized, so these would be kept for nothing, often for a large
// runtime (a JVM whose agent publishes after start).
func (t *processTable) checkContext(e *processEntry, now time.Time) (cur *processEntry, reread bool) {
	t.mu.Lock()
	watched := e.snapshot != nil || (!e.keep && t.filtersByService())
	due := watched && e.exitedAt.IsZero() && !e.contextDue.IsZero() && !now.Before(e.contextDue)
	addr, published := e.contextAddr, e.contextPublishedAt
	t.mu.Unlock()
	if !due {
		return e, false
	}
	pid := int(e.resource.PID)
	dir := filepath.Join(t.procRoot, strconv.Itoa(pid))
	var r processcontext.Resource
	var err error
	// Part of reading processes: the budget for one-time work sees it.
	cpu := cputime.Measure(func() {
		if addr != 0 {
			r, err = processcontext.ReadAtIfNew(dir, addr, published)
			return
		}
		var maps []byte
		if maps, err = procmaps.Read(t.procRoot, pid); err == nil {
			r, err = processcontext.ReadProcess(dir, maps)
		}
	})
	t.work.charge(workProcessRead, 0, cpu)
	cur, reread = t.judgeContext(e, r, err, now)
	if cur != e {
		e.close()
		t.detachFromKernel(pid)
	}
	return cur, reread
}

// judgeContext records what checkContext's look found for e (r, or err) and
// gives the filters' verdict on the service it names. A kept process they
// now leave out gets a new entry without a snapshot, cur, in the same
// critical section as the verdict, so that no one sees it left out with
// one; the caller releases e's. The unwind worker attaches nothing for an
// entry no longer current (one it is attaching now goes on: those tables
// go when the process does).
func (t *processTable) judgeContext(e *processEntry, r processcontext.Resource, err error, now time.Time) (cur *processEntry, reread bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if errors.Is(err, processcontext.ErrUnchanged) {
		e.contextDue = now.Add(t.cfg.Interval / 2)
		return e, false
	}
	t.applyContext(e, r, err, now)
	if e.contextService == "" || e.contextService == e.resource.ServiceName {
		return e, false
	}
	e.resource.ServiceName = e.contextService
	if !t.filtersByService() {
		return e, false
	}
	pid := int(e.resource.PID)
	kept := e.keep
	e.keep = t.keeps(pid, e.resource.ExePath, e.resource.ExeName, e.resource.ServiceName)
	if kept != e.keep {
		t.logger.Debug("the service its SDK published changed the filters' verdict",
			zap.Int("pid", pid), zap.String("service", e.resource.ServiceName), zap.Bool("kept", e.keep))
	}
	if e.keep || e.snapshot == nil || t.closed || t.entries[pid] != e {
		return e, e.keep && e.snapshot == nil
	}
	cur = e.withoutSnapshotLocked()
	t.entries[pid] = cur
	return cur, false
}

// withoutSnapshotLocked is a copy of e as the entry of a process the filters
// left out at its read: what names and dates it, its filters' verdict and
// its context's schedule, without what symbolizes its samples. t.mu must be
// held.
func (e *processEntry) withoutSnapshotLocked() *processEntry {
	return &processEntry{
		resource:           e.resource,
		keep:               e.keep,
		startTime:          e.startTime,
		readAt:             e.readAt,
		readMono:           e.readMono,
		exitedAt:           e.exitedAt,
		execs:              e.execs,
		sampledAt:          e.sampledAt,
		mapsReadAt:         e.mapsReadAt,
		endedEarly:         e.endedEarly,
		contextService:     e.contextService,
		contextAddr:        e.contextAddr,
		contextPublishedAt: e.contextPublishedAt,
		contextDue:         e.contextDue,
		contextMisses:      e.contextMisses,
	}
}

// applyContext records what a look for e's process context found (r, or
// err) and when to look next; t.mu held once e is installed.
func (t *processTable) applyContext(e *processEntry, r processcontext.Resource, err error, now time.Time) {
	if err != nil {
		if !errors.Is(err, processcontext.ErrNotPublished) {
			t.logger.Debug("process context unreadable", zap.Uint32("pid", e.resource.PID), zap.Error(err))
		}
		if e.contextAddr != 0 {
			// The SDK dropped it (shut down, or set up again: a new
			// publication may follow, elsewhere) or it broke: the process
			// keeps the service it had, and is looked at again as a
			// process that never published.
			e.contextAddr, e.contextPublishedAt, e.contextMisses = 0, 0, 0
		}
		e.contextMisses++
		e.contextDue = time.Time{}
		if e.contextMisses < contextLooks {
			e.contextDue = now.Add(t.cfg.Interval << (e.contextMisses - 1))
		}
		return
	}
	e.contextAddr, e.contextPublishedAt = r.Address, r.PublishedAt
	e.contextDue = now.Add(t.cfg.Interval / 2) // each interval it is sampled in
	e.contextService = r.Attributes[profileschema.AttrServiceName]
	e.resource.Published = profilebuilder.ServiceAttributes{
		Version:     r.Attributes[profileschema.AttrServiceVersion],
		Namespace:   r.Attributes[profileschema.AttrServiceNamespace],
		InstanceID:  r.Attributes[profileschema.AttrServiceInstanceID],
		Environment: r.Attributes[profileschema.AttrDeploymentEnv],
	}
}
