package duckdballoc

import (
	"database/sql"
	"os"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/hotpath-dev/hotpath/internal/cpulist"
)

// DuckDB allocates through jemalloc with the settings the package set
// before the program started: DuckDB's own (an arena per CPU, pages given
// back within a second) are what a build without them runs with.
func TestDuckDBRunsWithTheseSettings(t *testing.T) {
	if c := os.Getenv("DUCKDB_JE_MALLOC_CONF"); c != "" {
		t.Fatalf("DUCKDB_JE_MALLOC_CONF=%q replaces the package's settings: unset it to run this test", c)
	}
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM range(100000) GROUP BY ALL").Scan(&n); err != nil {
		t.Fatal(err)
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
