package writer

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/schema"
)

const childEnv = "HOTPATH_WRITER_CHILD"

// TestChildProcess is the body of the child processes the fault tests start
// (it does nothing in a normal run).
func TestChildProcess(t *testing.T) {
	mode, path, ok := strings.Cut(os.Getenv(childEnv), ":")
	if !ok {
		return
	}
	ctx := context.Background()
	w, err := Open(ctx, path, schema.Local)
	if err != nil {
		fmt.Println("open error:", err)
		os.Exit(3)
	}
	switch mode {
	case "write-loop":
		// Writes 100-row batches forever, reporting each commit.
		batch := benchBatch(100, time.Unix(1_700_000_000, 0))
		for i := range batch.Rows {
			batch.Rows[i].Count = 1
		}
		for n := 1; ; n++ {
			if err := w.Write(ctx, batch); err != nil {
				fmt.Println("write error:", err)
				os.Exit(4)
			}
			fmt.Println("committed", n)
		}
	case "hold":
		fmt.Println("holding")
		time.Sleep(time.Minute)
	}
	os.Exit(0)
}

func startChild(t *testing.T, mode, path string) (*exec.Cmd, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), childEnv+"="+mode+":"+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewScanner(out)
}

// TestKillMidBatchLosesAtMostThatBatch SIGKILLs a process writing in a loop
// and checks the file reopens with whole batches only and a consistent frame
// dictionary.
func TestKillMidBatchLosesAtMostThatBatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "crash.duckdb")
	ctx := context.Background()
	before := 0 // rows in the file before this round's child started
	// Three rounds on the same file: each child is killed at a different
	// point of its batch cycle, and each reopen must see whole batches.
	for round := 1; round <= 3; round++ {
		cmd, lines := startChild(t, "write-loop", path)
		committed := 0
		for committed < 10*round && lines.Scan() {
			if n, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
				committed, _ = strconv.Atoi(n)
			} else {
				t.Fatalf("round %d child: %s", round, lines.Text())
			}
		}
		if committed < 10*round {
			t.Fatalf("round %d: child stopped after %d batches", round, committed)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		// The child went on committing until the signal landed: its last
		// report, still in the pipe, is the count to check (on a loaded
		// machine it is several batches past the one read above).
		for lines.Scan() {
			if n, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
				committed, _ = strconv.Atoi(n)
			}
		}
		_ = cmd.Wait()

		w, err := Open(ctx, path, schema.Local)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		var rows int
		if err := w.DB().QueryRow("SELECT count(*) FROM " + schema.TablesFor(schema.Local).Samples).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		// Every batch has 100 rows; the one in flight is all or nothing.
		added := rows - before
		if added%100 != 0 || added < committed*100 || added > (committed+1)*100 {
			t.Fatalf("round %d: %d new rows after %d reported commits: a partial batch or a lost commit", round, added, committed)
		}
		if err := schema.CheckIntegrity(ctx, w.DB(), schema.Local); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		before = rows
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSecondProcessGetsClearError: DuckDB's lock stops a second collector;
// the error must say so.
func TestSecondProcessGetsClearError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "held.duckdb")
	w := open(t, path, schema.Local)
	defer w.Close()
	cmd, lines := startChild(t, "hold", path)
	if !lines.Scan() {
		t.Fatal("child said nothing")
	}
	msg := lines.Text()
	_ = cmd.Wait()
	if !strings.Contains(msg, "another process holds the file") || !strings.Contains(msg, "second collector") {
		t.Fatalf("child's open error: %q", msg)
	}
}

func setImmutable(path string, on bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags)
}

// fsImmutableFL is FS_IMMUTABLE_FL from linux/fs.h (x/sys/unix does not name it).
const fsImmutableFL = 0x00000010
