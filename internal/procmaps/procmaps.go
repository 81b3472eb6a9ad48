// Package procmaps reads what the kernel says about a process's mappings:
// /proc/PID/maps, /proc/PID/smaps (the same lines, each followed by what
// the kernel counts for the mapping) and the " (deleted)" mark it puts
// after the path of a file unlinked while in use (in maps and in the
// /proc/PID/exe link).
package procmaps

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, Limit uint64 // runtime address range [Start, Limit)
	Offset       uint64 // file offset mapped at Start
	Path         string // as the process sees it, without " (deleted)"; "[vdso]", "" for anonymous memory
	Dev, Inode   uint64 // Dev in the kernel's dev_t encoding (as in stat)
	Deleted      bool   // the file was unlinked while mapped
}

// deletedSuffix is what the kernel appends to the path of a file that was
// unlinked (or replaced) while mapped or executing.
const deletedSuffix = " (deleted)"

// TrimDeleted returns path without the kernel's " (deleted)" mark and
// whether it had it. The path then names whatever file now has that name,
// if any: not the one the process maps.
func TrimDeleted(path string) (string, bool) {
	return strings.CutSuffix(path, deletedSuffix)
}

// Read reads procRoot/PID/maps; the error says so plainly when the
// process no longer exists.
func Read(procRoot string, pid int) ([]byte, error) {
	raw, err := procfile.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "maps"))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, fmt.Errorf("process %d: process does not exist: %w", pid, err)
		}
		return nil, fmt.Errorf("process %d: read maps: %w", pid, err)
	}
	return raw, nil
}

// ParseExecutable returns the executable mappings of a /proc/PID/maps
// listing, sorted by start address; a line it cannot read is an error
// naming the line.
func ParseExecutable(raw []byte) ([]Mapping, error) {
	var out []Mapping
	for n := 1; len(raw) > 0; n++ {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		if len(line) == 0 {
			continue
		}
		// Most lines are not executable (a python3 process has 20 of 105):
		// they are skipped on their permissions alone, without splitting
		// the line (a process read parses every line).
		if perms, ok := secondField(line); ok && (len(perms) < 3 || perms[2] != 'x') {
			continue
		}
		m, err := parseLine(line, bytes.Fields(line))
		if err != nil {
			return nil, fmt.Errorf("parse maps line %d %q: %w", n, line, err)
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}

// secondField is a maps line's second field (its permissions), split at
// ASCII white space as the kernel writes the line, and whether it has one.
func secondField(line []byte) ([]byte, bool) {
	const spaces = " \t\v\f\r"
	start := bytes.IndexAny(line, spaces)
	if start < 0 {
		return nil, false
	}
	rest := bytes.TrimLeft(line[start:], spaces)
	if len(rest) == 0 {
		return nil, false
	}
	if end := bytes.IndexAny(rest, spaces); end >= 0 {
		rest = rest[:end]
	}
	return rest, true
}

// ParseLine reads one line of /proc/PID/maps.
func ParseLine(line []byte) (Mapping, error) {
	return parseLine(line, bytes.Fields(line))
}

// parseLine reads one maps line, start-limit perms offset dev inode
// [path], split into fields.
func parseLine(line []byte, fields [][]byte) (m Mapping, err error) {
	if len(fields) < 5 {
		return m, errors.New("want at least 5 fields")
	}
	dash := bytes.IndexByte(fields[0], '-')
	if dash < 0 {
		return m, errors.New("bad address range")
	}
	var errs [5]error
	m.Start, errs[0] = strconv.ParseUint(string(fields[0][:dash]), 16, 64)
	m.Limit, errs[1] = strconv.ParseUint(string(fields[0][dash+1:]), 16, 64)
	m.Offset, errs[2] = strconv.ParseUint(string(fields[2]), 16, 64)
	m.Dev, errs[3] = parseDev(string(fields[3]))
	m.Inode, errs[4] = strconv.ParseUint(string(fields[4]), 10, 64)
	if err := errors.Join(errs[:]...); err != nil {
		return m, err
	}
	m.Path, m.Deleted = TrimDeleted(mapsPath(line))
	return m, nil
}

// SmapsEntry is one mapping of /proc/PID/smaps with the counts the callers
// here use; sizes are in bytes.
type SmapsEntry struct {
	Mapping
	Perms                               string // "r-xp"
	Size, Rss, Anonymous, AnonHugePages uint64
	// THPEligible: the kernel may back the mapping with transparent huge
	// pages; VmFlags its flags ("hg": advised MADV_HUGEPAGE).
	THPEligible bool
	VmFlags     []string
}

// ReadSmaps reads an smaps file (/proc/self/smaps, /proc/PID/smaps), in
// the kernel's order; a line it cannot read is an error naming the line. A
// maps file (/proc/PID/maps) gives the same mappings with every count zero,
// and costs the kernel no walk of the page tables.
func ReadSmaps(path string) ([]SmapsEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []SmapsEntry
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Bytes()
		key, value, isField := bytes.Cut(line, []byte(":"))
		// A field's key has no space; a mapping's line starts with an
		// address range, whose first field holds no colon.
		isField = isField && !bytes.ContainsRune(key, ' ')
		if !isField {
			fields := bytes.Fields(line)
			m, err := parseLine(line, fields)
			if err != nil {
				return nil, fmt.Errorf("parse %s line %d %q: %w", path, n, line, err)
			}
			out = append(out, SmapsEntry{Mapping: m, Perms: string(fields[1])})
			continue
		}
		if len(out) == 0 {
			return nil, fmt.Errorf("parse %s line %d %q: a field before any mapping", path, n, line)
		}
		e := &out[len(out)-1]
		var size *uint64
		switch string(key) {
		case "Size":
			size = &e.Size
		case "Rss":
			size = &e.Rss
		case "Anonymous":
			size = &e.Anonymous
		case "AnonHugePages":
			size = &e.AnonHugePages
		case "THPeligible":
			e.THPEligible = string(bytes.TrimSpace(value)) == "1"
		case "VmFlags":
			e.VmFlags = strings.Fields(string(value))
		}
		if size != nil {
			kb, err := strconv.ParseUint(string(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(value), []byte("kB")))), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("parse %s line %d %q: %w", path, n, line, err)
			}
			*size = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// parseDev turns "fd:01" into the kernel's dev_t encoding (as in stat).
func parseDev(s string) (uint64, error) {
	maj, min, ok := strings.Cut(s, ":")
	if !ok {
		return 0, fmt.Errorf("bad device %q", s)
	}
	major, err := strconv.ParseUint(maj, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad device %q: %w", s, err)
	}
	minor, err := strconv.ParseUint(min, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad device %q: %w", s, err)
	}
	return (minor & 0xff) | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32, nil
}

// mapsPath returns what follows the fifth field of a maps line: the path,
// which may contain spaces.
func mapsPath(line []byte) string {
	rest := line
	for range 5 {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	return string(bytes.TrimLeft(rest, " "))
}
