package symbolize

// LeafResult is what RecoverLeafCaller found for one stack.
type LeafResult uint8

const (
	// LeafNoWord: there was no word at the stack pointer to use (not
	// captured or unreadable), or the stack is empty.
	LeafNoWord LeafResult = iota
	// LeafFramed: the leaf had set up its frame; the chain is complete.
	LeafFramed
	// LeafRecovered: the caller was missing and has been inserted.
	LeafRecovered
	// LeafPresent: the return address was at [SP] but frame 1 already is
	// that caller (nothing to insert).
	LeafPresent
	// LeafNoUnwindInfo: the leaf's binary has no unwind info for its PC
	// (or could not be read); the stack is left as sampled.
	LeafNoUnwindInfo
	// LeafBadReturn: the unwind info says [SP] holds the return address,
	// but the word points into no executable mapping; left as sampled.
	LeafBadReturn
)

// RecoverLeafCaller fixes the frame-pointer blind spot at the leaf. While
// the sampled PC is in a function that has no frame (a frameless leaf, or
// before the prologue pushed one), the frame pointer still names the
// caller's frame, so a frame-pointer unwind goes straight from the leaf to
// the caller's caller. The return address into the missing caller is then
// the word at the stack pointer (leafRet, captured by the sampler). When the
// leaf binary's unwind info says so for frame 0's PC, the returned stack
// has leafRet inserted as frame 1; otherwise it is stack itself. buf is
// reused for the result when it has room.
func (s *Symbolizer) RecoverLeafCaller(p *Process, stack []uint64, leafRet uint64, buf []uint64) ([]uint64, LeafResult) {
	if len(stack) == 0 || leafRet == 0 {
		return stack, LeafNoWord
	}
	pc := stack[0]
	i := p.find(pc)
	if i < 0 {
		return stack, LeafNoUnwindInfo
	}
	m := &p.Mappings[i]
	t := s.table(p, m)
	if t == nil {
		return stack, LeafNoUnwindInfo
	}
	va, ok := t.FileAddr(pc - m.Start + m.Offset)
	if !ok {
		return stack, LeafNoUnwindInfo
	}
	indexed := t.ehBytes.Load() != 0
	atSP, known := t.ReturnAddressAtSP(va)
	s.indexBuilt(p, m, t, indexed)
	switch {
	case !known:
		return stack, LeafNoUnwindInfo
	case !atSP:
		return stack, LeafFramed
	case len(stack) > 1 && stack[1] == leafRet:
		return stack, LeafPresent
	case p.find(leafRet-1) < 0:
		return stack, LeafBadReturn
	}
	out := append(buf[:0], pc, leafRet)
	return append(out, stack[1:]...), LeafRecovered
}
