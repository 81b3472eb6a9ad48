package symbolize

import (
	"fmt"
	"os"
	"path/filepath"
)

// The vdso is not a file, so it has no file ID and is not in the table
// cache. Every 64-bit process on a host maps the same kernel-provided image,
// so the agent reads its own copy once and uses it for any process whose
// [vdso] mapping has the same size (a 32-bit process's differs and stays
// unresolved).

// loadVDSO reads the calling process's [vdso] image via procRoot/self.
func loadVDSO(procRoot string) (*SymbolTable, uint64, error) {
	raw, err := os.ReadFile(filepath.Join(procRoot, "self", "maps"))
	if err != nil {
		return nil, 0, fmt.Errorf("load vdso: %w", err)
	}
	maps, err := parseMaps(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("load vdso: %w", err)
	}
	for _, m := range maps {
		if m.Path != "[vdso]" {
			continue
		}
		mem, err := os.Open(filepath.Join(procRoot, "self", "mem"))
		if err != nil {
			return nil, 0, fmt.Errorf("load vdso: %w", err)
		}
		defer mem.Close()
		img := make([]byte, m.Limit-m.Start)
		if _, err := mem.ReadAt(img, int64(m.Start)); err != nil {
			return nil, 0, fmt.Errorf("load vdso: read image: %w", err)
		}
		t, err := parseSymbolTable(img, "")
		if err != nil {
			return nil, 0, fmt.Errorf("load vdso: %w", err)
		}
		return t, m.Limit - m.Start, nil
	}
	return nil, 0, fmt.Errorf("load vdso: no [vdso] mapping in this process")
}
