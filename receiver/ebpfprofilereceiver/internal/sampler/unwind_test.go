//go:build linux

package sampler

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/hotpath-dev/hotpath/internal/unwindtable"
)

func TestUnwindTablesAPI(t *testing.T) {
	s := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second, DWARFUnwind: true})
	if _, err := s.LoadUnwindTable(nil); err == nil {
		t.Error("an empty table was accepted")
	}
	rows := []unwindtable.Row{{PC: 0x1000, Kind: unwindtable.RSP, CFAOffset: 8}, {PC: 0x1004, Kind: unwindtable.RSP, CFAOffset: 16}, {PC: 0x1040}}
	tab, err := s.LoadUnwindTable(rows)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Rows != 3 || tab.Bytes < 3*unwindtable.RowBytes || tab.ID == 0 {
		t.Fatalf("loaded table %+v", tab)
	}
	// The kernel holds what was written: the outer map gives the inner
	// map's id.
	var innerID uint32
	if err := s.objs.UnwindTables.Lookup(tab.ID, &innerID); err != nil {
		t.Fatal(err)
	}
	inner, err := ebpf.NewMapFromID(ebpf.MapID(innerID))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	var row cpuProfileUnwindRow
	if err := inner.Lookup(uint32(1), &row); err != nil {
		t.Fatal(err)
	}
	if row.Pc != 0x1004 || row.Kind != unwindtable.RSP || row.CfaOff != 16 || inner.MaxEntries() != 3 {
		t.Fatalf("row 1 in the kernel: %+v (map of %d)", row, inner.MaxEntries())
	}

	m := UnwindMapping{Start: 0x400000, End: 0x401000, Bias: 0x3ff000, Table: tab}
	if err := s.SetProcessUnwind(1234, []UnwindMapping{m}); err != nil {
		t.Fatal(err)
	}
	var got cpuProfileProcUnwind
	if err := s.objs.ProcUnwinds.Lookup(uint32(1234), &got); err != nil {
		t.Fatal(err)
	}
	if got.N != 1 || got.M[0].Start != m.Start || got.M[0].End != m.End || got.M[0].Bias != m.Bias || got.M[0].Table != tab.ID || got.M[0].Rows != 3 {
		t.Fatalf("kernel entry %+v", got.M[0])
	}

	overlap := m
	overlap.Start, overlap.End = 0x400800, 0x402000
	if err := s.SetProcessUnwind(1234, []UnwindMapping{m, overlap}); err == nil || !strings.Contains(err.Error(), "overlapping") {
		t.Errorf("overlapping mappings: %v", err)
	}
	many := make([]UnwindMapping, MaxUnwindMappings+1)
	for i := range many {
		many[i] = UnwindMapping{Start: uint64(i+1) << 20, End: uint64(i+1)<<20 + 4096, Table: tab}
	}
	if err := s.SetProcessUnwind(1234, many); err == nil {
		t.Error("more mappings than the kernel side holds were accepted")
	}
	if err := s.DeleteProcessUnwind(1234); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteProcessUnwind(1234); err != nil {
		t.Errorf("deleting twice: %v", err)
	}
	if err := s.DeleteUnwindTable(tab.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUnwindTable(tab.ID); err != nil {
		t.Errorf("deleting twice: %v", err)
	}

	fp := openSampler(t, Config{FrequencyHz: 19, Interval: time.Second})
	if _, err := fp.LoadUnwindTable(rows); err == nil {
		t.Error("a frame-pointer-only sampler accepted a table")
	}
	if err := fp.SetProcessUnwind(1234, []UnwindMapping{m}); err == nil {
		t.Error("a frame-pointer-only sampler accepted a process")
	}
}

// TestVerifierWork keeps the DWARF unwinder cheap to load: the verifier's
// work (instructions it processed, a count, not a time) decides how long
// the agent takes to start sampling. A binary search indexed by a computed
// value, or a frame index read back from the loop state, made it explore
// every depth and path: 294 k instructions and 0.37 s at load, where the
// frame-pointer program takes 7 k and 0.02 s.
func TestVerifierWork(t *testing.T) {
	spec, err := loadCpuProfile()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dwarf uint32
		max   int
	}{{0, 20_000}, {1, 120_000}} {
		sp := spec.Copy()
		if err := sp.Variables[cpuProfileVarDwarfUnwind].Set(tc.dwarf); err != nil {
			t.Fatal(err)
		}
		if tc.dwarf == 1 {
			// unwinding: auto walks Python frames too.
			if err := enablePythonWalk(sp); err != nil {
				t.Fatal(err)
			}
		}
		for _, n := range []string{cpuProfileMapTracesCtxV1, cpuProfileMapGoTraces} {
			sp.Maps[n].Pinning = ebpf.PinNone
			sp.Maps[n].MaxEntries = 1
		}
		var objs struct {
			CpuSample *ebpf.Program `ebpf:"cpu_sample"`
		}
		if err := sp.LoadAndAssign(&objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{LogLevel: ebpf.LogLevelStats}}); err != nil {
			t.Fatalf("%+v", err)
		}
		log := objs.CpuSample.VerifierLog
		objs.CpuSample.Close()
		m := regexp.MustCompile(`processed (\d+) insns`).FindStringSubmatch(log)
		if m == nil {
			t.Fatalf("no instruction count in the verifier log:\n%s", log)
		}
		n, _ := strconv.Atoi(m[1])
		t.Logf("dwarf_unwind=%d: verifier processed %d instructions", tc.dwarf, n)
		if n > tc.max {
			t.Errorf("dwarf_unwind=%d: the verifier processed %d instructions (budget %d): load time grows with it", tc.dwarf, n, tc.max)
		}
	}
}
