package duckdbprofileexporter

import (
	"testing"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/internal/writer"
)

// TestWorthCompacting: the hint needs both 64 MiB of free blocks and a
// quarter of the file; a small file mostly free, or a large one little
// free, is not worth the collector's stop.
func TestWorthCompacting(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		file, free int64
		want       bool
	}{
		{file: 256 * mib, free: 64 * mib, want: true},  // a quarter, 64 MiB
		{file: 256 * mib, free: 63 * mib, want: false}, // under 64 MiB
		{file: 257 * mib, free: 64 * mib, want: false}, // under a quarter
		{file: 825 * mib, free: 350 * mib, want: true}, // the bench's 30-day file
		{file: 80 * mib, free: 70 * mib, want: true},
		{file: 40 * mib, free: 30 * mib, want: false}, // small
		{file: 0, free: 0, want: false},
	} {
		if got := worthCompacting(writer.Space{FileBytes: c.file, FreeBytes: c.free}); got != c.want {
			t.Errorf("file %d MiB, free %d MiB: worth compacting %v, want %v", c.file/mib, c.free/mib, got, c.want)
		}
	}
}
