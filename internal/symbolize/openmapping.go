package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// OpenMapping opens the file of p's mapping i the way the snapshot did
// (inside the process's mount namespace, or the mapped inode itself when
// the path now names another file), for readers of a binary other than
// the symbolizer (e.g. interpreter detection). Close the file when done.
func (s *Symbolizer) OpenMapping(p *Process, i int) (*os.File, error) {
	if i < 0 || i >= len(p.Mappings) {
		return nil, fmt.Errorf("process %d has no mapping %d", p.PID, i)
	}
	return openMapped(filepath.Join(s.procRoot, strconv.Itoa(p.PID)), &p.Mappings[i])
}
