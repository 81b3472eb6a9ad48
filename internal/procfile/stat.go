package procfile

import (
	"bytes"
	"fmt"
	"strconv"
)

// Stat is what the agent reads of /proc/PID/stat.
type Stat struct {
	Comm      string // the command name, without its parentheses
	State     byte   // 'R', 'S', 'D', 'Z', ...
	StartTime uint64 // clock ticks after boot (field 22)
}

// ReadStat reads and parses path, a /proc/PID/stat file. The command name
// may hold spaces and parentheses, so it ends at the last ')'. A malformed
// or short line is an error, not a wrong start time.
func ReadStat(path string) (Stat, error) {
	raw, err := ReadFile(path)
	if err != nil {
		return Stat{}, err
	}
	open, end := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
	if open < 0 || end < open {
		return Stat{}, fmt.Errorf("%s: malformed stat %q", path, raw)
	}
	fields := bytes.Fields(raw[end+1:])
	// fields[0] is field 3 (state); start time is field 22.
	if len(fields) < 20 {
		return Stat{}, fmt.Errorf("%s: stat has %d fields after comm, want at least 20", path, len(fields))
	}
	start, err := strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: start time: %w", path, err)
	}
	return Stat{Comm: string(raw[open+1 : end]), State: fields[0][0], StartTime: start}, nil
}
