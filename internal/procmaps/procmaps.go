// Package procmaps reads what the kernel says about a process's mappings:
// /proc/PID/maps and the " (deleted)" mark it puts after the path of a file
// unlinked while in use (in maps and in the /proc/PID/exe link).
package procmaps

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// ParseExecutable returns the executable mappings of a /proc/PID/maps
// listing, sorted by start address; a line it cannot read is an error
// naming the line.
func ParseExecutable(raw []byte) ([]Mapping, error) {
	var out []Mapping
	for n, line := range bytes.Split(raw, []byte{'\n'}) {
		if len(line) == 0 {
			continue
		}
		// start-limit perms offset dev inode [path]
		fields := bytes.Fields(line)
		if len(fields) < 5 {
			return nil, fmt.Errorf("parse maps line %d %q: want at least 5 fields", n+1, line)
		}
		if len(fields[1]) < 3 || fields[1][2] != 'x' {
			continue
		}
		dash := bytes.IndexByte(fields[0], '-')
		if dash < 0 {
			return nil, fmt.Errorf("parse maps line %d %q: bad address range", n+1, line)
		}
		var m Mapping
		var errs [5]error
		m.Start, errs[0] = strconv.ParseUint(string(fields[0][:dash]), 16, 64)
		m.Limit, errs[1] = strconv.ParseUint(string(fields[0][dash+1:]), 16, 64)
		m.Offset, errs[2] = strconv.ParseUint(string(fields[2]), 16, 64)
		m.Dev, errs[3] = parseDev(string(fields[3]))
		m.Inode, errs[4] = strconv.ParseUint(string(fields[4]), 10, 64)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("parse maps line %d %q: %w", n+1, line, err)
		}
		m.Path = mapsPath(line)
		m.Path, m.Deleted = TrimDeleted(m.Path)
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
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
