package duckdbprofileexporter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// hostileQuery builds a 3 GB list in one aggregate: the query that took a
// gateway with DuckDB's default limit (80% of RAM) from 108 MB to 1.08 GB.
const hostileQuery = "SELECT list(repeat('x',1000)) FROM range(3000000)"

// rssMargin is what the process may grow beyond DuckDB's memory_limit
// while a query runs into it: DuckDB's allocations outside its buffer pool,
// glibc's arenas, and the Go heap of the ingestion and HTTP traffic going on
// meanwhile. docs/security.md records the measured growth.
const rssMargin = 96 << 20

// procStatusBytes reads a "kB" field of /proc/self/status.
func procStatusBytes(t *testing.T, field string) int64 {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", field, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}

// resetPeakRSS makes VmHWM start again from the current RSS (Linux ≥ 4.0),
// so the peak of one query can be read afterwards without sampling.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset peak RSS: %v", err)
	}
}

// ingestor pushes one small batch after another, as an agent's sender
// does: each batch carries an id, and a push that fails is retried until it
// is acknowledged (a retry of a batch whose failed commit had landed is
// recognised by its id). It counts acknowledged batches and failed pushes.
type ingestor struct {
	stored, failed atomic.Int64
	mu             sync.Mutex
	firstErr       error
	stop           chan struct{}
	done           chan struct{}
	halted         sync.Once
}

// samplesPerPush is the samples each push stores (3 + 1, two stacks). The
// summary tier merges rows of one minute, so samples, not rows, are counted.
const samplesPerPush = 4

func startIngestor(e *profilesExporter) *ingestor {
	in := &ingestor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(in.done)
		for i := 0; ; i++ {
			select {
			case <-in.stop:
				return
			default:
			}
			b := newProfileBuilder().process(time.Now(), map[string]any{
				profileschema.AttrServiceName: "ingest", profileschema.AttrBatchID: fmt.Sprintf("ingest-%d", i),
			})
			b.sample(3, []string{fmt.Sprintf("leaf_%d", i%50), "work", "main"}, nil, nil)
			b.sample(1, []string{"gc", "main"}, nil, nil)
			// Retried until acknowledged, even when asked to stop: a
			// batch left half-sent would make the count ambiguous.
			for deadline := time.Now().Add(time.Minute); ; {
				err := e.push(context.Background(), b.pd)
				if err == nil {
					break
				}
				in.failed.Add(1)
				in.mu.Lock()
				if in.firstErr == nil {
					in.firstErr = err
				}
				in.mu.Unlock()
				if time.Now().After(deadline) {
					return // the row count below then fails the test
				}
			}
			in.stored.Add(1)
		}
	}()
	return in
}

func (in *ingestor) halt() {
	in.halted.Do(func() { close(in.stop) })
	<-in.done
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A query that needs more memory than DuckDB's limit fails with a 503 that
// says so, while batches keep being written, and the process grows by at
// most the limit plus rssMargin. Run for each tier's default limit (the
// shipped agent's 64MB and the gateway's 1GB).
func TestHostileQueryFailsCleanlyWhileIngesting(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			cfg := testConfig(t, tier)
			cfg.DuckDB.TempDirectory = t.TempDir()
			e := startExporter(t, cfg)
			limit := cfg.resources().MemoryLimit
			limitBytes := map[string]int64{"64MB": 64e6, "1GB": 1e9}[limit]
			in := startIngestor(e)
			defer in.halt()
			waitUntil(t, "ingestion to store 20 batches", 30*time.Second, func() bool { return in.stored.Load() >= 20 })

			runtimeRSS := procStatusBytes(t, "VmRSS")
			resetPeakRSS(t)
			storedBefore := in.stored.Load()
			body, _ := json.Marshal(sqlquery.Request{SQL: hostileQuery})
			resp, err := http.Post("http://"+e.server.Addr()+sqlquery.Path, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			var eb sqlquery.ErrorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			peak := procStatusBytes(t, "VmHWM")
			storedDuring := in.stored.Load() - storedBefore
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(eb.Error, "needs more memory than this collector gives DuckDB (duckdb.memory_limit "+limit) {
				t.Fatalf("hostile query: %s %q, want 503 naming duckdb.memory_limit %s", resp.Status, eb.Error, limit)
			}

			// Ingestion goes on: more batches are stored after the query,
			// and the table holds exactly the acknowledged ones, once each.
			storedAtEnd := in.stored.Load()
			waitUntil(t, "ingestion to store 20 more batches after the query", 30*time.Second, func() bool {
				return in.stored.Load() >= storedAtEnd+20
			})
			in.halt()
			got := rowsOf(t, e.w.DB(), "SELECT sum(sample_count) FROM "+map[string]string{"local": "cpu_profile_samples_local", "summary": "cpu_profile_summaries"}[tier])
			if want := fmt.Sprint(in.stored.Load() * samplesPerPush); strings.Join(got, "") != want {
				t.Errorf("table holds %v samples, want %s (%d acknowledged batches × %d)", got, want, in.stored.Load(), samplesPerPush)
			}
			// And the endpoint answers ordinary queries again.
			if _, err := (sqlquery.Client{Endpoint: e.server.Addr()}).Query(context.Background(), "SELECT count(*) FROM range(10)"); err != nil {
				t.Errorf("query after the hostile one: %v", err)
			}

			growth := peak - runtimeRSS
			t.Logf("memory_limit %s: RSS %d MiB before the query, peak %d MiB (growth %d MiB, allowed %d MiB); batches stored during the query %d, pushes failed and retried %d (first: %v), batches stored after it %d",
				limit, runtimeRSS>>20, peak>>20, growth>>20, (limitBytes+rssMargin)>>20, storedDuring, in.failed.Load(), in.firstErr, in.stored.Load()-storedAtEnd)
			if growth > limitBytes+rssMargin {
				t.Errorf("RSS grew by %d MiB during the query; the limit is %s, plus a %d MiB margin", growth>>20, limit, rssMargin>>20)
			}
		})
	}
}

// More than query.max_concurrent queries at once: the extra one is refused
// at once with 429, Retry-After and a sentence, not queued.
func TestQueryEndpointRefusesBeyondMaxConcurrent(t *testing.T) {
	cfg := testConfig(t, "local")
	cfg.Query.MaxConcurrent = 1
	cfg.Query.Timeout = time.Minute
	e := startExporter(t, cfg)
	c := sqlquery.Client{Endpoint: e.server.Addr()}

	ctx, cancel := context.WithCancel(context.Background())
	long := make(chan error, 1)
	go func() {
		_, err := c.Query(ctx, "SELECT count(*) FROM range(1000000000000) a")
		long <- err
	}()
	waitUntil(t, "the long query to run", 30*time.Second, func() bool { return e.server.Running() == 1 })

	body, _ := json.Marshal(sqlquery.Request{SQL: "SELECT 1"})
	resp, err := http.Post("http://"+e.server.Addr()+sqlquery.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var eb sqlquery.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(eb.Error, "1 queries are already running (query.max_concurrent)") {
		t.Fatalf("second query: %s, Retry-After %q, %q; want 429 with Retry-After and a reason", resp.Status, resp.Header.Get("Retry-After"), eb.Error)
	}

	cancel() // the client goes away: DuckDB interrupts the query
	if err := <-long; err == nil {
		t.Fatal("the long query finished")
	}
	waitUntil(t, "the long query to end", 30*time.Second, func() bool { return e.server.Running() == 0 })
	if _, err := c.Query(context.Background(), "SELECT 1"); err != nil {
		t.Fatalf("query once the slot is free: %v", err)
	}
}
