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

// DebugFiles finds separate debug files that are not installed under
// DebugDir: the receiver fetches them from debuginfod servers. A binary
// whose debug file is on its way is not read until it is here (its frames
// keep their addresses meanwhile), so its table is read once, with the
// names, instead of being read again later.
type DebugFiles interface {
	// DebugFile returns the path of the debug file of build (a GNU build
	// ID) when it is here. wait is true while it is being fetched: the
	// binary's table should not be read yet. Neither: read it without.
	// Called while a Process is being read or with its lock held: it must
	// not block or call back.
	DebugFile(build string) (path string, wait bool)
}

// openDebugFile finds and maps the separate debug file of ef under
// DebugDir, else at fetched (when not ""), or returns nil. The file must
// carry the same build ID: a stale debug file from another build would
// name the wrong functions.
func openDebugFile(ef *elf.File, fetched string) *debugFile {
	id := buildid.FromNotes(ef).GNU
	if len(id) < 4 {
		return nil
	}
	if d := mapDebugFile(installedDebugFile(id), id); d != nil || fetched == "" {
		return d
	}
	return mapDebugFile(fetched, id)
}

// installedDebugFile is where a distribution installs build id's debug
// file.
func installedDebugFile(id string) string {
	return filepath.Join(DebugDir, ".build-id", id[:2], id[2:]+".debug")
}

// mapDebugFile maps the debug file at path if it is build id's and has a
// symbol table.
func mapDebugFile(path, id string) *debugFile {
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

// wantsDebugFile returns the GNU build ID of f when its functions' names
// are in a separate debug file that is not installed: f has no .symtab
// (and is not Go), and DebugDir holds no file for its build. "" otherwise (and for files
// that are not ELF, or without a GNU build ID).
func wantsDebugFile(f *os.File) string {
	ef, err := elf.NewFile(f)
	if err != nil {
		return ""
	}
	info := buildid.FromNotes(ef)
	id := info.GNU
	// Go binaries name their functions in .gopclntab, stripped or not.
	if len(id) < 4 || info.Go != "" || hasSection(ef, elf.SHT_SYMTAB) || ef.Section(".gopclntab") != nil {
		return ""
	}
	if _, err := os.Stat(installedDebugFile(id)); err == nil {
		return ""
	}
	return id
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
