// Package perfmap reads the symbol files JIT runtimes write for perf:
// /tmp/perf-PID.map, one "START SIZE name" line per piece of generated code
// (Node.js --perf-basic-prof, Java's jcmd Compiler.perfmap, .NET with
// DOTNET_PerfMapEnabled=1, Python ≥ 3.12 -X perf, LuaJIT). The application
// writes the file, so everything in it is untrusted: lines are parsed
// defensively, the file is opened inside the process's own root without
// following a symlink out of it, and what is read and kept is bounded.
package perfmap

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits bound what one process's perf map may cost the agent.
type Limits struct {
	// MaxReadBytes is the most read from the file in one refresh. When the
	// file grew by more, only its last MaxReadBytes are read: runtimes
	// append, and the newest entries name the code that runs now.
	MaxReadBytes int64
	// MaxLineBytes: longer lines are rejected (a real entry is a name of a
	// few hundred bytes at most).
	MaxLineBytes int
	// MaxSymbols bounds the entries kept; past it the oldest are dropped
	// and counted.
	MaxSymbols int
	// MaxNameBytes: longer names are cut (and marked with "…").
	MaxNameBytes int
}

// DefaultLimits suit a busy Node.js or Java service: V8's map of a
// long-running server holds tens of thousands of live entries.
var DefaultLimits = Limits{
	MaxReadBytes: 32 << 20,
	MaxLineBytes: 4096,
	MaxSymbols:   500_000,
	MaxNameBytes: 512,
}

// Symbol is one entry: generated code at [Start, End) and the name the
// runtime gave it.
type Symbol struct {
	Start, End uint64
	Name       string
}

// ParseLine parses one perf-map line: "START SIZE name", START and SIZE in
// hex with or without "0x", the name being the rest of the line (it may
// hold spaces). Names are made valid UTF-8 without control characters.
func ParseLine(line []byte, maxName int) (Symbol, error) {
	line = bytes.TrimRight(line, "\r\n")
	startF, rest, ok := cutField(line)
	if !ok {
		return Symbol{}, fmt.Errorf("want START SIZE NAME, got %q", clip(line))
	}
	sizeF, name, ok := cutField(rest)
	if !ok {
		return Symbol{}, fmt.Errorf("want START SIZE NAME, got %q", clip(line))
	}
	start, err := parseHex(startF)
	if err != nil {
		return Symbol{}, fmt.Errorf("start address: %w", err)
	}
	size, err := parseHex(sizeF)
	if err != nil {
		return Symbol{}, fmt.Errorf("size: %w", err)
	}
	if size == 0 {
		return Symbol{}, fmt.Errorf("empty range at %#x", start)
	}
	end := start + size
	if end < start {
		return Symbol{}, fmt.Errorf("range %#x+%#x overflows", start, size)
	}
	name = bytes.TrimSpace(name)
	if len(name) == 0 {
		return Symbol{}, fmt.Errorf("no name for %#x", start)
	}
	return Symbol{Start: start, End: end, Name: cleanName(name, maxName)}, nil
}

// cutField splits off the first space-separated field of s.
func cutField(s []byte) (field, rest []byte, ok bool) {
	s = bytes.TrimLeft(s, " \t")
	i := bytes.IndexAny(s, " \t")
	if i <= 0 {
		return nil, nil, false
	}
	return s[:i], s[i+1:], true
}

func parseHex(b []byte) (uint64, error) {
	s := string(b)
	s = strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if s == "" || len(s) > 16 {
		return 0, fmt.Errorf("bad hex number %q", clip(b))
	}
	return strconv.ParseUint(s, 16, 64)
}

// cleanName makes name safe to carry into profiles and terminals: valid
// UTF-8, control characters replaced, at most maxName bytes.
func cleanName(name []byte, maxName int) string {
	cut := false
	if maxName > 0 && len(name) > maxName {
		name, cut = name[:maxName], true
	}
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(string(name), "?"))
	if cut {
		s += "…"
	}
	return s
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// table holds symbols sorted by Start, never overlapping.
type table []Symbol

// lookup returns the symbol whose range holds addr.
func (t table) lookup(addr uint64) (Symbol, bool) {
	i, _ := slices.BinarySearchFunc(t, addr, func(s Symbol, a uint64) int {
		switch {
		case s.End <= a:
			return -1
		case s.Start > a:
			return 1
		}
		return 0
	})
	if i < len(t) && t[i].Start <= addr && addr < t[i].End {
		return t[i], true
	}
	return Symbol{}, false
}

// merge adds newer symbols (in file order) to t. A runtime that frees code
// and reuses the memory writes a new entry over the old one: when two
// entries overlap, the newer wins and the older is dropped (it names code
// that no longer exists). At most max symbols are kept, the newest; it
// returns how many were dropped for want of room.
func (t table) merge(newer []Symbol, max int) (table, int) {
	type seqSym struct {
		Symbol
		seq int
	}
	all := make([]seqSym, 0, len(t)+len(newer))
	for i, s := range t {
		all = append(all, seqSym{s, i})
	}
	for i, s := range newer {
		all = append(all, seqSym{s, len(t) + i})
	}
	// Older entries in t have lower seq than every newer one; among t,
	// which never overlaps, the order does not matter.
	slices.SortStableFunc(all, func(a, b seqSym) int { return cmp.Compare(a.Start, b.Start) })
	kept := make([]seqSym, 0, len(all))
	for _, s := range all {
		drop := false
		// kept is sorted and disjoint, so only a run at its end can
		// overlap s (whose Start is the largest so far).
		for len(kept) > 0 && kept[len(kept)-1].End > s.Start {
			if kept[len(kept)-1].seq > s.seq {
				drop = true
				break
			}
			kept = kept[:len(kept)-1]
		}
		if !drop {
			kept = append(kept, s)
		}
	}
	dropped := 0
	if max > 0 && len(kept) > max {
		// Keep the newest max entries.
		bySeq := slices.Clone(kept)
		slices.SortFunc(bySeq, func(a, b seqSym) int { return b.seq - a.seq })
		cutoff := bySeq[max-1].seq
		n := 0
		for _, s := range kept {
			if s.seq >= cutoff {
				kept[n] = s
				n++
			} else {
				dropped++
			}
		}
		kept = kept[:n]
	}
	out := make(table, len(kept))
	for i, s := range kept {
		out[i] = s.Symbol
	}
	return out, dropped
}
