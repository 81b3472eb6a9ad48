package hotspot

// HotSpot's compiled code (C2's, C1's, the runtime stubs') keeps no frame
// pointer unless the JVM runs with -XX:+PreserveFramePointer, and it has
// no unwind tables. Each CodeBlob records the size of its frame instead,
// and where in its code the frame is complete; HotSpot walks its own
// stacks with them (frame::sender_for_compiled_frame). The sampler's
// in-kernel walk does the same with what Unwind gives it.

// frameLayout is where a CodeBlob keeps what unwinding its frame needs.
type frameLayout struct {
	ok            bool
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
	return l
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
	Heaps         []CodeHeap
	BlockHeader   uint32
	Size          uint32
	FrameSize     uint32
	FrameComplete uint32
	Code          uint32
	CodeIsOffset  bool
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
	return u, true
}
