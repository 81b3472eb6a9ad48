// Package filecopy copies a file for the bench: a DuckDB file to query
// apart from the one being written, or a collector binary for a second
// process to run from.
package filecopy

import (
	"fmt"
	"io"
	"os"
)

// Copy writes a copy of src to dst, created with perm (before the umask) or
// truncated if it exists.
func Copy(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("copy to %s: %w", dst, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}
