package ebpfprofilereceiver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/debuginfod/debuginfodtest"
)

// debugServer serves one build's debug file the way debuginfod servers do,
// answers 404 for other builds, and fails while failing is set.
type debugServer struct {
	build string
	file  []byte

	mu      sync.Mutex
	failing bool
	asked   map[string]int
}

func (s *debugServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/buildid/"), "/debuginfo")
	s.asked[id]++
	switch {
	case s.failing:
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	case id == s.build:
		_, _ = w.Write(s.file)
	default:
		http.NotFound(w, r)
	}
}

func (s *debugServer) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[id]
}

// fakeClock is a clock tests move.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// The fetcher's answers to the symbolizer through a build's life: wait
// while queued (up to its wait), the cached path once fetched, nothing
// for a build no server has (asked once), and a failed fetch asked again
// only after debugRetryAfter.
func TestDebugFetcherStates(t *testing.T) {
	path, build := debuginfodtest.BuildELF(t, "int main(void) { return 0; }")
	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	srv := &debugServer{build: build, file: file, asked: map[string]int{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	counter, err := noop.NewMeterProvider().Meter("t").Int64Counter("c")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DebuginfodConfig{URLs: []string{ts.URL}, Directory: t.TempDir(), MaxMiB: 16, Wait: 30 * time.Second}
	d, err := newDebugFetcher(cfg, zap.NewNop(), counter)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	d.now = clock.now
	var outcomes []string
	d.count = func(o string) { outcomes = append(outcomes, o) }
	ctx := context.Background()
	// fetchQueued runs what run would: the queued fetches, in order.
	fetchQueued := func() {
		for {
			select {
			case b := <-d.queue:
				d.fetch(ctx, b)
			default:
				return
			}
		}
	}

	if _, ok := d.DebugFile("not-hex"); ok {
		t.Error("a build ID that is not a GNU one waits")
	}
	if path, wait := d.DebugFile(build); path != "" || !wait {
		t.Fatalf("queued build: (%q, %v), want to wait", path, wait)
	}
	clock.add(31 * time.Second)
	if path, wait := d.DebugFile(build); path != "" || wait {
		t.Fatalf("queued past its wait: (%q, %v), want read without it", path, wait)
	}
	fetchQueued()
	want := filepath.Join(cfg.Directory, build, "debuginfo")
	if path, wait := d.DebugFile(build); path != want || wait {
		t.Fatalf("fetched: (%q, %v), want (%q, false)", path, wait, want)
	}

	missing := strings.Repeat("ab", 20)
	d.DebugFile(missing)
	fetchQueued()
	clock.add(time.Hour)
	if path, wait := d.DebugFile(missing); path != "" || wait {
		t.Fatalf("no server has it: (%q, %v)", path, wait)
	}
	fetchQueued()
	if n := srv.count(missing); n != 1 {
		t.Errorf("a build no server has was asked %d times, want once", n)
	}

	srv.mu.Lock()
	srv.failing = true
	srv.mu.Unlock()
	down := strings.Repeat("cd", 20)
	d.DebugFile(down)
	fetchQueued()
	clock.add(debugRetryAfter - time.Second)
	if _, wait := d.DebugFile(down); wait || len(d.queue) != 0 {
		t.Fatalf("asked again %v before the retry time (wait %v)", debugRetryAfter-time.Second, wait)
	}
	clock.add(2 * time.Second)
	if _, wait := d.DebugFile(down); !wait || len(d.queue) != 1 {
		t.Fatalf("not asked again after %v (wait %v, queued %d)", debugRetryAfter, wait, len(d.queue))
	}
	fetchQueued()

	// A new fetcher over the same directory finds the file there.
	d2, err := newDebugFetcher(cfg, zap.NewNop(), counter)
	if err != nil {
		t.Fatal(err)
	}
	d2.count = func(o string) { outcomes = append(outcomes, o) }
	d2.DebugFile(build)
	d2.fetch(ctx, <-d2.queue)
	if path, _ := d2.DebugFile(build); path != want {
		t.Errorf("from the cache: %q, want %q", path, want)
	}
	if got := strings.Join(outcomes, " "); got != "fetched not_found failed failed cached" {
		t.Errorf("outcomes %q", got)
	}
	if n := srv.count(build); n != 1 {
		t.Errorf("the served build was downloaded %d times, want once", n)
	}
}

// Too many builds at once: the ones past the queue are dropped (read
// without a debug file, asked again at their next read), not waited for.
func TestDebugFetcherQueueFull(t *testing.T) {
	counter, err := noop.NewMeterProvider().Meter("t").Int64Counter("c")
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDebugFetcher(DebuginfodConfig{URLs: []string{"http://127.0.0.1:1"}, Directory: t.TempDir(), MaxMiB: 16, Wait: time.Minute}, zap.NewNop(), counter)
	if err != nil {
		t.Fatal(err)
	}
	dropped := 0
	d.count = func(o string) {
		if o == debugDropped {
			dropped++
		}
	}
	for i := 0; i < debugQueue+3; i++ {
		_, wait := d.DebugFile(fmt.Sprintf("%040x", i+1))
		if wait != (i < debugQueue) {
			t.Fatalf("build %d: wait %v", i, wait)
		}
	}
	if dropped != 3 {
		t.Errorf("%d dropped, want 3", dropped)
	}
}

// Past maxBuilds, the builds already done are forgotten; those waiting
// are kept.
func TestDebugFetcherForgetsDoneBuilds(t *testing.T) {
	counter, err := noop.NewMeterProvider().Meter("t").Int64Counter("c")
	if err != nil {
		t.Fatal(err)
	}
	d, err := newDebugFetcher(DebuginfodConfig{URLs: []string{"http://127.0.0.1:1"}, Directory: t.TempDir(), MaxMiB: 16, Wait: time.Minute}, zap.NewNop(), counter)
	if err != nil {
		t.Fatal(err)
	}
	d.maxBuilds = 4
	for i := 1; i <= 3; i++ {
		d.DebugFile(fmt.Sprintf("%040x", i))
	}
	d.mu.Lock()
	d.builds[fmt.Sprintf("%040x", 1)].done = true
	d.builds[fmt.Sprintf("%040x", 2)].done = true
	d.mu.Unlock()
	d.DebugFile(fmt.Sprintf("%040x", 4))
	d.DebugFile(fmt.Sprintf("%040x", 5)) // at the bound: 1 and 2 go
	d.mu.Lock()
	defer d.mu.Unlock()
	var kept []string
	for id := range d.builds {
		kept = append(kept, strings.TrimLeft(id, "0"))
	}
	slices.Sort(kept)
	if got := strings.Join(kept, " "); got != "3 4 5" {
		t.Errorf("builds kept: %s, want 3 4 5", got)
	}
}
