package procfile

import (
	"bytes"
	"fmt"
	"strconv"
)

// Status is what the agent reads of /proc/PID/status.
type Status struct {
	// NSPID is the pid as the process sees it: the last NSpid field, its
	// innermost PID namespace's (the pid a containerised runtime writes
	// into file names).
	NSPID int
	UID   uint32 // effective user
	// SigCgt has bit n-1 set when the process handles signal n.
	SigCgt uint64
}

// Handles reports whether the process has a handler for signal sig.
func (s Status) Handles(sig int) bool {
	return sig >= 1 && sig <= 64 && s.SigCgt&(1<<(sig-1)) != 0
}

// ReadStatus reads and parses path, a /proc/PID/status file. A file
// without an NSpid (kernels before 4.1) or Uid line is an error.
func ReadStatus(path string) (Status, error) {
	raw, err := ReadFile(path)
	if err != nil {
		return Status{}, err
	}
	var st Status
	var haveUID bool
	for _, line := range bytes.Split(raw, []byte{'\n'}) {
		key, val, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			continue
		}
		fields := bytes.Fields(val)
		if len(fields) == 0 {
			continue
		}
		switch string(key) {
		case "NSpid":
			st.NSPID, err = strconv.Atoi(string(fields[len(fields)-1]))
		case "Uid":
			if len(fields) < 2 {
				return Status{}, fmt.Errorf("%s: Uid: %q", path, val)
			}
			var uid uint64
			uid, err = strconv.ParseUint(string(fields[1]), 10, 32)
			st.UID, haveUID = uint32(uid), true
		case "SigCgt":
			st.SigCgt, err = strconv.ParseUint(string(fields[0]), 16, 64)
		}
		if err != nil {
			return Status{}, fmt.Errorf("%s: %s: %w", path, key, err)
		}
	}
	if st.NSPID <= 0 || !haveUID {
		return Status{}, fmt.Errorf("%s: no NSpid or Uid line", path)
	}
	return st, nil
}
