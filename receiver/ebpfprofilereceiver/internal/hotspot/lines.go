package hotspot

import (
	"encoding/binary"
)

// Java source lines. A method's ConstMethod keeps its line number table
// compressed right after its bytecodes, when it has one (the flag
// has_linenumber_table, bit 0 of ConstMethod::_flags since JDK 8): entries
// of (bytecode index, line), each a delta from the last: one byte (bci
// delta in its top five bits, line delta in its low three), or 0xFF and two
// signed numbers in HotSpot's compressed stream; 0 ends it. The file is the
// class's source file attribute (ConstantPool::_source_file_name_index),
// a name without a directory ("HashMap.java").

// lineLayout is where the fields lines need sit; ok is false for a JVM
// whose description lacks one (its frames get no file or line).
type lineLayout struct {
	ok              bool
	constMethodSize uint64
	flags, codeSize uint64
	poolSourceFile  uint64
}

// maxLineTable bounds the bytes read of one method's line table.
const maxLineTable = 4096

// hasLineNumberTable is ConstMethod's flag for a line number table.
const hasLineNumberTable = 1

func readLineLayout(fields, sizes map[string]uint64) lineLayout {
	var l lineLayout
	var ok1, ok2, ok3, ok4 bool
	l.constMethodSize, ok1 = sizes["ConstMethod"]
	// JDK 21+ made ConstMethod::_flags a struct of its own.
	if l.flags, ok2 = fields["ConstMethod::_flags"]; !ok2 {
		l.flags, ok2 = fields["ConstMethod::_flags._flags"]
	}
	l.codeSize, ok3 = fields["ConstMethod::_code_size"]
	l.poolSourceFile, ok4 = fields["ConstantPool::_source_file_name_index"]
	l.ok = ok1 && ok2 && ok3 && ok4 && l.constMethodSize > 0 && l.constMethodSize < 4096
	return l
}

// javaMethod is what the agent keeps of a Method: its name, its class's
// source file, and its line number table (nil when it has none).
type javaMethod struct {
	name      string
	file      string
	lineTable []byte
	codeSize  int
}

// line returns the source line of bytecode index bci (-1: the method's
// entry, its first line), 0 when the method has no table.
func (m *javaMethod) line(bci int, x byte) int {
	if m.lineTable == nil {
		return 0
	}
	if bci < 0 || bci >= m.codeSize {
		bci = 0
	}
	// The entries are in the order of the class file, not always sorted:
	// the line of the last entry at or before bci, the nearest one.
	var cur, line, bestBCI, best int
	first := 0
	r := unsigned5{b: m.lineTable, x: x}
	for len(r.b) > 0 {
		b := r.b[0]
		r.b = r.b[1:]
		switch b {
		case 0:
			if best == 0 {
				return first
			}
			return best
		case 0xFF:
			cur += int(signed(r.next()))
			line += int(signed(r.next()))
			if r.err != nil {
				return 0
			}
		default:
			cur += int(b >> 3)
			line += int(b & 7)
		}
		if first == 0 {
			first = line
		}
		if cur <= bci && cur >= bestBCI {
			bestBCI, best = cur, line
		}
	}
	return 0 // no end: not a table read right
}

// signed is HotSpot's compressed stream's signed number (zigzag).
func signed(v uint32) int32 { return int32(v>>1) ^ -int32(v&1) }

// readLineTable reads the compressed line number table that follows the
// bytecodes of the ConstMethod at cm, up to its end mark.
func (c *CodeCache) readLineTable(cm uint64) ([]byte, int, error) {
	l := &c.l.lines
	var hdr [4]byte
	if err := c.read(cm+l.flags, hdr[:1]); err != nil {
		return nil, 0, err
	}
	if err := c.read(cm+l.codeSize, hdr[2:4]); err != nil {
		return nil, 0, err
	}
	codeSize := int(binary.LittleEndian.Uint16(hdr[2:4]))
	if hdr[0]&hasLineNumberTable == 0 {
		return nil, codeSize, nil
	}
	start := cm + l.constMethodSize + uint64(codeSize)
	buf := make([]byte, 0, 256)
	for chunk := 256; len(buf) < maxLineTable; chunk *= 2 {
		b := make([]byte, min(chunk, maxLineTable-len(buf)))
		if err := c.read(start+uint64(len(buf)), b); err != nil {
			return nil, codeSize, err
		}
		buf = append(buf, b...)
		if end := lineTableEnd(buf, c.l.scopes.exclusion); end > 0 {
			return buf[:end:end], codeSize, nil
		}
	}
	return nil, codeSize, nil // longer than maxLineTable: no lines
}

// lineTableEnd is the length of the table in b through its end mark, 0
// when b does not hold all of it.
func lineTableEnd(b []byte, x byte) int {
	for i := 0; i < len(b); {
		switch b[i] {
		case 0:
			return i + 1
		case 0xFF:
			r := unsigned5{b: b[i+1:], x: x}
			r.next()
			r.next()
			if r.err != nil {
				return 0
			}
			i = len(b) - len(r.b)
		default:
			i++
		}
	}
	return 0
}
