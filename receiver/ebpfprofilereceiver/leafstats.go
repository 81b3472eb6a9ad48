package ebpfprofilereceiver

import "github.com/hotpath-dev/hotpath/internal/symbolize"

// leafStats counts user-stack samples by what leaf-caller recovery did
// (README: "Unwinding").
type leafStats struct {
	Recovered    uint64 // the leaf's caller was missing and was inserted
	Framed       uint64 // the leaf had its frame: nothing was missing
	Present      uint64 // [SP] held the return address, already frame 1
	NoUnwindInfo uint64 // the leaf's binary has no unwind info at its PC
	BadReturn    uint64 // the word at SP points into no executable mapping
	NoWord       uint64 // the word at SP could not be read
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
	}
}
