//go:build linux

package tracectx

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// The string-table scan that spares FindMarkers from decoding every symbol
// finds a marker name wherever chunks split it, and nothing in a binary
// without markers.
func TestMentionsMarkersAcrossChunks(t *testing.T) {
	marked := buildC(t, cProgram)
	plain := buildC(t, "int main(void) { return 0; }\n")
	defer func(n int) { scanChunk = n }(scanChunk)
	for _, chunk := range []int{1, 7, 19, 64, 4096, 256 << 10} {
		scanChunk = chunk
		for bin, want := range map[string]bool{marked: true, plain: false} {
			f, err := elf.Open(bin)
			if err != nil {
				t.Fatal(err)
			}
			got, err := mentionsMarkers(bin, f)
			f.Close()
			if err != nil || got != want {
				t.Errorf("chunk %d, %s: mentionsMarkers = %v, %v; want %v", chunk, filepath.Base(bin), got, err, want)
			}
		}
	}
	if ms, err := FindMarkers(marked); err != nil || len(ms) != 1 {
		t.Errorf("FindMarkers after the scan: %+v, %v", ms, err)
	}
}

// Scans one after another share their read buffer: on a node where builds
// run all the time, a buffer per scanned binary was a quarter of the agent's
// allocation.
func TestMentionsMarkersReusesItsBuffer(t *testing.T) {
	plain := buildC(t, "int main(void) { return 0; }\n")
	f, err := elf.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const scans = 80
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range scans {
		if found, err := mentionsMarkers(plain, f); err != nil || found {
			t.Fatalf("mentionsMarkers(plain) = %v, %v", found, err)
		}
	}
	runtime.ReadMemStats(&after)
	// A collection in between may drop the pooled buffer, and under the
	// race detector the pool drops a quarter of what is put back; a buffer
	// per scan would be twice the limit.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(scans*scanChunk/2); got > limit {
		t.Errorf("%d scans allocated %d bytes, more than %d: the %d-byte read buffer is not reused", scans, got, limit, scanChunk)
	}
}

func TestFindMarkersPlainBinary(t *testing.T) {
	bin := buildC(t, "int main(void) { return 0; }\n")
	ms, err := FindMarkers(bin)
	if err != nil || len(ms) != 0 {
		t.Errorf("FindMarkers(plain) = %+v, %v; want none", ms, err)
	}
	if _, err := FindMarkers("/proc/self/status"); err == nil {
		t.Error("FindMarkers on a non-ELF file: no error")
	}
}

func buildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	sdkDir, err := filepath.Abs("../../../../sdk/c")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append([]string{"-O2", "-I", sdkDir, "-o", bin, filepath.Join(dir, "main.c")}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}

// cProgram sets the trace context from argv[1] (a traceparent) when told to
// on stdin, then clears it when told again.
const cProgram = `
#include <stdio.h>
#include "hotpath_tracectx.h"

int main(int argc, char **argv) {
	struct hotpath_trace_ctx c;
	char line[16];
	if (argc < 2 || hotpath_tracectx_parse_traceparent(&c, argv[1]) != 0)
		return 2;
	setvbuf(stdout, 0, _IONBF, 0);
	puts("ready");
	if (!fgets(line, sizeof line, stdin)) return 3;
	hotpath_tracectx_set(&c);
	puts("set");
	if (!fgets(line, sizeof line, stdin)) return 3;
	hotpath_tracectx_clear();
	puts("cleared");
	if (!fgets(line, sizeof line, stdin)) return 3;
	return 0;
}
`
