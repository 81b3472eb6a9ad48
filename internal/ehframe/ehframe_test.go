package ehframe

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// program has functions whose CFA rules differ: a frameless leaf (rsp+8
// throughout), pushes and pops with early returns (remember/restore_state),
// an alloca (rbp-based CFA) and main.
const program = `
#include <stdio.h>
#include <alloca.h>
__attribute__((noinline)) long leaf(long x) { long s = 0; for (long i = 0; i < x; i++) s += i * i ^ x; return s; }
__attribute__((noinline)) long withpush(long a, long b, long c) {
	long r = leaf(a) + leaf(b);
	if (r & 1) return r + leaf(c);
	return r * 3 + c;
}
__attribute__((noinline)) long withalloca(long n) {
	char *p = alloca(n);
	for (long i = 0; i < n; i++) p[i] = i;
	return p[n / 2] + leaf(n);
}
int main(int argc, char **argv) { printf("%ld\n", withpush(argc, 2, 3) + withalloca(argc * 100)); return 0; }
`

// TestCFAMatchesReadelf compares the CFA rule at every row boundary (first
// and last byte of each row) with what binutils computes, for binaries the
// test builds at several optimization levels and for the system's libc.
func TestCFAMatchesReadelf(t *testing.T) {
	for _, flags := range [][]string{
		{"-O0"},
		{"-O2"},
		{"-O2", "-fno-omit-frame-pointer"},
		{"-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer"},
		{"-Os", "-fasynchronous-unwind-tables"},
	} {
		t.Run(strings.Join(flags, ""), func(t *testing.T) {
			bin := buildC(t, program, flags...)
			checkAgainstReadelf(t, bin)
		})
	}
	t.Run("libc", func(t *testing.T) {
		out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
		if err != nil {
			t.Fatalf("locate libc: %v", err)
		}
		libc, err := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("locate libc: %v", err)
		}
		checkAgainstReadelf(t, libc)
	})
}

func buildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append(append([]string{}, flags...), "-o", bin, c)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// Open reads .eh_frame of the ELF file at path.
func open(t testing.TB, path string) *Table {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	sec := ef.Section(".eh_frame")
	if sec == nil {
		t.Fatalf("%s has no .eh_frame", path)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	tab, err := New(data, sec.Addr)
	if err != nil {
		t.Fatalf("index .eh_frame of %s: %v", path, err)
	}
	return tab
}

type row struct {
	lo, hi uint64
	cfa    string
}

var (
	cieLine = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE `)
	fdeLine = regexp.MustCompile(`^[0-9a-f]+ [0-9a-f]+ [0-9a-f]+ FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	rowLine = regexp.MustCompile(`^([0-9a-f]{16}) (\S+)`)
)

// readelfRows parses readelf --debug-dump=frames-interp: per FDE, rows of
// (location, CFA); an FDE without rows keeps its CIE's initial rule.
func readelfRows(t *testing.T, path string) []row {
	t.Helper()
	out, err := exec.Command("readelf", "--debug-dump=no-follow-links", "--debug-dump=frames-interp", path).Output()
	if err != nil {
		t.Fatalf("readelf: %v", err)
	}
	cieCFA := map[string]string{}
	var rows []row
	var cur []row // rows of the entry being read
	var curCIE string
	var inFDE bool
	var fdeLo, fdeHi uint64
	var fdeCIE string
	flush := func() {
		switch {
		case inFDE && len(cur) == 0:
			cfa, ok := cieCFA[fdeCIE]
			if !ok {
				t.Fatalf("FDE refers to unknown CIE %s", fdeCIE)
			}
			rows = append(rows, row{fdeLo, fdeHi, cfa})
		case inFDE:
			for i := range cur {
				cur[i].hi = fdeHi
				if i+1 < len(cur) {
					cur[i].hi = cur[i+1].lo
				}
			}
			rows = append(rows, cur...)
		case curCIE != "" && len(cur) > 0:
			cieCFA[curCIE] = cur[0].cfa
		}
		cur, inFDE, curCIE = nil, false, ""
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := cieLine.FindStringSubmatch(line); m != nil {
			flush()
			curCIE = m[1]
			continue
		}
		if m := fdeLine.FindStringSubmatch(line); m != nil {
			flush()
			inFDE, fdeCIE = true, m[1]
			fdeLo, _ = strconv.ParseUint(m[2], 16, 64)
			fdeHi, _ = strconv.ParseUint(m[3], 16, 64)
			continue
		}
		if m := rowLine.FindStringSubmatch(line); m != nil && (inFDE || curCIE != "") {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			cur = append(cur, row{lo: loc, cfa: m[2]})
		}
	}
	flush()
	return rows
}

func checkAgainstReadelf(t *testing.T, path string) {
	tab := open(t, path)
	rows := readelfRows(t, path)
	if len(rows) < 5 {
		t.Fatalf("readelf gave only %d rows for %s", len(rows), path)
	}
	checked := 0
	for _, r := range rows {
		if r.hi <= r.lo {
			continue // an empty row (advance by 0)
		}
		for _, pc := range []uint64{r.lo, r.lo + (r.hi-r.lo)/2, r.hi - 1} {
			rule, ok, err := tab.CFA(pc)
			if err != nil || !ok {
				t.Fatalf("%s: CFA(%#x) = ok %v, err %v; readelf says %s", path, pc, ok, err, r.cfa)
			}
			if got := rule.String(); got != r.cfa {
				t.Fatalf("%s: CFA(%#x) = %s, readelf says %s", path, pc, got, r.cfa)
			}
			checked++
		}
	}
	t.Logf("%s: %d FDEs, %d rows, %d PCs agree", path, tab.FDEs(), len(rows), checked)
}

func TestCFAOutsideAnyFDE(t *testing.T) {
	tab := open(t, buildC(t, program, "-O2"))
	for _, pc := range []uint64{0, 1, ^uint64(0)} {
		if _, ok, err := tab.CFA(pc); ok || err != nil {
			t.Errorf("CFA(%#x) = ok %v, err %v; want not found", pc, ok, err)
		}
	}
}

// TestMalformed feeds truncated and corrupted sections: errors, never panics.
func TestMalformed(t *testing.T) {
	bin := buildC(t, program, "-O2")
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	sec := ef.Section(".eh_frame")
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(data[:len(data)/2+3], sec.Addr); err == nil {
		t.Error("half a section: no error")
	}
	for i := range data {
		bad := bytes.Clone(data)
		bad[i] ^= 0xa5
		tab, err := New(bad, sec.Addr)
		if err != nil {
			continue
		}
		for _, f := range tab.fdes {
			_, _, _ = tab.CFA(f.lo)
			_, _, _ = tab.CFA(f.hi - 1)
		}
	}
}

func BenchmarkCFA(b *testing.B) {
	out, err := exec.Command("gcc", "-print-file-name=libc.so.6").Output()
	if err != nil {
		b.Fatal(err)
	}
	tab := open(b, strings.TrimSpace(string(out)))
	pcs := make([]uint64, 0, len(tab.fdes))
	for _, f := range tab.fdes {
		pcs = append(pcs, f.lo+(f.hi-f.lo)/2)
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := tab.CFA(pcs[i%len(pcs)]); err != nil {
			b.Fatal(fmt.Errorf("CFA: %w", err))
		}
	}
}

// FuzzTable: any section gives an index or an error, and any lookup a rule
// or an error, never a panic or a hang. Seeded with a real section.
func FuzzTable(f *testing.F) {
	ef, err := elf.Open(buildC(f, program, "-O2"))
	if err == nil {
		if data, err := ef.Section(".eh_frame").Data(); err == nil {
			f.Add(data, uint64(0x1000))
		}
		ef.Close()
	}
	f.Fuzz(func(t *testing.T, data []byte, pc uint64) {
		tab, err := New(data, 0)
		if err != nil {
			return
		}
		_, _, _ = tab.CFA(pc)
		for _, fd := range tab.fdes {
			_, _, _ = tab.CFA(fd.lo)
		}
	})
}
