package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
	"unicode/utf8"
)

// Frame is a Python frame as a profile shows it.
type Frame struct {
	Function string // co_qualname: "Class.method", "outer.<locals>.inner" (3.10 and older: from the source, see sourcenames.go)
	File     string // co_filename
	Line     int    // of the instruction last executed; co_firstlineno when unknown
}

// Bounds on what is read from a process's memory for one code object.
const (
	maxNameChars      = 1024
	maxLineTableBytes = 64 << 10
	maxCachedCodes    = 16384
	maxCachedBytes    = 4 << 20 // line tables and names of one process's cached code objects
)

// Process resolves one CPython process's code objects by reading its
// memory (/proc/PID/mem). Code objects are cached by address and checked
// again once per interval (their type and name pointers), so a code object
// that took a freed one's address is named after itself. It is not safe
// for concurrent use.
type Process struct {
	memPath  string
	in       *Interpreter
	codeType uint64 // run-time address of PyCode_Type
	mem      *os.File
	codes    map[uint64]*codeInfo
	bytes    int         // held by codes
	sources  sourceNames // qualified names before 3.11
}

type codeInfo struct {
	frame     Frame
	lineTable []byte
	header    [3]uint64 // filename, qualname, linetable pointers when read
	checked   time.Time
	freed     bool // its memory held no code object at its last check
}

// NewProcess prepares to resolve the code objects of process pid, which
// maps in with the given load bias.
func NewProcess(procRoot string, pid int, in *Interpreter, bias uint64) *Process {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	return &Process{
		memPath:  filepath.Join(dir, "mem"),
		in:       in,
		codeType: in.CodeTypeVA + bias,
		codes:    map[uint64]*codeInfo{},
		sources:  sourceNames{procDir: dir},
	}
}

// Close releases the process's memory file.
func (p *Process) Close() error {
	if p.mem == nil {
		return nil
	}
	err := p.mem.Close()
	p.mem = nil
	return err
}

// Resolve names the frame running code object code at instruction instr
// (what the kernel recorded: see frameAt). Entries cached before notBefore
// are checked again first.
func (p *Process) Resolve(code, instr uint64, notBefore time.Time) (Frame, error) {
	ci, ok := p.codes[code]
	if ok && !ci.checked.Before(notBefore) {
		return ci.frameAt(code, instr, &p.in.Offsets), nil
	}
	header, first, err := p.readHeader(code)
	if err != nil && ok {
		// The process exited (its last interval is drained after it is
		// gone), or the code object was freed and its memory holds
		// something else: the kernel recorded the address while the code
		// object ran, so its name is still the frame's. Not marked
		// checked: the next check looks again, for a code object that
		// takes the address (which the kernel does not report again).
		if errors.Is(err, errNotCode) {
			ci.freed = true
		}
		return ci.frameAt(code, instr, &p.in.Offsets), nil
	}
	if err != nil {
		return Frame{}, err
	}
	if ok && header == ci.header {
		ci.checked = time.Now()
		ci.freed = false
		return ci.frameAt(code, instr, &p.in.Offsets), nil
	}
	ci, err = p.readCode(header, first)
	if err != nil {
		p.forget(code)
		return Frame{}, err
	}
	p.forget(code)
	if len(p.codes) >= maxCachedCodes || p.bytes+ci.size() > maxCachedBytes {
		p.makeRoom()
	}
	p.codes[code] = ci
	p.bytes += ci.size()
	return ci.frameAt(code, instr, &p.in.Offsets), nil
}

// makeRoom empties a full cache: the entries of freed code objects go
// first; when that frees less than a quarter, all go (rare: a process
// creating live code objects without end). A live code object dropped is
// read again at the drain while the process lives; only a process that
// exits before it loses that name.
func (p *Process) makeRoom() {
	for code, ci := range p.codes {
		if ci.freed {
			p.forget(code)
		}
	}
	if len(p.codes) >= maxCachedCodes*3/4 || p.bytes > maxCachedBytes*3/4 {
		clear(p.codes)
		p.bytes = 0
	}
}

// Recheck checks again every cached code object last checked before
// before, as Resolve does at a drain: one freed and replaced by another at
// the same address is read again. Each address is reported by the kernel
// once per process, so without this a code object created where a freed
// one was (a module's top-level code runs once and is freed; the functions
// compiled next often take its memory) keeps the freed one's name, and for
// a process that exits before the drain that name is what its samples get.
// One whose memory holds something else for now keeps its name and is
// looked at again at the next check (Resolve). It returns how many entries
// were checked.
func (p *Process) Recheck(before time.Time) int {
	var stale []uint64
	for code, ci := range p.codes {
		if ci.checked.Before(before) {
			stale = append(stale, code)
		}
	}
	for _, code := range stale {
		_, _ = p.Resolve(code, 0, before)
	}
	return len(stale)
}

// Len is how many code objects are cached.
func (p *Process) Len() int { return len(p.codes) }

// forget drops code's cache entry.
func (p *Process) forget(code uint64) {
	if ci := p.codes[code]; ci != nil {
		p.bytes -= ci.size()
		delete(p.codes, code)
	}
}

func (ci *codeInfo) size() int {
	return len(ci.lineTable) + len(ci.frame.Function) + len(ci.frame.File) + 96
}

// frameAt is the frame with the line of instruction instr: the address
// of the instruction (InterpreterFrames), or the word whose low half is
// the frame's f_lasti (FrameObjects*; -1 before the first instruction).
func (ci *codeInfo) frameAt(code, instr uint64, off *Offsets) Frame {
	f := ci.frame
	var line int
	var ok bool
	switch lasti := int(int32(uint32(instr))); off.Frames {
	case InterpreterFrames:
		if start := code + uint64(off.CodeAdaptive); instr >= start {
			line, ok = lineOf(ci.lineTable, f.Line, int((instr-start)/2))
		}
	case FrameObjects310:
		if lasti >= 0 {
			line, ok = lineOf310(ci.lineTable, f.Line, 2*lasti)
		}
	case FrameObjects:
		if lasti >= 0 {
			line, ok = lineOfLnotab(ci.lineTable, f.Line, lasti), true
		}
	}
	if ok {
		f.Line = line
	}
	return f
}

// headerBytes is how much of a code object readHeader reads: up to the
// end of the last field it needs.
func (off *Offsets) headerBytes() int {
	return int(max(off.ObjectType+8, off.CodeFirstLineNo+4, off.CodeFilename+8, off.CodeQualName+8, off.CodeLineTable+8))
}

// readHeader reads the code object's fixed part: it must be a code object
// (its type is PyCode_Type); returns its name and line-table pointers and
// first line.
func (p *Process) readHeader(code uint64) ([3]uint64, int, error) {
	off := &p.in.Offsets
	buf := make([]byte, off.headerBytes())
	if err := p.read(code, buf); err != nil {
		return [3]uint64{}, 0, err
	}
	if typ := binary.LittleEndian.Uint64(buf[off.ObjectType:]); typ != p.codeType {
		return [3]uint64{}, 0, fmt.Errorf("%w: object at %#x has type %#x, PyCode_Type is at %#x", errNotCode, code, typ, p.codeType)
	}
	h := [3]uint64{
		binary.LittleEndian.Uint64(buf[off.CodeFilename:]),
		binary.LittleEndian.Uint64(buf[off.CodeQualName:]),
		binary.LittleEndian.Uint64(buf[off.CodeLineTable:]),
	}
	first := int(int32(binary.LittleEndian.Uint32(buf[off.CodeFirstLineNo:])))
	return h, first, nil
}

func (p *Process) readCode(h [3]uint64, first int) (*codeInfo, error) {
	file, err := p.readString(h[0])
	if err != nil {
		return nil, fmt.Errorf("co_filename: %w", err)
	}
	name, err := p.readString(h[1])
	if err != nil {
		return nil, fmt.Errorf("co_qualname (co_name before 3.11): %w", err)
	}
	table, err := p.readBytes(h[2])
	if err != nil {
		return nil, fmt.Errorf("co_linetable (co_lnotab before 3.10): %w", err)
	}
	if p.in.Major == 3 && p.in.Minor < 11 {
		if qual := p.sources.qualName(file, first, name); qual != "" {
			name = qual
		}
	}
	return &codeInfo{frame: Frame{Function: name, File: file, Line: first}, lineTable: table, header: h, checked: time.Now()}, nil
}

// readString reads a compact str object (every identifier and file name
// the compiler creates is one).
func (p *Process) readString(addr uint64) (string, error) {
	off := &p.in.Offsets
	hdr := make([]byte, off.UnicodeState+4)
	if err := p.read(addr, hdr); err != nil {
		return "", err
	}
	length := binary.LittleEndian.Uint64(hdr[off.UnicodeLength:])
	state := binary.LittleEndian.Uint32(hdr[off.UnicodeState:])
	kind, compact, ascii := int(state>>2&7), state>>5&1 == 1, state>>6&1 == 1
	if !compact || (kind != 1 && kind != 2 && kind != 4) || length > maxNameChars {
		return "", fmt.Errorf("string at %#x: not a compact string of at most %d characters (state %#x, length %d)", addr, maxNameChars, state, length)
	}
	data := uint64(off.UnicodeData)
	if ascii {
		data = uint64(off.UnicodeASCIIData)
	}
	raw := make([]byte, int(length)*kind)
	if err := p.read(addr+data, raw); err != nil {
		return "", err
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i += kind {
		var r rune
		switch kind {
		case 1:
			r = rune(raw[i])
		case 2:
			r = rune(binary.LittleEndian.Uint16(raw[i:]))
		case 4:
			r = rune(binary.LittleEndian.Uint32(raw[i:]))
		}
		if r < 0x20 || !utf8.ValidRune(r) {
			r = '?'
		}
		out = utf8.AppendRune(out, r)
	}
	return string(out), nil
}

// readBytes reads a bytes object's contents.
func (p *Process) readBytes(addr uint64) ([]byte, error) {
	off := &p.in.Offsets
	hdr := make([]byte, off.VarObjectSize+8)
	if err := p.read(addr, hdr); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[off.VarObjectSize:])
	if n > maxLineTableBytes {
		return nil, fmt.Errorf("bytes at %#x: %d bytes (at most %d)", addr, n, maxLineTableBytes)
	}
	b := make([]byte, n)
	return b, p.read(addr+uint64(off.BytesData), b)
}

var (
	errGone    = errors.New("process memory unreadable (exited?)")
	errNotCode = errors.New("not a code object")
)

func (p *Process) read(addr uint64, buf []byte) error {
	if p.mem == nil {
		f, err := os.Open(p.memPath)
		if err != nil {
			return fmt.Errorf("%w: %v", errGone, err)
		}
		p.mem = f
	}
	if addr > 1<<47 {
		return fmt.Errorf("address %#x is not a user-space address", addr)
	}
	if _, err := p.mem.ReadAt(buf, int64(addr)); err != nil {
		return fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, err)
	}
	return nil
}
