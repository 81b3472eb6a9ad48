package symbolize

import (
	"debug/elf"
	"os"
)

// Segments are a binary's PT_LOAD segments that have file data: what turns
// its file offsets and the mappings of it into its ELF addresses. The symbol
// table holds them, and so does anything else placing a binary in a
// process (the CPython frame walk's interpreter).
type Segments struct {
	// Executable segments first: where an old layout maps one page twice,
	// the text segment is the one samples are in.
	loads []loadSegment
	nexec int // how many of loads are executable
}

type loadSegment struct{ off, vaddr, filesz uint64 }

// NewSegments reads the segments from an ELF file's program headers.
func NewSegments(progs []*elf.Prog) Segments {
	var s Segments
	var other []loadSegment
	for _, p := range progs {
		if p.Type != elf.PT_LOAD || p.Filesz == 0 {
			continue
		}
		seg := loadSegment{off: p.Off, vaddr: p.Vaddr, filesz: p.Filesz}
		if p.Flags&elf.PF_X != 0 {
			s.loads = append(s.loads, seg)
		} else {
			other = append(other, seg)
		}
	}
	s.nexec = len(s.loads)
	s.loads = append(s.loads, other...)
	return s
}

// HasText reports whether an executable segment has file data. A separate
// debug file's segments have none (objcopy --only-keep-debug keeps their
// addresses, not their file offsets): file offsets of the binary are placed
// with the binary's own segments.
func (s Segments) HasText() bool { return s.nexec > 0 }

// exec is the executable segments.
func (s Segments) exec() []loadSegment { return s.loads[:s.nexec] }

// FileAddr converts a file offset (runtime address − mapping start + mapping
// offset) to the ELF virtual address the symbols use, through the PT_LOAD
// segment that contains it. This one rule covers PIE and non-PIE executables
// and shared libraries alike.
func (s Segments) FileAddr(fileOffset uint64) (uint64, bool) {
	for _, l := range s.loads {
		if fileOffset >= l.off && fileOffset-l.off < l.filesz {
			return fileOffset - l.off + l.vaddr, true
		}
	}
	return 0, false
}

// MappingAddr is the ELF address at which a mapping of the binary's code
// that starts at file offset o begins (its load bias is the mapping's start
// minus it). A mapping starts on a page boundary, and where a linker packs
// segments into the file without aligning them (lld, which Rust links with
// by default since 1.90: the text at file offset 0x147c0 and address
// 0x157c0) the text's mapping starts in the page it shares with the end of
// the segment before, which lies at another address: FileAddr answers for
// that segment, a page off.
func (s Segments) MappingAddr(o uint64) (uint64, bool) {
	page := uint64(os.Getpagesize())
	for _, l := range s.exec() {
		if o >= l.off&^(page-1) && o < l.off+l.filesz {
			return l.vaddr - (l.off - o), true
		}
	}
	return s.FileAddr(o)
}

// LoadBias is the difference between run-time and ELF addresses of the
// binary's code in a mapping of it at start from file offset o
// (MappingAddr).
func (s Segments) LoadBias(start, o uint64) (uint64, bool) {
	va, ok := s.MappingAddr(o)
	return start - va, ok
}

// FileOffset is FileAddr's inverse: the file offset of ELF address vaddr,
// through the PT_LOAD segment that contains it.
func (s Segments) FileOffset(vaddr uint64) (uint64, bool) {
	for _, l := range s.loads {
		if vaddr >= l.vaddr && vaddr-l.vaddr < l.filesz {
			return vaddr - l.vaddr + l.off, true
		}
	}
	return 0, false
}
