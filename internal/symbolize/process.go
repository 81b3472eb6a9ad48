package symbolize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procmaps"
)

// Mapping is one executable mapping of a process.
type Mapping struct {
	Start, Limit uint64 // runtime address range [Start, Limit)
	Offset       uint64 // file offset mapped at Start
	Path         string // as the process sees it; "[vdso]", "" for anonymous memory
	Dev, Inode   uint64 // from /proc/PID/maps (Dev in the kernel's dev_t encoding)
	ID           fileid.ID
	Deleted      bool   // the file was unlinked while mapped
	OpenErr      string // why the file could not be opened, "" when it was

	file int // index into Process.files, -1 when there is no file to read
}

// Process is a snapshot of a process's executable mappings. It holds open
// handles to the mapped files (or their loaded SymbolTables), so it stays
// symbolizable after the process exits or its files are deleted. Close it
// when the process is forgotten.
type Process struct {
	PID      int
	ExePath  string    // readlink /proc/PID/exe
	Mappings []Mapping // sorted by Start
	// DeferLoads, when set, leaves addresses in binaries whose symbol table
	// is not cached yet unresolved instead of reading the table now (the
	// agent's per-binary work is over budget and this process is small).
	// The unwinder's MappingTable is not deferred.
	DeferLoads atomic.Bool

	mu    sync.Mutex
	files []*procFile
}

// procFile is one distinct mapped file: an open handle until its table is
// loaded, then the table (whose file mapping outlives the handle).
type procFile struct {
	id       fileid.ID
	f        *os.File
	table    *SymbolTable
	err      error
	loaded   bool
	deferred bool // its load was deferred once (counted in Stats.Deferred)
	// debugBuild is the GNU build ID whose debug file the table waits
	// for (Options.DebugFiles), "" when it needs none; set once
	// debugChecked.
	debugBuild   string
	debugChecked bool
}

// Close releases the open file handles. Tables already loaded keep working.
func (p *Process) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, pf := range p.files {
		if pf.f != nil {
			errs = append(errs, pf.f.Close())
			pf.f = nil
		}
	}
	return errors.Join(errs...)
}

// find returns the index of the mapping containing addr, or -1.
func (p *Process) find(addr uint64) int {
	i, _ := slices.BinarySearchFunc(p.Mappings, addr, func(m Mapping, a uint64) int {
		switch {
		case m.Limit <= a:
			return -1
		case m.Start > a:
			return 1
		}
		return 0
	})
	if i < len(p.Mappings) && p.Mappings[i].Start <= addr && addr < p.Mappings[i].Limit {
		return i
	}
	return -1
}

// snapshotProcess reads procRoot/PID/{exe,maps} and opens every mapped
// executable file. Files are opened through procRoot/PID/root so paths
// resolve in the process's own mount namespace (containers); a deleted or
// since-replaced file is opened through procRoot/PID/map_files, which names
// exactly the mapped inode. raw, when not nil, is the process's maps read
// by the caller (procmaps.Read).
//
// A file whose table is already cached (cached reports it; nil: none is) is
// only stat'ed, not opened: the tenth process of a binary costs a stat.
func snapshotProcess(procRoot string, pid int, raw []byte, cached func(fileid.ID) bool) (*Process, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	// Kernel threads have no exe link; that leaves ExePath empty. A process
	// that is gone has none either: the read of its maps below says so.
	exe, err := os.Readlink(filepath.Join(dir, "exe"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("snapshot process %d: read exe link: %w", pid, err)
	}
	if raw == nil {
		if raw, err = procmaps.Read(procRoot, pid); err != nil {
			return nil, fmt.Errorf("snapshot %w", err)
		}
	}
	maps, err := parseMaps(raw)
	if err != nil {
		return nil, fmt.Errorf("snapshot process %d: %w", pid, err)
	}
	p := &Process{PID: pid, ExePath: exe, Mappings: maps}
	byInode := map[[2]uint64]int{}
	for i := range p.Mappings {
		m := &p.Mappings[i]
		if !strings.HasPrefix(m.Path, "/") {
			continue
		}
		key := [2]uint64{m.Dev, m.Inode}
		if fi, ok := byInode[key]; ok {
			m.file, m.ID = fi, p.files[fi].id
			continue
		}
		if cached != nil && !m.Deleted {
			if id, err := fileid.Of(filepath.Join(dir, "root", m.Path)); err == nil && id.Inode == m.Inode && cached(id) {
				m.ID = id
				m.file = len(p.files)
				byInode[key] = m.file
				p.files = append(p.files, &procFile{id: id})
				continue
			}
		}
		f, err := openMapped(dir, m)
		if err != nil {
			m.OpenErr = err.Error()
			continue
		}
		id, err := fileid.OfFile(f)
		if err != nil {
			f.Close()
			m.OpenErr = err.Error()
			continue
		}
		m.ID = id
		m.file = len(p.files)
		byInode[key] = m.file
		p.files = append(p.files, &procFile{id: id, f: f})
	}
	return p, nil
}

func openMapped(dir string, m *Mapping) (*os.File, error) {
	mapFile := filepath.Join(dir, "map_files", fmt.Sprintf("%x-%x", m.Start, m.Limit))
	if m.Deleted {
		return os.Open(mapFile)
	}
	f, err := os.Open(filepath.Join(dir, "root", m.Path))
	if err == nil {
		var st syscall.Stat_t
		if serr := syscall.Fstat(int(f.Fd()), &st); serr == nil && st.Ino == m.Inode {
			return f, nil
		}
		// Replaced on disk since it was mapped (new inode at the same path).
		f.Close()
	}
	mf, merr := os.Open(mapFile)
	if merr == nil {
		return mf, nil
	}
	if err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s was replaced since it was mapped and %w", m.Path, merr)
}

// parseMaps keeps the executable mappings of a /proc/PID/maps listing.
// Non-executable ones are not needed: SymbolTable.FileAddr turns the
// executable mapping's own file offset into an ELF address.
func parseMaps(raw []byte) ([]Mapping, error) {
	ms, err := procmaps.ParseExecutable(raw)
	if err != nil {
		return nil, err
	}
	out := make([]Mapping, len(ms))
	for i, m := range ms {
		out[i] = Mapping{Start: m.Start, Limit: m.Limit, Offset: m.Offset, Path: m.Path, Dev: m.Dev, Inode: m.Inode, Deleted: m.Deleted, file: -1}
	}
	return out, nil
}
