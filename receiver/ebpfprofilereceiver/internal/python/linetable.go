package python

// lineOf returns the source line of instruction index idx (in 2-byte code
// units) from a CPython 3.11 (and later) location table (co_linetable; the format is
// Objects/locations.md of CPython 3.11). Each entry covers 1–8 code units
// and starts with a byte 1cccclll: code c says how the line changes, l+1
// is the length. ok is false when idx is past the table or its entry has
// no location.
func lineOf(table []byte, firstLine, idx int) (line int, ok bool) {
	line = firstLine
	addr := 0
	for i := 0; i < len(table); {
		b := table[i]
		if b&0x80 == 0 {
			return 0, false // not at an entry start: a table we do not understand
		}
		code, length := int(b>>3&15), int(b&7)+1
		i++
		delta, hasLine := 0, true
		switch {
		case code == 15: // no location
			hasLine = false
		case code == 14: // long form: line delta, end line delta, column, end column
			delta = svarint(table, &i)
			varint(table, &i)
			varint(table, &i)
			varint(table, &i)
		case code == 13: // no column
			delta = svarint(table, &i)
		case code >= 10: // one-line form: delta code-10, column, end column
			delta = code - 10
			i += 2
		default: // short form: same line, one byte of columns
			i++
		}
		if hasLine {
			line += delta
		}
		if idx < addr+length {
			return line, hasLine
		}
		addr += length
	}
	return 0, false
}

// varint reads an unsigned varint of 6-bit chunks, least significant
// first, bit 6 set on all but the last.
func varint(b []byte, i *int) int {
	v, shift := 0, 0
	for *i < len(b) && shift < 32 {
		c := b[*i]
		*i++
		v |= int(c&63) << shift
		shift += 6
		if c&64 == 0 {
			break
		}
	}
	return v
}

func svarint(b []byte, i *int) int {
	v := varint(b, i)
	if v&1 != 0 {
		return -(v >> 1)
	}
	return v >> 1
}

// lineOf310 returns the source line of the instruction at byte offset addr
// from a CPython 3.10 line table (co_linetable, PEP 626; the format is
// Objects/lnotab_notes.txt of 3.10): pairs of an unsigned byte, how many
// bytes of code the entry covers, and a signed byte, the line's change
// (-128: those bytes have no line). ok is false when addr is past the
// table or its bytes have no line.
func lineOf310(table []byte, firstLine, addr int) (line int, ok bool) {
	line = firstLine
	end := 0
	for i := 0; i+1 < len(table); i += 2 {
		start := end
		end += int(table[i])
		delta := int(int8(table[i+1]))
		hasLine := delta != -128
		if hasLine {
			line += delta
		}
		if addr >= start && addr < end {
			return line, hasLine
		}
	}
	return 0, false
}

// lineOfLnotab returns the source line of the instruction at byte offset
// addr from a co_lnotab of CPython 3.6 to 3.9 (Objects/lnotab_notes.txt):
// pairs of an unsigned byte, the bytes of code to the next line change,
// and a signed byte, that change. As PyCode_Addr2Line does, an offset past
// the table has the last line.
func lineOfLnotab(table []byte, firstLine, addr int) int {
	line, at := firstLine, 0
	for i := 0; i+1 < len(table); i += 2 {
		at += int(table[i])
		if at > addr {
			break
		}
		line += int(int8(table[i+1]))
	}
	return line
}
