//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/processcontext/processcontexttest"
)

// serviceAttrs are the service attributes of pid's samples so far, one
// string per distinct resource ("name version namespace instance env"),
// with their sample counts.
func serviceAttrs(sink *consumertest.ProfilesSink, pid int) map[string]int64 {
	out := map[string]int64{}
	for _, pd := range sink.AllProfiles() {
		profileschema.ForEachSample(pd, func(res pcommon.Resource, _ pprofile.Profile, s pprofile.Sample) {
			attrs := res.Attributes()
			if v, _ := attrs.Get(profileschema.AttrProcessPID); v.Int() != int64(pid) {
				return
			}
			var parts []string
			for _, k := range []string{profileschema.AttrServiceName, profileschema.AttrServiceVersion,
				profileschema.AttrServiceNamespace, profileschema.AttrServiceInstanceID, profileschema.AttrDeploymentEnv} {
				var val string
				if v, ok := attrs.Get(k); ok {
					val = v.Str()
				}
				parts = append(parts, val)
			}
			for _, v := range s.Values().All() {
				out[strings.Join(parts, " ")] += v
			}
		})
	}
	return out
}

// batchesWith counts the batches so far that hold samples of pid.
func batchesWith(sink *consumertest.ProfilesSink, pid int) int {
	var n int
	for _, pd := range sink.AllProfiles() {
		if testworkload.TallyProcess([]pprofile.Profiles{pd}, pid).Total > 0 {
			n++
		}
	}
	return n
}

// TestServiceFromProcessContext: a process whose SDK published its process
// context (OTEP 4719) is the service the SDK says, with its version,
// namespace, instance id and environment, ahead of OTEL_SERVICE_NAME; one
// whose SDK publishes after its first samples becomes that service at a
// later interval; an SDK's update reaches the next intervals. The early
// one publishes as the OTEP's first reference implementation did (a bare
// Resource), the late one with its reference implementation 1.0.0.
func TestServiceFromProcessContext(t *testing.T) {
	bin := processcontexttest.Build(t)
	const instance = "627cc493-f310-47de-96bd-71410b7dec09"
	// Published before the receiver starts, so that its read cannot come
	// first: a process read before its SDK publishes is OTEL_SERVICE_NAME
	// until the next look (a second here), and would have samples as that.
	early := processcontexttest.Start(t, bin, []string{"OTEL_SERVICE_NAME=from-env"}, "anon",
		"service.name=checkout", "service.version=1.4.2", "service.namespace=shop",
		"service.instance.id="+instance, "deployment.environment.name=prod")
	early.Say(t, "", "published")
	r, sink := startReceiver(t, testConfig())
	defer func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	late := processcontexttest.Start(t, bin, nil, "later-ref")

	// Sampled before its SDK published: its executable's name. It is
	// looked at again for about 31 intervals after its read (31 s here),
	// so its SDK publishes as soon as that is seen.
	waitFor(t, 60*time.Second, "samples of the late publisher as publisher", func() bool {
		return serviceAttrs(sink, late.Cmd.Process.Pid)["publisher    "] > 0
	})
	late.Say(t, "service.name=billing service.version=7", "published")
	waitFor(t, 60*time.Second, "samples of the late publisher as billing", func() bool {
		return serviceAttrs(sink, late.Cmd.Process.Pid)["billing 7   "] > 0
	})
	want := "checkout 1.4.2 shop " + instance + " prod"
	waitFor(t, 60*time.Second, "samples of the early publisher as "+want, func() bool {
		return serviceAttrs(sink, early.Cmd.Process.Pid)[want] > 0
	})

	early.Say(t, "service.name=checkout service.version=1.5.0", "updated")
	waitFor(t, 60*time.Second, "samples of the early publisher as checkout 1.5.0", func() bool {
		return serviceAttrs(sink, early.Cmd.Process.Pid)["checkout 1.5.0   "] > 0
	})
	for _, p := range []*processcontexttest.Publisher{early, late} {
		for attrs, n := range serviceAttrs(sink, p.Cmd.Process.Pid) {
			switch attrs {
			case want, "checkout 1.5.0   ", "publisher    ", "billing 7   ":
			default:
				t.Errorf("pid %d: %d samples as %q", p.Cmd.Process.Pid, n, attrs)
			}
		}
	}
}

// A process whose SDK drops its context keeps the service it had; when the
// SDK publishes again, in a new mapping, the process becomes the service it
// says then.
func TestContextPublishedAgain(t *testing.T) {
	bin := processcontexttest.Build(t)
	r, sink := startReceiver(t, testConfig())
	defer func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	p := processcontexttest.Start(t, bin, nil, "ref", "service.name=orders")
	p.Say(t, "", "published")
	pid := p.Cmd.Process.Pid
	waitFor(t, 60*time.Second, "samples as orders", func() bool { return serviceAttrs(sink, pid)["orders    "] > 0 })
	p.Say(t, "drop", "dropped")
	waitFor(t, 60*time.Second, "the receiver to see the context go", func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[pid]
		return e != nil && e.contextAddr == 0 && e.resource.ServiceName == "orders"
	})
	p.Say(t, "service.name=orders-v2", "published")
	waitFor(t, 60*time.Second, "samples as orders-v2", func() bool { return serviceAttrs(sink, pid)["orders-v2    "] > 0 })
}

// The service a process's context names is the one include and exclude
// match, also when the SDK publishes it after the process's read: a process
// left out then is kept from the interval its SDK publishes a service the
// include names.
func TestIncludeByPublishedService(t *testing.T) {
	bin := processcontexttest.Build(t)
	cfg := testConfig()
	cfg.Include.Services = []string{"checkout"}
	// These two publish before the receiver starts, so that their reads
	// find their contexts: read before, the one whose environment says
	// checkout would be kept until its context is looked for again (a
	// second here), and its samples of that second kept as checkout.
	in := processcontexttest.Start(t, bin, []string{"OTEL_SERVICE_NAME=from-env"}, "memfd", "service.name=checkout")
	in.Say(t, "", "published")
	out := processcontexttest.Start(t, bin, []string{"OTEL_SERVICE_NAME=checkout"}, "anon", "service.name=billing")
	out.Say(t, "", "published")
	r, sink := startReceiver(t, cfg)
	late := processcontexttest.Start(t, bin, []string{"OTEL_SERVICE_NAME=from-env"}, "later-memfd")
	leftOut := func(p *processcontexttest.Publisher, service string) func() bool {
		return func() bool {
			r.procs.mu.Lock()
			defer r.procs.mu.Unlock()
			e := r.procs.entries[p.Cmd.Process.Pid]
			return e != nil && !e.keep && e.snapshot == nil && e.resource.ServiceName == service && !e.sampledAt.IsZero()
		}
	}
	// Looked at again for about 31 intervals after its read (31 s here):
	// its SDK publishes as soon as it was read and left out.
	waitFor(t, 60*time.Second, "the late publisher read and left out", leftOut(late, "from-env"))
	late.Say(t, "service.name=checkout service.version=2", "published")
	waitFor(t, 60*time.Second, "samples of the included publisher", func() bool {
		return serviceAttrs(sink, in.Cmd.Process.Pid)["checkout    "] > 0
	})
	waitFor(t, 60*time.Second, "the other publisher read and left out", leftOut(out, "billing"))
	waitFor(t, 60*time.Second, "samples of the late publisher as checkout", func() bool {
		return serviceAttrs(sink, late.Cmd.Process.Pid)["checkout 2   "] > 0
	})
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := serviceAttrs(sink, out.Cmd.Process.Pid); len(got) != 0 {
		t.Errorf("the process whose context says billing (OTEL_SERVICE_NAME=checkout) was kept: %v", got)
	}
	// Kept with its snapshot: its stacks are named.
	if tl := testworkload.TallyProcess(sink.AllProfiles(), late.Cmd.Process.Pid); tl.Leaf["burn"] == 0 {
		t.Errorf("no sample of the late publisher in burn; top:%s", tl.Top(5))
	}
	for attrs, n := range serviceAttrs(sink, late.Cmd.Process.Pid) {
		if attrs != "checkout 2   " {
			t.Errorf("%d samples of the late publisher as %q, before its SDK published", n, attrs)
		}
	}
}

// A kept process whose SDK then publishes a service the exclude names is
// left out from that interval on, and lets go of its snapshot.
func TestExcludeByLaterPublishedService(t *testing.T) {
	bin := processcontexttest.Build(t)
	cfg := testConfig()
	cfg.Exclude.Services = []string{"billing"}
	r, sink := startReceiver(t, cfg)
	defer func() {
		if err := r.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	late := processcontexttest.Start(t, bin, nil, "later-anon")
	pid := late.Cmd.Process.Pid
	// Never publishes, so it stays kept: its samples mark the batches.
	other := processcontexttest.Start(t, bin, nil, "later-memfd")
	waitFor(t, 60*time.Second, "samples of the late publisher as publisher", func() bool {
		return serviceAttrs(sink, pid)["publisher    "] > 0
	})
	waitFor(t, 60*time.Second, "the late publisher kept with its snapshot", func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		e := r.procs.entries[pid]
		return e != nil && e.keep && e.snapshot != nil
	})
	late.Say(t, "service.name=billing", "published")
	var leftOut *processEntry
	waitFor(t, 60*time.Second, "the late publisher left out", func() bool {
		r.procs.mu.Lock()
		defer r.procs.mu.Unlock()
		leftOut = r.procs.entries[pid]
		return leftOut != nil && !leftOut.keep && leftOut.resource.ServiceName == "billing"
	})
	// As one left out at its read: nothing kept to symbolize samples it
	// no longer has.
	if leftOut.snapshot != nil {
		t.Errorf("the left-out process keeps its snapshot (%d mappings)", len(leftOut.snapshot.Mappings))
	}
	// The drain that left it out dropped its samples already: none comes
	// in the next batches either.
	before := serviceAttrs(sink, pid)
	batches := batchesWith(sink, other.Cmd.Process.Pid)
	waitFor(t, 60*time.Second, "two more batches with the other publisher's samples", func() bool {
		return batchesWith(sink, other.Cmd.Process.Pid) >= batches+2
	})
	after := serviceAttrs(sink, pid)
	if len(after) != 1 || after["publisher    "] != before["publisher    "] {
		t.Errorf("samples of the excluded process: %v, before it was left out %v", after, before)
	}
}
