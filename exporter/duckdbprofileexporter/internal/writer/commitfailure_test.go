package writer

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

// memoryHog asks DuckDB for a 1 GB list, four times the test's limit.
const memoryHog = "SELECT list(repeat('x', 1000)) FROM range(1000000)"

// commitFailuresWanted is how many failed COMMITs the test waits for per
// tier: 2-37 s a tier alone on a 2-core VM, about 80 s in CI beside make
// run; it gives up after 10 minutes. Without the writer's reopen
// (Writer.discard) about one failed COMMIT in three left rows that a later
// COMMIT showed: the test failed 7 runs of 7.
const commitFailuresWanted = 3

// A query that takes DuckDB's memory while batches are written makes some
// of their COMMITs fail. DuckDB 1.5 can leave rows of such a transaction in
// its tables, unseen until the next COMMIT to the table shows them, and a
// batch sent again after its failed COMMIT was then stored twice. The
// writer opens the file again after a failed COMMIT. Batches (each with a
// leaf frame of its own) are sent as a sender does, again until
// acknowledged, while such queries run, until commitFailuresWanted COMMITs
// have failed; then each batch is in the file once, before and after the
// file is closed and opened again.
func TestFailedCommitsStoreEachBatchOnce(t *testing.T) {
	for _, tier := range []schema.Tier{schema.Local, schema.Summary} {
		t.Run(string(tier), func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "f.duckdb")
			res := Resources{MemoryLimit: "256MB", TempDirectory: t.TempDir()}
			w, err := Open(ctx, path, tier, WithResources(res))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Close() }()

			var commitFailures, otherFailures atomic.Int64
			var lastCommitErr atomic.Value
			stop, sent := make(chan struct{}), make(chan int, 1)
			go func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						sent <- i
						return
					default:
					}
					at := time.Now().UTC()
					b := &Batch{ID: fmt.Sprintf("b-%d", i), Rows: []StackRow{
						{Time: at, ServiceID: "api", Frames: []string{"main", "work", fmt.Sprintf("leaf_%d", i)}, Count: 3},
						{Time: at, ServiceID: "api", Frames: []string{"main", "gc"}, Count: 1},
					}}
					for deadline := time.Now().Add(time.Minute); ; {
						err := w.Write(ctx, b)
						if err == nil || errors.Is(err, ErrDuplicate) {
							break
						}
						if strings.Contains(err.Error(), "Failed to commit") {
							commitFailures.Add(1)
							lastCommitErr.Store(err.Error())
						} else {
							otherFailures.Add(1)
						}
						if time.Now().After(deadline) {
							t.Errorf("batch %d not stored after a minute of retries: %v", i, err)
							sent <- i // not stored: the counts below fail too
							return
						}
					}
				}
			}()

			hogs, hogsFailed := 0, 0
			deadline := time.Now().Add(10 * time.Minute)
			for commitFailures.Load() < commitFailuresWanted && time.Now().Before(deadline) {
				db := w.DB()
				if db == nil {
					time.Sleep(time.Millisecond) // the writer is opening the file again
					continue
				}
				hogs++
				if _, err := db.ExecContext(ctx, memoryHog); err != nil {
					hogsFailed++
				}
			}
			close(stop)
			n := <-sent
			t.Logf("%d batches; %d queries out of memory of %d; %d COMMITs failed (last: %.200v), %d other writes failed",
				n, hogsFailed, hogs, commitFailures.Load(), lastCommitErr.Load(), otherFailures.Load())
			if commitFailures.Load() < commitFailuresWanted {
				t.Fatalf("only %d COMMITs failed in 10 minutes of queries out of memory: the test needs %d", commitFailures.Load(), commitFailuresWanted)
			}

			check := func(when string) {
				t.Helper()
				tb := schema.TablesFor(tier)
				if wrong := queryStrings(t, w.DB(), "SELECT folded, sum(sample_count) FROM "+tb.Decoded+
					" WHERE folded LIKE 'main;work;leaf_%' GROUP BY ALL HAVING sum(sample_count) <> 3 ORDER BY ALL"); len(wrong) > 0 {
					t.Errorf("%s: batches not stored once (stack|samples, want 3 each): %v", when, wrong)
				}
				want := fmt.Sprintf("%d|%d|%d", n, 4*n, n)
				got := strings.Join(queryStrings(t, w.DB(), "SELECT (SELECT count(DISTINCT folded) FROM "+tb.Decoded+" WHERE folded LIKE 'main;work;leaf_%'), "+
					"(SELECT sum(sample_count) FROM "+tb.Stacks+"), (SELECT count(*) FROM "+schema.IngestedBatches+")"), "")
				if got != want {
					t.Errorf("%s: batches|samples|ids %s, want %s", when, got, want)
				}
			}
			check("written")
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if w, err = Open(ctx, path, tier, WithResources(res)); err != nil {
				t.Fatal(err)
			}
			check("opened again")
		})
	}
}
