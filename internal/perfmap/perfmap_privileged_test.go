//go:build privileged

package perfmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMapRefusesAnotherUsersFile: a perf map owned by neither the process's
// user nor root is never read; once the process's own user owns it, it is.
// Needs root: the file is handed to other users with chown.
func TestMapRefusesAnotherUsersFile(t *testing.T) {
	procRoot, tmp := fakeProc(t, 23, 23, 1000)
	path := filepath.Join(tmp, "perf-23.map")
	appendFile(t, path, "100 10 planted\n")
	if err := os.Chown(path, 2000, 2000); err != nil {
		t.Fatal(err)
	}
	m := New(procRoot, 23, DefaultLimits)
	if name := lookupName(m, 0x105); name != "" {
		t.Fatalf("read another user's file: %q", name)
	}
	if _, err := m.Stats(); err == nil || !strings.Contains(err.Error(), "owned by uid 2000") {
		t.Errorf("error %v", err)
	}
	// The process's own user may write it.
	if err := os.Chown(path, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if name := lookupName(m, 0x105); name != "planted" {
		t.Errorf("own file: %q", name)
	}
}
