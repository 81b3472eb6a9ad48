//go:build privileged

// Fault tests that need root: they mount a small tmpfs to fill the disk.

package writer

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
	"github.com/hotpath-dev/hotpath/internal/smalldisk"
)

// TestFullAndReadOnlyDiskReturnErrorsThenRecover writes to a small tmpfs:
// when it is full, and when it is remounted read-only, Write returns errors
// (the collector's retry and queue keep the data) and works again once the
// cause is gone.
func TestFullAndReadOnlyDiskReturnErrorsThenRecover(t *testing.T) {
	dir := smalldisk.Mount(t, 16<<20)
	ctx := context.Background()
	w := open(t, filepath.Join(dir, "p.duckdb"), schema.Local)
	defer w.Close()
	if err := w.Write(ctx, benchBatch(100, time.Unix(1_700_000_000, 0))); err != nil {
		t.Fatal(err)
	}

	// Fill the disk.
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	f.Close()
	var writeErr error
	for i := 0; i < 20 && writeErr == nil; i++ {
		writeErr = w.Write(ctx, benchBatch(5000, time.Unix(1_700_000_100+int64(i), 0)))
	}
	if writeErr == nil {
		t.Fatal("writes to a full disk kept succeeding")
	}
	t.Logf("full disk: %v", writeErr)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, benchBatch(100, time.Unix(1_700_000_200, 0))); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}

	// A file that cannot be written (root ignores permission bits, so the
	// immutable attribute stands in for a read-only file).
	immutable := func(on bool) {
		t.Helper()
		for _, p := range []string{dir, filepath.Join(dir, "p.duckdb"), filepath.Join(dir, "p.duckdb.wal")} {
			if err := setImmutable(p, on); err != nil && !os.IsNotExist(err) {
				t.Fatalf("set immutable=%v on %s: %v", on, p, err)
			}
		}
	}
	// Checkpoint first so DuckDB must create a new WAL on the next commit.
	if _, err := w.DB().Exec("CHECKPOINT"); err != nil {
		t.Fatal(err)
	}
	immutable(true)
	defer immutable(false)
	writeErr = nil
	for i := 0; i < 20 && writeErr == nil; i++ {
		writeErr = w.Write(ctx, benchBatch(5000, time.Unix(1_700_000_300+int64(i), 0)))
	}
	if writeErr == nil {
		t.Fatal("writes to a read-only file kept succeeding")
	}
	t.Logf("read-only: %v", writeErr)
	immutable(false)
	if err := w.Write(ctx, benchBatch(100, time.Unix(1_700_000_400, 0))); err != nil {
		t.Fatalf("write after remount: %v", err)
	}
	if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
		t.Fatal(err)
	}
}
