//go:build linux

package tracectx

import (
	"bytes"
	"debug/elf"
	"debug/gosym"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// Flavor says which SDK a binary's markers come from; it picks the uprobe
// programs (Go passes arguments in RAX and keys by goroutine, C in RDI and
// keys by thread).
type Flavor uint8

const (
	FlavorGo Flavor = iota + 1
	FlavorC
)

func (f Flavor) String() string {
	switch f {
	case FlavorGo:
		return "go"
	case FlavorC:
		return "c"
	}
	return fmt.Sprintf("Flavor(%d)", uint8(f))
}

// Marker is one pair of set/clear functions found in a binary, as file
// offsets (what a uprobe is attached at).
type Marker struct {
	Flavor      Flavor
	SetOffset   uint64
	ClearOffset uint64
}

// FindMarkers lists the SDK markers in an ELF file: none for most binaries.
// A binary may hold both flavors (a Go program linking a C library that uses
// the header). Stripped binaries have no .symtab; the C markers are still
// found in .dynsym when exported (e.g. in a shared library).
func FindMarkers(path string) ([]Marker, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open ELF %s: %w", path, err)
	}
	defer f.Close()
	// Decoding every symbol of a large binary allocates tens of MB (the
	// collector's own: ~1 M symbols); most binaries have no markers, and
	// their names are not even in the string tables.
	if mentioned, err := mentionsMarkers(path, f); err == nil && !mentioned {
		return nil, nil
	}
	want := map[string]uint64{GoSetSymbol: 0, GoClearSymbol: 0, CSetSymbol: 0, CClearSymbol: 0}
	found := 0
	scan := func(syms []elf.Symbol, err error) error {
		if err != nil {
			if errors.Is(err, elf.ErrNoSymbols) {
				return nil
			}
			return err
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
				continue
			}
			if v, ok := want[s.Name]; ok && v == 0 {
				off, err := fileOffset(f, s.Value)
				if err != nil {
					return fmt.Errorf("symbol %s: %w", s.Name, err)
				}
				want[s.Name] = off
				found++
			}
		}
		return nil
	}
	if err := scan(f.Symbols()); err != nil {
		return nil, fmt.Errorf("read symbols of %s: %w", path, err)
	}
	if found < len(want) {
		if err := scan(f.DynamicSymbols()); err != nil {
			return nil, fmt.Errorf("read dynamic symbols of %s: %w", path, err)
		}
	}
	if want[GoSetSymbol] == 0 || want[GoClearSymbol] == 0 {
		// Stripped Go binaries (-ldflags=-s -w, and every `go test`
		// binary) keep function names in .gopclntab only.
		if err := findGoFuncs(f, want); err != nil {
			return nil, fmt.Errorf("read .gopclntab of %s: %w", path, err)
		}
	}
	var ms []Marker
	// Only a complete pair is usable: a set without its clear would leave
	// every context behind until LRU eviction.
	if want[GoSetSymbol] != 0 && want[GoClearSymbol] != 0 {
		ms = append(ms, Marker{FlavorGo, want[GoSetSymbol], want[GoClearSymbol]})
	}
	if want[CSetSymbol] != 0 && want[CClearSymbol] != 0 {
		ms = append(ms, Marker{FlavorC, want[CSetSymbol], want[CClearSymbol]})
	}
	return ms, nil
}

// fileOffset converts a symbol's virtual address to its offset in the file
// through the executable PT_LOAD segment that holds it.
func fileOffset(f *elf.File, addr uint64) (uint64, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		if addr >= p.Vaddr && addr < p.Vaddr+p.Memsz {
			return addr - p.Vaddr + p.Off, nil
		}
	}
	return 0, fmt.Errorf("address %#x is in no executable segment", addr)
}

// findGoFuncs fills the Go markers of want from the Go line table. The
// table's PCs are relative to .text, which starts with runtime.text in
// binaries the Go linker lays out (internal linking, the default).
func findGoFuncs(f *elf.File, want map[string]uint64) error {
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil // not a Go binary
	}
	data, err := pcln.Data()
	if err != nil {
		return err
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return err
	}
	for _, name := range []string{GoSetSymbol, GoClearSymbol} {
		fn := tab.LookupFunc(strings.TrimSuffix(name, ".abi0"))
		if fn == nil || want[name] != 0 {
			continue
		}
		off, err := fileOffset(f, fn.Entry)
		if err != nil {
			return fmt.Errorf("function %s: %w", name, err)
		}
		want[name] = off
	}
	return nil
}

// markerNameParts are substrings of every marker function's name as it
// appears in .strtab, .dynstr (C and Go symbols) or .gopclntab (Go function
// names, also in stripped binaries).
var markerNameParts = [][]byte{[]byte("hotpathTraceSet"), []byte("hotpath_tracectx_set")}

// scanChunk is how much of a string table mentionsMarkers reads at a time.
var scanChunk = 256 << 10

// scanBuffers holds mentionsMarkers' read buffers between calls. On a node
// where builds run all the time, every new binary is scanned once: a buffer
// of its own per scan was a quarter of all the agent's allocation (8.5 MB a
// minute in the churn bench), and so a quarter of its garbage collections.
var scanBuffers sync.Pool

// mentionsMarkers reports whether a string table of f (opened from path)
// holds a marker name. It reads the sections in chunks through a small
// buffer rather than decoding symbols onto the heap or mapping the file: a
// mapping of a large binary's tables would count tens of MB in the agent's
// resident size while it is scanned.
func mentionsMarkers(path string, f *elf.File) (bool, error) {
	file, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer file.Close()
	longest := 0
	for _, name := range markerNameParts {
		longest = max(longest, len(name))
	}
	size := max(scanChunk, longest)
	bp, _ := scanBuffers.Get().(*[]byte)
	if bp == nil || len(*bp) != size {
		b := make([]byte, size)
		bp = &b
	}
	defer scanBuffers.Put(bp)
	buf := *bp
	for _, sec := range f.Sections {
		switch sec.Name {
		case ".strtab", ".dynstr", ".gopclntab":
		default:
			continue
		}
		if sec.Type == elf.SHT_NOBITS || sec.Flags&elf.SHF_COMPRESSED != 0 {
			return true, nil // cannot scan as stored: let the full reader decide
		}
		// Consecutive chunks overlap by longest-1 bytes, so a name across
		// a chunk boundary is seen whole in one of them.
		for off := uint64(0); off < sec.FileSize; {
			n := min(uint64(len(buf)), sec.FileSize-off)
			got, err := file.ReadAt(buf[:n], int64(sec.Offset+off))
			if err != nil && got < int(n) {
				return false, fmt.Errorf("read %s of %s: %w", sec.Name, path, err)
			}
			for _, name := range markerNameParts {
				if bytes.Contains(buf[:got], name) {
					return true, nil
				}
			}
			if off+n >= sec.FileSize {
				break
			}
			off += n - uint64(longest-1)
		}
	}
	return false, nil
}
