package procstat

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	line := []byte("4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 8 0 123 0 0\n")
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * time.Second; got != want { // (250+150) ticks at 100 Hz
		t.Fatalf("cpu = %v, want %v", got, want)
	}
	if _, err := parseStatCPU([]byte("4242 (x) S 1 2")); err == nil {
		t.Fatal("short stat line: want an error")
	}
}

func TestCPUTimeGrowsWithWork(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn until the kernel has accounted at least 3 ticks to us; the loop
	// ends on accounted CPU, not on wall time.
	var after time.Duration
	x := uint64(1)
	for i := 0; after-before < 30*time.Millisecond; i++ {
		for j := 0; j < 1_000_000; j++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		if after, err = CPUTime(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		if i > 100_000 {
			t.Fatalf("cpu time stuck at %v (x=%d)", after, x)
		}
	}
}

func TestParseStatus(t *testing.T) {
	raw := []byte("Name:\tagent\nVmPeak:\t  900000 kB\nVmHWM:\t   30000 kB\nVmRSS:\t   25000 kB\nRssAnon:\t   15000 kB\nRssFile:\t   10000 kB\n")
	m, err := parseStatus(raw)
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS != 25000*1024 || m.Peak != 30000*1024 || m.Anon != 15000*1024 || m.File != 10000*1024 {
		t.Fatalf("got %+v", m)
	}
	if _, err := parseStatus([]byte("Name:\tkthread\n")); err == nil {
		t.Fatal("status without VmRSS: want an error")
	}
	mine, err := ReadMemory(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if mine.RSS == 0 || mine.Peak < mine.RSS {
		t.Fatalf("own memory implausible: %+v", mine)
	}
}

func TestParseMapFdinfo(t *testing.T) {
	m := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nmap_type:\t1\nkey_size:\t4\nvalue_size:\t8\nmax_entries:\t10000\nmap_flags:\t0x0\nmap_extra:\t0x0\nmemlock:\t82048\nmap_id:\t77\nfrozen:\t0\n")
	id, memlock, ok := parseMapFdinfo(m)
	if !ok || id != 77 || memlock != 82048 {
		t.Fatalf("map fdinfo: id=%d memlock=%d ok=%v", id, memlock, ok)
	}
	prog := []byte("pos:\t0\nflags:\t02000002\nprog_type:\t7\nprog_jited:\t1\nmemlock:\t4096\nprog_id:\t12\n")
	if _, _, ok := parseMapFdinfo(prog); ok {
		t.Fatal("a program's fdinfo was taken for a map")
	}
	if _, err := ReadBPFMaps(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}

func TestParseProgFdinfo(t *testing.T) {
	prog := []byte("pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nprog_type:\t7\nprog_jited:\t1\nprog_tag:\t0a1b2c3d4e5f6071\nmemlock:\t8192\nprog_id:\t812\nrun_time_ns:\t123456789\nrun_cnt:\t4321\nrecursion_misses:\t0\nverified_insns:\t2048\n")
	p, ok := parseProgFdinfo(prog)
	if !ok || p != (BPFProgram{ID: 812, Type: 7, RunTimeNs: 123456789, RunCount: 4321}) {
		t.Fatalf("prog fdinfo: %+v ok=%v", p, ok)
	}
	m := []byte("pos:\t0\nmap_type:\t1\nmemlock:\t82048\nmap_id:\t77\n")
	if _, ok := parseProgFdinfo(m); ok {
		t.Fatal("a map's fdinfo was taken for a program")
	}
	if _, err := ReadBPFPrograms(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
