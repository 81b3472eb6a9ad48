package symbolize

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hotpath-dev/hotpath/internal/buildid"
)

// DebugDir is where separate debug files are looked up by GNU build ID
// (DebugDir/.build-id/ab/cdef….debug), as gdb and debuginfod clients do.
// Distributions install them there (Debian: the *-dbg and *-dbgsym
// packages). A variable for tests.
var DebugDir = "/usr/lib/debug"

// debugFile is a separate debug file mapped read-only.
type debugFile struct {
	path string
	ef   *elf.File
	data []byte
}

func (d *debugFile) close() { _ = syscall.Munmap(d.data) }

// openDebugFile finds and maps the separate debug file of ef, or returns
// nil. The file must carry the same build ID: a stale debug file from
// another build would name the wrong functions.
func openDebugFile(ef *elf.File) *debugFile {
	id := buildid.FromNotes(ef).GNU
	if len(id) < 4 {
		return nil
	}
	path := filepath.Join(DebugDir, ".build-id", id[:2], id[2:]+".debug")
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= 0 || int64(int(fi.Size())) != fi.Size() {
		return nil
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	dbg, err := elf.NewFile(bytes.NewReader(data))
	if err != nil || buildid.FromNotes(dbg).GNU != id || !hasSection(dbg, elf.SHT_SYMTAB) {
		_ = syscall.Munmap(data)
		return nil
	}
	return &debugFile{path: path, ef: dbg, data: data}
}

func hasSection(ef *elf.File, typ elf.SectionType) bool {
	for _, s := range ef.Sections {
		if s.Type == typ {
			return true
		}
	}
	return false
}

// symbols collects the debug file's function symbols, outside [skipLo,
// skipHi) (Go code). ok is false when the file is malformed or was
// truncated under us: the main file's symbols still stand.
func (d *debugFile) symbols(skipLo, skipHi uint64) ([]rawSymbol, bool) {
	c := &symbolCollector{ef: d.ef, data: d.data, skipLo: skipLo, skipHi: skipHi}
	if faultGuard(c.collect) != nil {
		return nil, false
	}
	return c.syms, true
}
