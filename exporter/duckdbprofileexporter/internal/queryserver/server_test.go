package queryserver

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"

	_ "github.com/duckdb/duckdb-go/v2" // the "duckdb" database/sql driver
)

// While the writer opens the file again (db() is nil), a query is refused
// with 503, Retry-After and a sentence saying why, not a crash or a 400.
func TestQueryWhileTheFileIsReopenedIsRefusedWith503(t *testing.T) {
	endpoint := localendpoint.NewServerConfig("127.0.0.1:0")
	srv, err := Start(context.Background(), &endpoint, componenttest.NewNopHost(), componenttest.NewNopTelemetrySettings(),
		Config{MaxConcurrent: 1, MemoryLimit: "64MB"}, func() *sql.DB { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	body, _ := json.Marshal(sqlquery.Request{SQL: "SELECT 1"})
	resp, err := http.Post("http://"+srv.Addr()+sqlquery.Path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb sqlquery.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != retryAfter ||
		!strings.Contains(eb.Error, "being opened again after a failed write") {
		t.Fatalf("got %s, Retry-After %q, %q; want 503, Retry-After %s and the reason", resp.Status, resp.Header.Get("Retry-After"), eb.Error, retryAfter)
	}
	if srv.Running() != 0 {
		t.Fatalf("%d queries still counted as running", srv.Running())
	}
}

// startCounting serves queries against db(), counting the requests that got
// past the query slots (each asks for the database once).
func startCounting(t *testing.T, memoryLimit string, db func(call int64) *sql.DB) (*Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	endpoint := localendpoint.NewServerConfig("127.0.0.1:0")
	srv, err := Start(context.Background(), &endpoint, componenttest.NewNopHost(), componenttest.NewNopTelemetrySettings(),
		Config{MaxConcurrent: 1, MemoryLimit: memoryLimit, Limits: sqlquery.DefaultLimits}, func() *sql.DB { return db(calls.Add(1)) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return srv, &calls
}

func openDuckDB(t *testing.T, memoryLimit string) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "?memory_limit="+memoryLimit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// The CLI's client (sqlquery.Client) waits out a reopen: the endpoint's 503
// with Retry-After is sent again after the server's delay, and the query
// is answered once the file is open again, not failed.
func TestClientWaitsOutAReopen(t *testing.T) {
	db := openDuckDB(t, "64MB")
	srv, calls := startCounting(t, "64MB", func(call int64) *sql.DB {
		if call <= 2 {
			return nil // the writer is opening the file again
		}
		return db
	})
	res, err := sqlquery.Client{Endpoint: srv.Addr()}.Query(context.Background(), "SELECT 42 AS answer")
	if err != nil {
		t.Fatalf("query across a reopen: %v", err)
	}
	if len(res.Rows) != 1 || fmt.Sprint(res.Rows[0][0]) != "42" {
		t.Fatalf("rows %v, want [[42]]", res.Rows)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the query reached the database %d times, want 3 (two refusals, then the answer)", n)
	}
}

// Refusals that go on past RetryFor are reported with the server's reason
// and how long the client tried; RetryFor < 0 sends once; a deadline ends
// the wait with the context's error.
func TestClientGivesUpOnRefusals(t *testing.T) {
	srv, calls := startCounting(t, "64MB", func(int64) *sql.DB { return nil })

	_, err := sqlquery.Client{Endpoint: srv.Addr(), RetryFor: 1500 * time.Millisecond}.Query(context.Background(), "SELECT 1")
	if err == nil || !strings.Contains(err.Error(), "503 Service Unavailable: the database file is being opened again") ||
		!strings.Contains(err.Error(), "still refused after") {
		t.Fatalf("got %v, want the 503's reason and 'still refused after'", err)
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("sent %d times within RetryFor 1.5 s of a 1 s Retry-After, want 2 or more", n)
	}

	calls.Store(0)
	if _, err := (sqlquery.Client{Endpoint: srv.Addr(), RetryFor: -1}).Query(context.Background(), "SELECT 1"); err == nil ||
		strings.Contains(err.Error(), "still refused") {
		t.Fatalf("RetryFor -1: %v, want the 503 itself", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("RetryFor -1 sent %d times, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := (sqlquery.Client{Endpoint: srv.Addr()}).Query(ctx, "SELECT 1"); !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "being opened again") {
		t.Fatalf("deadline during the wait: %v, want context.DeadlineExceeded with the 503's reason", err)
	}
}

// A query that needs more memory than DuckDB has is refused with 503 but
// no Retry-After: it would fail again, so the client returns it at once.
func TestClientDoesNotRepeatAQueryOutOfMemory(t *testing.T) {
	db := openDuckDB(t, "64MB")
	srv, calls := startCounting(t, "64MB", func(int64) *sql.DB { return db })
	_, err := sqlquery.Client{Endpoint: srv.Addr()}.Query(context.Background(), "SELECT list(repeat('x', 1000)) FROM range(1000000)")
	if err == nil || !strings.Contains(err.Error(), "503 Service Unavailable: the query needs more memory") {
		t.Fatalf("got %v, want the 503 naming the memory limit", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("sent %d times, want 1", n)
	}
}

// statusRecorder counts the responses of each HTTP status a client gets.
type statusRecorder struct {
	mu     sync.Mutex
	counts map[int]int
}

func (r *statusRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.counts[resp.StatusCode]++
		r.mu.Unlock()
	}
	return resp, err
}

func (r *statusRecorder) count(status int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[status]
}

// With every query slot taken, the client is refused with 429 and
// Retry-After; it sends the query again and is answered once the slot
// frees.
func TestClientWaitsForAFreeSlot(t *testing.T) {
	db := openDuckDB(t, "256MB")
	srv, _ := startCounting(t, "256MB", func(int64) *sql.DB { return db })

	longCtx, cancelLong := context.WithCancel(context.Background())
	defer cancelLong()
	long := make(chan error, 1)
	go func() {
		_, err := sqlquery.Client{Endpoint: srv.Addr()}.Query(longCtx, "SELECT count(*) FROM range(1000000000000) a")
		long <- err
	}()
	require.Eventually(t, func() bool { return srv.Running() == 1 }, time.Minute, 10*time.Millisecond, "the long query to take the slot")

	rec := &statusRecorder{counts: map[int]int{}}
	answer := make(chan error, 1)
	go func() {
		res, err := sqlquery.Client{Endpoint: srv.Addr(), HTTP: &http.Client{Transport: rec}}.Query(context.Background(), "SELECT 7")
		if err == nil && (len(res.Rows) != 1 || fmt.Sprint(res.Rows[0][0]) != "7") {
			err = fmt.Errorf("rows %v, want [[7]]", res.Rows)
		}
		answer <- err
	}()
	require.Eventually(t, func() bool { return rec.count(http.StatusTooManyRequests) > 0 }, time.Minute, 10*time.Millisecond, "a 429 for the second query")
	cancelLong()
	if err := <-long; err == nil {
		t.Fatal("the long query finished")
	}
	if err := <-answer; err != nil {
		t.Fatalf("second query after the slot freed: %v", err)
	}
	if rec.count(http.StatusOK) != 1 {
		t.Fatalf("statuses %v, want one 200 after the 429s", rec.counts)
	}
}
