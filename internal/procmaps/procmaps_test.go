package procmaps

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParseExecutableKeepsExecutableMappingsSortedWithDeletedMarked(t *testing.T) {
	raw := []byte(`7f0000100000-7f0000200000 r-xp 00028000 103:02 98765                      /usr/lib/libc.so.6 (deleted)
55d0a0000000-55d0a0001000 r--p 00000000 fd:01 1234                       /usr/bin/my prog
55d0a0001000-55d0a0005000 r-xp 00001000 fd:01 1234                       /usr/bin/my prog
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
`)
	ms, err := ParseExecutable(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x55d0a0001000, Limit: 0x55d0a0005000, Offset: 0x1000, Path: "/usr/bin/my prog", Dev: 0xfd01, Inode: 1234},
		{Start: 0x7f0000000000, Limit: 0x7f0000001000},
		{Start: 0x7f0000100000, Limit: 0x7f0000200000, Offset: 0x28000, Path: "/usr/lib/libc.so.6", Dev: 0x10302, Inode: 98765, Deleted: true},
	}
	if len(ms) != len(want) {
		t.Fatalf("got %d mappings, want %d: %+v", len(ms), len(want), ms)
	}
	for i := range want {
		if ms[i] != want[i] {
			t.Errorf("mapping %d = %+v, want %+v", i, ms[i], want[i])
		}
	}
	for _, bad := range []string{"zzzz-1 r-xp 0 fd:01 1 /x\n", "1-2 r-xp 0\n", "1-2 r-xp 0 fd 1 /x\n"} {
		if _, err := ParseExecutable([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestTrimDeleted(t *testing.T) {
	for in, want := range map[string]struct {
		path    string
		deleted bool
	}{
		"/usr/bin/app (deleted)": {"/usr/bin/app", true},
		"/usr/bin/app":           {"/usr/bin/app", false},
		"/opt/(deleted) dir/app": {"/opt/(deleted) dir/app", false},
	} {
		if p, d := TrimDeleted(in); p != want.path || d != want.deleted {
			t.Errorf("TrimDeleted(%q) = %q, %v; want %q, %v", in, p, d, want.path, want.deleted)
		}
	}
}

func TestReadSmaps(t *testing.T) {
	got, err := ReadSmaps("testdata/smaps")
	if err != nil {
		t.Fatal(err)
	}
	want := []SmapsEntry{
		{Mapping: Mapping{Start: 0x55729fb07000, Limit: 0x55729fb0b000, Path: "/usr/bin/my prog", Dev: 0xfe00, Inode: 247530}, Perms: "r--p",
			Size: 16 << 10, Rss: 16 << 10, VmFlags: []string{"rd", "mr", "mw", "me"}},
		{Mapping: Mapping{Start: 0x7f0000000000, Limit: 0x7f0004000000}, Perms: "rw-p",
			Size: 64 << 20, Rss: 20 << 20, Anonymous: 20 << 20, AnonHugePages: 18 << 20, THPEligible: true, VmFlags: []string{"rd", "wr", "mr", "mw", "me", "ac", "hg"}},
		{Mapping: Mapping{Start: 0x7f0010000000, Limit: 0x7f0010001000, Offset: 0x28000, Path: "/usr/lib/libc.so.6", Dev: 0x10302, Inode: 98765, Deleted: true}, Perms: "r-xp",
			Size: 4 << 10, Rss: 4 << 10, Anonymous: 4 << 10, VmFlags: []string{"rd", "ex", "mr", "mw", "me"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got\n%+v\nwant\n%+v", got, want)
	}

	// This process's own: its executable is mapped, and every field parses.
	self, err := ReadSmaps("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var exeRss uint64
	for _, e := range self {
		if e.Path == exe {
			exeRss += e.Rss
		}
	}
	if exeRss == 0 {
		t.Errorf("no resident mapping of %s in /proc/self/smaps", exe)
	}

	// A maps file gives the same mappings, without their counts.
	maps, err := ReadSmaps("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	exeMappings := func(entries []SmapsEntry) (out []SmapsEntry) {
		for _, e := range entries {
			if e.Path == exe {
				out = append(out, SmapsEntry{Mapping: e.Mapping, Perms: e.Perms})
			}
		}
		return out
	}
	if got, want := exeMappings(maps), exeMappings(self); len(got) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("the executable's mappings from /proc/self/maps:\n%+v\nfrom /proc/self/smaps:\n%+v", got, want)
	}
	for _, e := range maps {
		if e.Size != 0 || e.Rss != 0 || e.Anonymous != 0 || e.VmFlags != nil {
			t.Errorf("%#x-%#x from /proc/self/maps has counts: %+v", e.Start, e.Limit, e)
		}
	}

	dir := t.TempDir()
	for name, bad := range map[string]string{
		"field first": "Rss: 4 kB\n",
		"bad size":    "1000-2000 r--p 0 fd:01 1 /x\nRss: four kB\n",
		"bad range":   "zzzz-1 r--p 0 fd:01 1 /x\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
		if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSmaps(path); err == nil || !strings.Contains(err.Error(), "line 1") && !strings.Contains(err.Error(), "line 2") {
			t.Errorf("%s: %v, want an error naming the line", name, err)
		}
	}
	if _, err := ReadSmaps(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing file: no error")
	}
}

// The lines skipped on their permissions and the lines parsed are those of
// a listing split into fields line by line: this process's maps, and lines
// with a tab or runs of spaces between the fields.
func TestParseExecutableSkipsByPermissions(t *testing.T) {
	raw, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	raw = append(raw, "1000-2000\tr-xp 0 fd:01 7 /tabbed\n3000-4000  r--p 0 fd:01 8 /spaced\n5000-6000   --xp 0 fd:01 9 /xonly\n"...)
	got, err := ParseExecutable(raw)
	if err != nil {
		t.Fatal(err)
	}
	var want, starts []string
	for _, line := range strings.Split(string(raw), "\n") {
		if f := strings.Fields(line); len(f) >= 5 && f[1][2] == 'x' {
			start, _, _ := strings.Cut(f[0], "-")
			want = append(want, strings.TrimLeft(start, "0"))
		}
	}
	for _, m := range got {
		starts = append(starts, fmt.Sprintf("%x", m.Start))
	}
	slices.Sort(starts)
	slices.Sort(want)
	if !slices.Equal(starts, want) || !slices.Contains(starts, "1000") || !slices.Contains(starts, "5000") || slices.Contains(starts, "3000") {
		t.Errorf("executable mappings start at %q, want %q", starts, want)
	}
}

// go test -bench . ./internal/procmaps: a python3-sized listing (150 lines,
// a fifth executable).
func BenchmarkParseExecutable(b *testing.B) {
	var sb strings.Builder
	for i := range 150 {
		perms := "r--p"
		if i%5 == 0 {
			perms = "r-xp"
		}
		fmt.Fprintf(&sb, "%x-%x %s %08x fd:01 %d                       /usr/lib/x86_64-linux-gnu/lib%d.so.1\n", 0x7f0000000000+i*0x1000, 0x7f0000001000+i*0x1000, perms, i*0x1000, 1000+i, i)
	}
	raw := []byte(sb.String())
	for b.Loop() {
		if _, err := ParseExecutable(raw); err != nil {
			b.Fatal(err)
		}
	}
}
