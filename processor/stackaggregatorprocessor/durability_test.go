package stackaggregatorprocessor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// storeSink stands for the next component as the exporter behaves: it keeps
// each window once per hotpath.batch.id (the exporter's ingested_batches
// check, tested on the real DuckDB file in the writer's tests) and can be
// told to fail, before or after storing ("stored, but the answer was lost").
type storeSink struct {
	mu         sync.Mutex
	stored     map[string]pprofile.Profiles
	deliveries map[string]int
	failBefore bool // refuse without storing
	failAfter  bool // store, then report an error
}

func newStoreSink() *storeSink {
	return &storeSink{stored: map[string]pprofile.Profiles{}, deliveries: map[string]int{}}
}

func (s *storeSink) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

// ConsumeProfilesForTest is process as the pipeline sees it: buffered
// batches are acknowledged.
func (p *stackProcessor) ConsumeProfilesForTest(pd pprofile.Profiles) error {
	_, err := p.process(context.Background(), pd)
	if errors.Is(err, processorhelper.ErrSkipProcessingData) {
		return nil
	}
	return err
}

func (s *storeSink) ConsumeProfiles(_ context.Context, pd pprofile.Profiles) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failBefore {
		return errors.New("downstream refuses")
	}
	id := profileschema.BatchID(pd)
	if id == "" {
		return errors.New("window emitted without hotpath.batch.id")
	}
	s.deliveries[id]++
	if _, ok := s.stored[id]; !ok {
		s.stored[id] = pd
	}
	if s.failAfter {
		return errors.New("stored, but the answer was lost")
	}
	return nil
}

func (s *storeSink) totals() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pds []pprofile.Profiles
	for _, pd := range s.stored {
		pds = append(pds, pd)
	}
	return totals(pds...)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// walProcessor builds a processor with a write-ahead log in dir, its clock
// under the test's control, and starts it.
func walProcessor(t *testing.T, dir string, clk *fakeClock, next *storeSink, logger *zap.Logger) (*stackProcessor, *componenttest.Telemetry) {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := processor.Settings{ID: component.NewID(Type), TelemetrySettings: tel.NewTelemetrySettings()}
	if logger != nil {
		set.Logger = logger
	}
	cfg := testConfig(time.Minute)
	cfg.MaxDelay = 30 * time.Second
	cfg.MaxPendingWindows = 3
	cfg.WAL.Directory = dir
	p, err := newProcessor(cfg, set, next)
	if err != nil {
		t.Fatal(err)
	}
	p.now = clk.now
	if err := p.start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	return p, tel
}

// crash stops p the way kill -9 does as far as the log is concerned: no
// flush, no shutdown; the files are just left as they are.
func crash(p *stackProcessor) {
	p.cancel()
	<-p.done
	_ = p.wal.Close()
}

func agentBatch(start time.Time, id string, svc string, n int64) pprofile.Profiles {
	pd := input(start, 15*time.Second, nil, nil, procSpec{service: svc, host: "h", pid: 1, samples: []sampleSpec{
		{stack: []string{"work", "main"}, n: n}, {stack: []string{"idle", "main"}, n: 1},
	}})
	if id != "" {
		for i := 0; i < pd.ResourceProfiles().Len(); i++ {
			pd.ResourceProfiles().At(i).Resource().Attributes().PutStr(profileschema.AttrBatchID, id)
		}
	}
	return pd
}

// Everything acknowledged before a crash is emitted after the restart, once
// the windows close, with exactly the acknowledged totals.
func TestAcknowledgedBatchesSurviveACrash(t *testing.T) {
	dir := t.TempDir()
	minute := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: minute.Add(5 * time.Second)}
	sink := newStoreSink()
	p1, _ := walProcessor(t, dir, clk, sink, nil)
	var sent []pprofile.Profiles
	for i := range 4 {
		in := agentBatch(minute.Add(time.Duration(i)*15*time.Second), fmt.Sprintf("agent-a-%d", i), "api", int64(i+2))
		sent = append(sent, in)
		if err := p1.ConsumeProfilesForTest(in); err != nil {
			t.Fatal(err)
		}
		clk.advance(15 * time.Second)
	}
	crash(p1)
	if len(sink.stored) != 0 {
		t.Fatal("a window was emitted before it closed")
	}

	obs, logs := observer.New(zap.InfoLevel)
	p2, tel := walProcessor(t, dir, clk, sink, zap.New(obs))
	checkCounter(t, tel, "replayed_batches", 4)
	clk.advance(2 * time.Minute)
	if err := p2.flush(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.totals(), totals(sent...); !maps.Equal(got, want) {
		t.Fatalf("after crash and restart stored %v, want %v", got, want)
	}
	// The restart's gap is reported once the next batch arrives.
	if err := p2.ConsumeProfilesForTest(agentBatch(clk.now(), "agent-a-9", "api", 1)); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("first batch since start").Len(); n != 1 {
		t.Fatalf("%d gap log lines, want 1", n)
	}
	checkCounter(t, tel, "restart_gap", int64((2*time.Minute + 15*time.Second).Seconds()))
	if err := p2.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Stored downstream but the answer lost, then a crash: the window comes
// back after the restart under the same id, so the exporter keeps it once.
func TestWindowStoredButNotAnsweredIsResentUnderItsID(t *testing.T) {
	dir := t.TempDir()
	minute := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: minute.Add(5 * time.Second)}
	sink := newStoreSink()
	p1, tel1 := walProcessor(t, dir, clk, sink, nil)
	in := agentBatch(minute, "agent-b-1", "api", 5)
	if err := p1.ConsumeProfilesForTest(in); err != nil {
		t.Fatal(err)
	}
	clk.advance(2 * time.Minute)
	sink.failAfter = true
	if err := p1.flush(context.Background(), false); err == nil {
		t.Fatal("flush hid the downstream error")
	}
	checkCounter(t, tel1, "emit_failures", 1)
	crash(p1)

	sink.failAfter = false
	p2, _ := walProcessor(t, dir, clk, sink, nil)
	if err := p2.flush(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if len(sink.deliveries) != 1 {
		t.Fatalf("the replayed window got a new id: deliveries %v", sink.deliveries)
	}
	for id, n := range sink.deliveries {
		if n != 2 {
			t.Fatalf("window %s delivered %d times, want 2 (first try, replay)", id, n)
		}
	}
	if got, want := sink.totals(), totals(in); !maps.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
	if err := p2.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A sender's resend of a batch the processor holds is acknowledged and not
// counted again: in the same run, after a crash, and after its window was
// stored and its log segment deleted.
func TestResentBatchIsCountedOnce(t *testing.T) {
	dir := t.TempDir()
	minute := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: minute.Add(5 * time.Second)}
	sink := newStoreSink()
	p1, tel1 := walProcessor(t, dir, clk, sink, nil)
	in := agentBatch(minute, "agent-c-1", "api", 5)
	for range 2 {
		if err := p1.ConsumeProfilesForTest(in); err != nil {
			t.Fatal(err)
		}
	}
	checkCounter(t, tel1, "duplicate_batches", 1)
	crash(p1)

	p2, tel2 := walProcessor(t, dir, clk, sink, nil)
	if err := p2.ConsumeProfilesForTest(in); err != nil {
		t.Fatal(err)
	}
	checkCounter(t, tel2, "duplicate_batches", 1)
	clk.advance(3 * time.Minute) // the window closes and the segment rotates
	if err := p2.flush(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := p2.ConsumeProfilesForTest(agentBatch(clk.now(), "agent-c-2", "api", 1)); err != nil {
		t.Fatal(err)
	}
	if err := p2.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	p3, tel3 := walProcessor(t, dir, clk, sink, nil)
	if err := p3.ConsumeProfilesForTest(in); err != nil {
		t.Fatal(err)
	}
	checkCounter(t, tel3, "duplicate_batches", 1)
	if err := p3.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := totals(in, agentBatch(minute, "", "api", 1))
	if got := sink.totals(); !maps.Equal(got, want) {
		t.Fatalf("stored %v, want %v", got, want)
	}
}

// While the next component refuses windows they are kept and retried, new
// data is refused (retryably) past max_pending_windows, and once it accepts
// again everything acknowledged arrives exactly once.
func TestRefusedWindowsAreKeptAndBackPressureSenders(t *testing.T) {
	dir := t.TempDir()
	minute := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: minute.Add(5 * time.Second)}
	sink := newStoreSink()
	sink.failBefore = true
	p, tel := walProcessor(t, dir, clk, sink, nil)
	var acked []pprofile.Profiles
	refused := 0
	for i := range 6 {
		in := agentBatch(clk.now().Truncate(time.Minute), fmt.Sprintf("agent-d-%d", i), "api", int64(i+1))
		if err := p.ConsumeProfilesForTest(in); err != nil {
			refused++
		} else {
			acked = append(acked, in)
		}
		clk.advance(2 * time.Minute)
		_ = p.flush(context.Background(), false)
	}
	if refused == 0 {
		t.Fatal("new data kept being accepted while windows piled up")
	}
	checkCounter(t, tel, "refused_batches", int64(refused))
	sink.failBefore = false
	if err := p.flush(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := p.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.totals(), totals(acked...); !maps.Equal(got, want) {
		t.Fatalf("stored %v, want the %d acknowledged batches %v", got, len(acked), want)
	}
}
