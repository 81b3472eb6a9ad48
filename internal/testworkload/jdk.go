package testworkload

import (
	"os"
	"path/filepath"
	"testing"
)

// JDKs are the java binaries of the JDKs under /usr/lib/jvm, one per JDK
// (Debian's alternatives link one JDK under several names), each with its
// javac beside it. make deps installs openjdk-17-jdk-headless; a machine
// may have more, and the tests that take them run on each.
func JDKs(t testing.TB) []string {
	t.Helper()
	found, _ := filepath.Glob("/usr/lib/jvm/*/bin/java")
	seen := map[string]bool{}
	var out []string
	for _, java := range found {
		real, err := filepath.EvalSymlinks(java)
		if err != nil || seen[real] {
			continue
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(real), "javac")); err != nil {
			continue // a runtime without a compiler: no test program can be built with it
		}
		seen[real] = true
		out = append(out, real)
	}
	if len(out) == 0 {
		t.Fatal("no JDK under /usr/lib/jvm (make deps installs openjdk-17-jdk-headless)")
	}
	return out
}
