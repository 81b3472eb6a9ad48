package buildid

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Test binaries are built with the real toolchains and checked against what
// the standard tools (readelf, go tool buildid, sha256sum) say.

func compileC(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	src := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, name)
	args := append([]string{"-O1", "-o", out, src}, flags...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %v: %v\n%s", args, err, b)
	}
	return out
}

var readelfBuildID = regexp.MustCompile(`Build ID: ([0-9a-f]+)`)

func readelfGNU(t *testing.T, path string) string {
	t.Helper()
	b, err := exec.Command("readelf", "-n", path).CombinedOutput()
	if err != nil {
		t.Fatalf("readelf -n %s: %v\n%s", path, err, b)
	}
	m := readelfBuildID.FindSubmatch(b)
	if m == nil {
		return ""
	}
	return string(m[1])
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestGNUBuildID(t *testing.T) {
	dir := t.TempDir()
	for _, style := range []string{"sha1", "md5", "uuid"} {
		bin := compileC(t, dir, "gnu-"+style, "-Wl,--build-id="+style)
		want := readelfGNU(t, bin)
		if want == "" {
			t.Fatalf("readelf found no build ID in %s", bin)
		}
		info, err := Read(bin)
		if err != nil {
			t.Fatal(err)
		}
		if info.GNU != want || info.Canonical() != want || !info.IsELF {
			t.Errorf("%s: got %+v, want GNU %s", style, info, want)
		}
		if info.SHA256 != "" {
			t.Errorf("%s: hashed a binary that has a build ID note", style)
		}
	}
}

func TestNoNoteFallsBackToSHA256(t *testing.T) {
	bin := compileC(t, t.TempDir(), "plain", "-Wl,--build-id=none")
	info, err := Read(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256File(t, bin)
	if info.GNU != "" || info.Go != "" || info.SHA256 != want {
		t.Fatalf("got %+v, want only SHA256 %s", info, want)
	}
	if info.Canonical() != "sha256:"+want {
		t.Errorf("canonical %q", info.Canonical())
	}
}

func TestDebugInfo(t *testing.T) {
	dir := t.TempDir()
	withDWARF := compileC(t, dir, "debug", "-g")
	stripped := compileC(t, dir, "stripped", "-s")
	linked := compileC(t, dir, "linked", "-g")
	if b, err := exec.Command("objcopy", "--only-keep-debug", linked, linked+".debug").CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	if b, err := exec.Command("strip", "--strip-debug", linked).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	if b, err := exec.Command("objcopy", "--add-gnu-debuglink="+linked+".debug", linked).CombinedOutput(); err != nil {
		t.Fatalf("objcopy: %v\n%s", err, b)
	}
	for path, want := range map[string]bool{withDWARF: true, stripped: false, linked: true} {
		info, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if info.HasDebugInfo != want {
			t.Errorf("%s: HasDebugInfo = %v, want %v", filepath.Base(path), info.HasDebugInfo, want)
		}
	}
}

func TestStrippedSectionHeadersStillHaveNotes(t *testing.T) {
	dir := t.TempDir()
	bin := compileC(t, dir, "nosections", "-Wl,--build-id=sha1")
	want := readelfGNU(t, bin)
	if want == "" {
		t.Fatalf("readelf found no build ID in %s", bin)
	}
	if b, err := exec.Command("llvm-objcopy", "--strip-sections", bin).CombinedOutput(); err != nil {
		t.Fatalf("llvm-objcopy: %v\n%s", err, b)
	}
	info, err := Read(bin)
	if err != nil {
		t.Fatal(err)
	}
	if info.GNU != want {
		t.Errorf("GNU from PT_NOTE = %q, want %q", info.GNU, want)
	}
}

func TestGoBuildID(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := exec.Command("go", "tool", "buildid", exe).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool buildid: %v\n%s", err, b)
	}
	want := strings.TrimSpace(string(b))
	info, err := Read(exe)
	if err != nil {
		t.Fatal(err)
	}
	if info.Go != want {
		t.Errorf("Go build ID %q, want %q", info.Go, want)
	}
	if info.GNU == "" && info.Canonical() != want {
		t.Errorf("canonical %q, want the Go build ID", info.Canonical())
	}
}

func TestNonELFIsHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.IsELF || info.SHA256 != sha256File(t, path) {
		t.Errorf("got %+v", info)
	}
}

func TestParseNotesToleratesDamage(t *testing.T) {
	var info Info
	// namesz claims more bytes than there are.
	parseNotes([]byte{200, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0}, binaryLE, &info)
	parseNotes([]byte{1, 2, 3}, binaryLE, &info)
	parseNotes([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0}, binaryLE, &info)
	if info != (Info{}) {
		t.Errorf("damaged notes produced %+v", info)
	}
	// A well-formed GNU note after parsing succeeds.
	parseNotes([]byte{4, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 'G', 'N', 'U', 0, 0xab, 0xcd, 0, 0}, binaryLE, &info)
	if info.GNU != "abcd" {
		t.Errorf("GNU = %q, want abcd", info.GNU)
	}
}

func TestFromAttributesCanonical(t *testing.T) {
	for _, tc := range []struct {
		attrs map[string]string
		want  string
	}{
		{map[string]string{"process.executable.build_id.gnu": "27be6e4f", "process.executable.build_id.htlhash": "429ed717"}, "27be6e4f"},
		{map[string]string{"process.executable.build_id.go": "a/b/c/d", "process.executable.build_id.htlhash": "429ed717"}, "a/b/c/d"},
		{map[string]string{"hotpath.build_id.sha256": "ff00"}, "sha256:ff00"},
		{map[string]string{"process.executable.build_id.htlhash": "429ed717"}, "htlhash:429ed717"},
		{map[string]string{"hotpath.build_id": "ignored: derived, not read"}, ""},
	} {
		info := FromAttributes(func(k string) (string, bool) { v, ok := tc.attrs[k]; return v, ok })
		if got := info.Canonical(); got != tc.want {
			t.Errorf("FromAttributes(%v).Canonical() = %q, want %q", tc.attrs, got, tc.want)
		}
		// What Attributes writes, FromAttributes reads back.
		back := map[string]string{}
		for _, kv := range info.Attributes() {
			back[kv[0]] = kv[1]
		}
		if again := FromAttributes(func(k string) (string, bool) { v, ok := back[k]; return v, ok }); again != info {
			t.Errorf("round trip of %v: %+v, want %+v", tc.attrs, again, info)
		}
	}
}

// FileKey names a file's build and size: a copy has its original's key, the
// stripped file of the same build another (its symbols differ), a file
// without a build note or not ELF none.
func TestFileKey(t *testing.T) {
	dir := t.TempDir()
	bin := compileC(t, dir, "gnu")
	key := func(path string) string {
		t.Helper()
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return FileKey(f)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("gnu:%s:%d", readelfGNU(t, bin), fi.Size())
	if got := key(bin); got != want {
		t.Fatalf("FileKey = %q, want %q", got, want)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	cp, stripped, text := filepath.Join(dir, "copy"), filepath.Join(dir, "stripped"), filepath.Join(dir, "text")
	for _, f := range []string{cp, stripped} {
		if err := os.WriteFile(f, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := exec.Command("strip", "-s", stripped).CombinedOutput(); err != nil {
		t.Fatalf("strip: %v\n%s", err, b)
	}
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := key(cp); got != want {
		t.Errorf("copy: %q, want the original's %q", got, want)
	}
	if got := key(stripped); got == want || !strings.HasPrefix(got, "gnu:"+readelfGNU(t, bin)+":") {
		t.Errorf("stripped: %q; want the same build ID with its own size (original %q)", got, want)
	}
	for _, f := range []string{compileC(t, dir, "plain", "-Wl,--build-id=none"), text} {
		if got := key(f); got != "" {
			t.Errorf("%s: %q, want none", filepath.Base(f), got)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := Read(exe)
	if err != nil {
		t.Fatal(err)
	}
	if got := key(exe); info.GNU == "" && !strings.HasPrefix(got, "go:"+info.Go+":") {
		t.Errorf("this Go test binary: %q, want its Go build ID %q", got, info.Go)
	}
}
