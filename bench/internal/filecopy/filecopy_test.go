package filecopy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	content := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // more than one read's buffer
	if err := os.WriteFile(src, content, 0o600); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	if err := Copy(src, dst, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("copy has %d bytes, differing from the source's %d", len(got), len(content))
	}
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o100 == 0 {
		t.Errorf("copy's mode %v: not executable, asked for 0755", st.Mode())
	}

	// An existing longer file is truncated to the copy.
	if err := os.WriteFile(dst, append(content, "tail"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, dst, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, content) {
		t.Errorf("copy over a longer file has %d bytes, want %d", len(got), len(content))
	}

	if err := Copy(filepath.Join(dir, "missing"), dst, 0o600); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("copying a missing file: %v, want an error naming it", err)
	}
}
