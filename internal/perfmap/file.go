package perfmap

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// Map is one process's perf map, read incrementally as the runtime appends
// to it. It is safe for concurrent use.
type Map struct {
	procRoot string
	pid      int
	limits   Limits

	mu        sync.Mutex
	ids       *procfile.Status // read once: the pid the process sees, its uid
	file      [2]uint64        // device and inode of the file read so far
	offset    int64            // bytes of it consumed (complete lines only)
	syms      table
	refreshed time.Time
	stats     Stats
	lastErr   error
	// held is the map file last opened, kept open until Close: once the
	// process exits, /proc no longer leads to it, and what the runtime
	// wrote since the last read is read from it. closed: Close ran.
	held   *os.File
	closed bool
}

// Stats says what a Map has read and refused.
type Stats struct {
	Present  bool   // the file existed at the last refresh
	Symbols  int    // entries kept
	Lines    uint64 // lines parsed
	Rejected uint64 // lines refused (malformed, too long)
	Dropped  uint64 // entries dropped past Limits.MaxSymbols
	Skipped  int64  // bytes never read because the file grew past Limits.MaxReadBytes in one step
}

// New returns the perf map of process pid (as the agent sees it) below
// procRoot ("/proc"). Nothing is read until the first Lookup or Refresh.
func New(procRoot string, pid int, limits Limits) *Map {
	return &Map{procRoot: procRoot, pid: pid, limits: limits}
}

// Lookup names addr from the entries written up to notBefore: when the
// file was last read before it, what the runtime appended since is read
// first, whether addr is known or not. A runtime that frees code writes
// the entry of the code it puts in that memory later in the file, so an
// address found among the entries read earlier may name code that no
// longer exists. The agent passes the time its interval was drained: a
// process's map is read at most once per interval (an fstat when it did
// not grow).
func (m *Map) Lookup(addr uint64, notBefore time.Time) (Symbol, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refreshed.Before(notBefore) {
		m.lastErr = m.refreshLocked()
	}
	return m.syms.lookup(addr)
}

// Refresh reads what the runtime appended since the last read.
func (m *Map) Refresh() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastErr = m.refreshLocked()
	return m.lastErr
}

// Reread makes the next Lookup read the file from the start, whatever its
// size: a runtime that rewrote it in place (HotSpot's Compiler.perfmap
// truncates it and writes every entry again) may have left it larger, which
// would pass for entries appended.
func (m *Map) Reread() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.file, m.offset, m.refreshed = [2]uint64{}, 0, time.Time{}
}

// Stats returns what has been read so far and the last refresh's error.
func (m *Map) Stats() (Stats, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.stats
	st.Symbols = len(m.syms)
	return st, m.lastErr
}

// Path is where the map is looked for, as the process sees it ("" until
// the process's own pid is known).
func (m *Map) Path() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		return ""
	}
	return fmt.Sprintf("/tmp/perf-%d.map", m.ids.NSPID)
}

// Hold opens the process's perf map now, while the process runs, if it
// has one and none is open yet. The map is read when samples are named, at
// the end of an interval: a program that exited by then (a script or a
// test run of a few seconds) can no longer be reached through /proc, and
// is read from the file held. Without a map yet, a later Hold tries again.
func (m *Map) Hold() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held != nil || m.closed {
		return nil
	}
	// A read keeps the file it opens.
	m.lastErr = m.refreshLocked()
	return m.lastErr
}

// Held reports whether the map file is open (Hold, or a read).
func (m *Map) Held() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held != nil
}

// Close releases the map file. The entries read stay.
func (m *Map) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.held == nil {
		return nil
	}
	err := m.held.Close()
	m.held = nil
	return err
}

// readIDsLocked reads the process's own pid and uid once; found is false
// when the process is gone.
func (m *Map) readIDsLocked() (found bool, err error) {
	if m.ids != nil {
		return true, nil
	}
	st, err := procfile.ReadStatus(filepath.Join(m.procRoot, strconv.Itoa(m.pid), "status"))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("perf map of process %d: %w", m.pid, err)
	}
	m.ids = &st
	return true, nil
}

// checkLocked refuses a map file that is not a regular file or that neither
// the process's user nor root owns.
func (m *Map) checkLocked(f *os.File) (unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return st, fmt.Errorf("perf map of process %d: %w", m.pid, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return st, fmt.Errorf("perf map of process %d: /tmp/perf-%d.map is not a regular file (mode %#o): refused", m.pid, m.ids.NSPID, st.Mode)
	}
	// Only the process itself (or root) may speak for it: another user
	// of a shared /tmp must not name a process's code.
	if st.Uid != 0 && st.Uid != m.ids.UID {
		return st, fmt.Errorf("perf map of process %d: /tmp/perf-%d.map is owned by uid %d, the process runs as uid %d: refused", m.pid, m.ids.NSPID, st.Uid, m.ids.UID)
	}
	return st, nil
}

func (m *Map) refreshLocked() error {
	m.refreshed = time.Now()
	if found, err := m.readIDsLocked(); !found || err != nil {
		// Not found: the process exited before its map was first looked
		// for (a short-lived program of a busy node) and none was held:
		// there is no map to read and nothing to report.
		return err
	}
	f, err := m.open()
	switch {
	case err == nil && m.closed:
		defer f.Close()
	case err == nil:
		// The file the path names now is the one to keep.
		if m.held != nil {
			m.held.Close()
		}
		m.held = f
	case m.held != nil && errors.Is(err, os.ErrNotExist):
		// The process exited (or removed its map): what it wrote is in
		// the file held.
		f = m.held
	case errors.Is(err, os.ErrNotExist):
		m.stats.Present = false
		return nil // no JIT runtime writing one (yet): not an error
	default:
		m.stats.Present = false
		return fmt.Errorf("perf map of process %d: %w", m.pid, err)
	}
	m.stats.Present = true
	st, err := m.checkLocked(f)
	if err != nil {
		return err
	}
	id := [2]uint64{st.Dev, st.Ino}
	if id != m.file || st.Size < m.offset {
		// A new file (process restarted in another container, file
		// recreated) or a truncated one: start over.
		m.file, m.offset, m.syms = id, 0, nil
	}
	if st.Size == m.offset {
		return nil
	}
	return m.readLocked(f, st.Size)
}

// open opens tmp/perf-NSPID.map inside the process's root, refusing
// symlinks and paths out of it (procfile.OpenInRoot).
func (m *Map) open() (*os.File, error) {
	return procfile.OpenInRoot(filepath.Join(m.procRoot, strconv.Itoa(m.pid)), fmt.Sprintf("tmp/perf-%d.map", m.ids.NSPID))
}

// readLocked parses the file from m.offset to size, at most
// Limits.MaxReadBytes of it, and merges the entries.
func (m *Map) readLocked(f *os.File, size int64) error {
	from, skipPartial := m.offset, false
	if max := m.limits.MaxReadBytes; max > 0 && size-from > max {
		m.stats.Skipped += size - max - from
		from, skipPartial = size-max, true // mid-line, most likely
	}
	lineMax := max(m.limits.MaxLineBytes, 64)
	r := bufio.NewReaderSize(io.NewSectionReader(f, from, size-from), lineMax)
	var consumed int64
	var syms []Symbol
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			// Too long for an entry: refuse it and skip to its end.
			n := int64(len(line))
			for err == bufio.ErrBufferFull {
				line, err = r.ReadSlice('\n')
				n += int64(len(line))
			}
			consumed += n
			if !skipPartial {
				m.stats.Rejected++
			}
			skipPartial = false
			if err != nil {
				break
			}
			continue
		}
		if err != nil {
			break // EOF: a partial last line is read when it is complete
		}
		consumed += int64(len(line))
		if skipPartial {
			skipPartial = false
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		m.stats.Lines++
		s, perr := ParseLine(line, m.limits.MaxNameBytes)
		if perr != nil {
			m.stats.Rejected++
			continue
		}
		syms = append(syms, s)
	}
	m.offset = from + consumed
	var dropped int
	m.syms, dropped = m.syms.merge(syms, m.limits.MaxSymbols)
	m.stats.Dropped += uint64(dropped)
	return nil
}
