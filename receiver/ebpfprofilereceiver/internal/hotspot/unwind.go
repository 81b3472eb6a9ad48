package hotspot

import "fmt"

// HotSpot's compiled code (C2's, C1's, the runtime stubs') keeps no frame
// pointer unless the JVM runs with -XX:+PreserveFramePointer, and it has
// no unwind tables. Each CodeBlob records the size of its frame instead,
// and where in its code the frame is complete; HotSpot walks its own
// stacks with them (frame::sender_for_compiled_frame). The sampler's
// in-kernel walk does the same with what Unwind gives it.

// frameLayout is where a CodeBlob keeps what unwinding its frame needs.
type frameLayout struct {
	ok            bool
	interpCode    uint64 // AbstractInterpreter::_code: the address of its StubQueue*
	stubBuffer    uint64 // StubQueue::_stub_buffer
	bufferLimit   uint64 // StubQueue::_buffer_limit (an int)
	frameSize     uint64 // CodeBlob::_frame_size: an int, in words
	frameComplete uint64 // CodeBlob::_frame_complete_offset: an int (JDK 9-22) or int16 (23+), from the code's start
	code          uint64 // CodeBlob::_code_begin (an address, JDK 9-22) or _code_offset (an int from the blob, 23+)
	codeIsOffset  bool
}

func readFrameLayout(fields map[string]uint64) frameLayout {
	var l frameLayout
	var ok1, ok2 bool
	l.frameSize, ok1 = fields["CodeBlob::_frame_size"]
	l.frameComplete, ok2 = fields["CodeBlob::_frame_complete_offset"]
	if v, ok := fields["CodeBlob::_code_offset"]; ok {
		l.code, l.codeIsOffset = v, true
	} else if l.code, ok = fields["CodeBlob::_code_begin"]; !ok {
		return frameLayout{}
	}
	l.ok = ok1 && ok2
	var ok3, ok4, ok5 bool
	l.interpCode, ok3 = fields["AbstractInterpreter::_code"]
	l.stubBuffer, ok4 = fields["StubQueue::_stub_buffer"]
	l.bufferLimit, ok5 = fields["StubQueue::_buffer_limit"]
	if !ok3 || !ok4 || !ok5 {
		l.interpCode = 0 // interpreted frames are followed by frame pointer, unnamed
	}
	return l
}

// readInterpreter reads where the template interpreter's code is: its
// interpreted frames are named from the Method* in them. [0, 0) when the
// JVM does not say.
func (c *CodeCache) readInterpreter() error {
	f := c.l.frames
	if f.interpCode == 0 {
		return nil
	}
	q, err := c.u64(f.interpCode)
	if err != nil {
		return err
	}
	if q == 0 {
		// Generated right after the code cache is set up, before any
		// Java code runs: a JVM read in between is read again later,
		// else its interpreted frames would stay walked by frame pointer.
		return fmt.Errorf("%w: its interpreter is not generated yet", ErrNotReady)
	}
	buf, err := c.u64(q + f.stubBuffer)
	if err != nil {
		return err
	}
	limit, err := c.u32(q + f.bufferLimit)
	if err != nil {
		return err
	}
	if buf != 0 && limit > 0 && limit < 64<<20 {
		c.interpLow, c.interpHigh = buf, buf+uint64(limit)
	}
	return nil
}

// Interpreted returns the frame of an interpreted method (its Method*, as
// the sampler found it in the interpreter's frame) at bytecode index bci
// (-1: unknown, the frame gets no line).
func (c *CodeCache) Interpreted(method uint64, bci int) (Frame, error) {
	m, err := c.method(method)
	if err != nil {
		return Frame{}, err
	}
	f := Frame{Function: m.name, File: m.file}
	if bci >= 0 {
		f.Line = m.line(bci, c.l.scopes.exclusion)
	}
	return f, nil
}

// CodeHeap is one heap of a JVM's code cache: its reserved code memory
// [Low, High) and its segment map, one byte per 2^SegmentShift bytes of
// code (0 where a block starts, else how many segments back it does).
type CodeHeap struct {
	Low, High    uint64
	Segmap       uint64
	SegmentShift uint32
}

// Unwind is what the sampler needs to unwind a JVM's compiled frames: its
// code heaps, the size of the HeapBlock header before each CodeBlob, and
// the offsets in a CodeBlob of its size, frame size, frame-complete offset
// and code start.
type Unwind struct {
	Heaps []CodeHeap
	// InterpreterLow, InterpreterHigh: the template interpreter's code
	// (0, 0: unknown); ConstMethod: Method::_constMethod's offset and
	// ConstMethodSize sizeof(ConstMethod), after which the bytecodes are.
	InterpreterLow, InterpreterHigh uint64
	ConstMethod, ConstMethodSize    uint32
	BlockHeader                     uint32
	Size                            uint32
	FrameSize                       uint32
	FrameComplete                   uint32
	Code                            uint32
	CodeIsOffset                    bool
}

// Unwind returns how the JVM's compiled frames are unwound; ok is false
// when its description lacks a field it needs.
func (c *CodeCache) Unwind() (u Unwind, ok bool) {
	f := c.l.frames
	if !f.ok {
		return u, false
	}
	for _, h := range c.heap {
		u.Heaps = append(u.Heaps, CodeHeap{Low: h.low, High: h.high, Segmap: h.segmap, SegmentShift: uint32(h.segmentShift)})
	}
	u.BlockHeader = uint32(c.l.heapBlockSize)
	u.Size = uint32(c.l.blobSize)
	u.FrameSize = uint32(f.frameSize)
	u.FrameComplete = uint32(f.frameComplete)
	u.Code = uint32(f.code)
	u.CodeIsOffset = f.codeIsOffset
	if c.l.lines.ok {
		u.InterpreterLow, u.InterpreterHigh = c.interpLow, c.interpHigh
		u.ConstMethod, u.ConstMethodSize = uint32(c.l.methodConstMethod), uint32(c.l.lines.constMethodSize)
	}
	return u, true
}
