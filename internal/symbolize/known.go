package symbolize

import (
	"cmp"
	"slices"

	"github.com/hotpath-dev/hotpath/internal/fileid"
)

// KnownMapping is an executable file mapping known by its file's identity
// alone, without a path: what the kernel records as a process maps its
// files, which outlives a process that exits before it can be read. The
// kernel's record has no size: File.Size is 0.
type KnownMapping struct {
	Start, Limit, Offset uint64 // as Mapping's
	File                 fileid.ID
}

// knownFile is a file some snapshot saw: its identity and its path there.
type knownFile struct {
	id   fileid.ID
	path string
}

// maxKnownFiles bounds the files remembered for SnapshotKnown (about 100
// bytes each); past it they are forgotten all at once and remembered
// again as snapshots see them.
const maxKnownFiles = 1024

// rememberFilesLocked notes p's files for SnapshotKnown. s.mu is held.
func (s *Symbolizer) rememberFilesLocked(p *Process) {
	for _, m := range p.Mappings {
		if m.file < 0 || m.Deleted {
			continue
		}
		k := m.ID
		k.Size = 0 // as the kernel's record has it
		if _, ok := s.known[k]; ok {
			continue
		}
		if len(s.known) >= maxKnownFiles {
			clear(s.known)
		}
		s.known[k] = knownFile{id: m.ID, path: m.Path}
	}
}

// SnapshotKnown is a snapshot of process pid, gone before it could be
// read, from the mappings the kernel saw it make. A file that a snapshot
// of any process saw, and whose table is in memory (cached, or held by a
// live process), names the frames in its mappings; the others keep their
// addresses. Nothing is opened: the process's /proc directory is gone, and
// a table not in memory would be one-time work for a process that no
// longer runs. nil when no mapping's file has a table.
func (s *Symbolizer) SnapshotKnown(pid int, known []KnownMapping) *Process {
	p := &Process{PID: pid}
	named := map[fileid.ID]int{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, km := range known {
		m := Mapping{Start: km.Start, Limit: km.Limit, Offset: km.Offset, Dev: km.File.Dev, Inode: km.File.Inode, file: -1}
		f, ok := s.known[km.File]
		if ok {
			m.Path, m.ID = f.path, f.id
			if i, ok := named[f.id]; ok {
				m.file = i
			} else if e, ok := s.cache.peek(f.id, s.now()); ok && e.table != nil {
				m.file = len(p.files)
				named[f.id] = m.file
				p.files = append(p.files, &procFile{id: f.id, table: e.table, loaded: true})
			}
		}
		p.Mappings = append(p.Mappings, m)
	}
	if len(p.files) == 0 {
		return nil
	}
	// The kernel's list is in the order the files were mapped; a lookup
	// wants them by address. (It keeps one slot for overlapping mappings.)
	slices.SortFunc(p.Mappings, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	return p
}
