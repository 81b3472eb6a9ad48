package duckdballoc

import (
	"database/sql"
	"os"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/internal/cpulist"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// DuckDB allocates through jemalloc with the settings the package set
// before the program started: DuckDB's own (an arena per CPU, pages given
// back within a second) are what a build without them runs with.
func TestDuckDBRunsWithTheseSettings(t *testing.T) {
	if c := os.Getenv("DUCKDB_JE_MALLOC_CONF"); c != "" {
		t.Fatalf("DUCKDB_JE_MALLOC_CONF=%q replaces the package's settings: unset it to run this test", c)
	}
	if n := queryInt(t, "SELECT count(*) FROM range(100000)"); n != 100000 {
		t.Fatalf("count = %d, want 100000", n)
	}
	s, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	if s.DirtyDecay != DirtyDecay || s.MuzzyDecay != 0 {
		t.Errorf("freed pages kept %v, then %v as reclaimable; want %v, then 0", s.DirtyDecay, s.MuzzyDecay, DirtyDecay)
	}
	online, err := cpulist.Online() // as sysconf(_SC_NPROCESSORS_ONLN) counts them
	if err != nil {
		t.Fatal(err)
	}
	cpus := len(online)
	want := uint(1)
	if cpus > 4 {
		want = uint((cpus + 3) / 4)
	}
	if s.Arenas != want {
		t.Errorf("%d arenas on %d online CPUs, want %d (one per four CPUs)", s.Arenas, cpus, want)
	}
}

// TestAdviseHugePages: after AdviseHugePages, DuckDB's allocator maps what
// a large query needs through the package's hook, the kernel marks those
// regions eligible for huge pages (unless transparent huge pages are
// "never" on this machine), and the query's answer is right.
func TestAdviseHugePages(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Fatalf("transparent huge pages: %v", err)
	}
	eligibleBefore := thpEligibleBytes(t)
	if err := AdviseHugePages(); err != nil {
		t.Fatal(err)
	}
	if err := AdviseHugePages(); err != nil {
		t.Fatalf("second call: %v", err)
	}
	// A hash table of 3 M distinct keys: tens of megabytes, mapped afresh.
	if n := queryInt(t, "SELECT count(DISTINCT i * 7) FROM range(3000000) t(i)"); n != 3000000 {
		t.Fatalf("count = %d, want 3000000", n)
	}
	if AdvisedBytes() < 2<<20 {
		t.Fatalf("%d bytes mapped with the huge-page advice, want at least one huge page's", AdvisedBytes())
	}
	if strings.Contains(string(thp), "[never]") {
		t.Logf("transparent huge pages are off here (%s): the advice is mapped but not honoured", strings.TrimSpace(string(thp)))
		return
	}
	if after := thpEligibleBytes(t); after < eligibleBefore+2<<20 {
		t.Fatalf("memory eligible for huge pages went from %d to %d bytes (%d advised): the kernel did not take the advice", eligibleBefore, after, AdvisedBytes())
	}
}

// queryInt runs stmt, which answers one integer, on a new in-memory DuckDB.
func queryInt(t *testing.T, stmt string) int64 {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(stmt).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// thpEligibleBytes sums the mappings of this process that the kernel may
// back with huge pages (/proc/self/smaps THPeligible).
func thpEligibleBytes(t *testing.T) uint64 {
	t.Helper()
	vmas, err := procmaps.ReadSmaps("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, v := range vmas {
		if v.THPEligible {
			total += v.Size
		}
	}
	return total
}
