package procmaps

import "testing"

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
