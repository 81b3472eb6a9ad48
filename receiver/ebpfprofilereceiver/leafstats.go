package ebpfprofilereceiver

import (
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// leafStats counts user-stack samples by what leaf-caller recovery did
// (README: "Unwinding").
type leafStats struct {
	Recovered    uint64 // the leaf's caller was missing and was inserted
	Framed       uint64 // the leaf had its frame: nothing was missing
	Present      uint64 // [SP] held the return address, already frame 1
	NoUnwindInfo uint64 // the leaf's binary has no unwind info at its PC
	BadReturn    uint64 // the word at SP points into no executable mapping
	NoWord       uint64 // the word at SP could not be read
	Table        uint64 // the kernel unwound the leaf with its table row: nothing to recover
}

func (l *leafStats) add(r symbolize.LeafResult, n uint64) {
	switch r {
	case symbolize.LeafRecovered:
		l.Recovered += n
	case symbolize.LeafFramed:
		l.Framed += n
	case symbolize.LeafPresent:
		l.Present += n
	case symbolize.LeafNoUnwindInfo:
		l.NoUnwindInfo += n
	case symbolize.LeafBadReturn:
		l.BadReturn += n
	default:
		l.NoWord += n
	}
}

// sub is l minus an earlier snapshot of it.
func (l leafStats) sub(before leafStats) leafStats {
	return leafStats{
		Recovered:    l.Recovered - before.Recovered,
		Framed:       l.Framed - before.Framed,
		Present:      l.Present - before.Present,
		NoUnwindInfo: l.NoUnwindInfo - before.NoUnwindInfo,
		BadReturn:    l.BadReturn - before.BadReturn,
		NoWord:       l.NoWord - before.NoWord,
		Table:        l.Table - before.Table,
	}
}

// endedEarlyStats counts samples whose user stack ended before the
// outermost frame, by reason.
type endedEarlyStats struct {
	Truncated, Unreadable, NoRule uint64
}

func (e *endedEarlyStats) add(end sampler.StackEnd, n uint64) {
	switch end {
	case sampler.StackTruncated:
		e.Truncated += n
	case sampler.StackUnreadable:
		e.Unreadable += n
	case sampler.StackInvalidRule:
		e.NoRule += n
	}
}

func (e endedEarlyStats) sub(before endedEarlyStats) endedEarlyStats {
	return endedEarlyStats{
		Truncated:  e.Truncated - before.Truncated,
		Unreadable: e.Unreadable - before.Unreadable,
		NoRule:     e.NoRule - before.NoRule,
	}
}
