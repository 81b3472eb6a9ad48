package symbolize

import (
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// memoGeneration bounds each of the memo's two generations, in addresses.
// An agent's interval on a busy node holds a few thousand distinct call
// sites; two generations keep those of the last intervals. At about 200
// bytes an address (its map slot, its symbols, its names interned; measured
// on 12,000 random addresses in a C program, libc and gofmt) the memo holds
// at most ~1.6 MB.
const memoGeneration = 4096

// memoGenerationBytes bounds each generation's heap too: an address of
// C++ or Rust code built with -g resolves to a chain of inlined functions
// (up to 20 deep in a Rust program's parsing loop), and 4,096 of those
// would hold several MB.
const memoGenerationBytes = 800 << 10

// symbolMemo remembers what the addresses looked up lately resolved to, by
// table and address. A node's intervals sample the same call sites again
// and again, and resolving one costs far more than the map lookup: a Go
// address decodes the function's pc-value tables from the file mapping
// (which Trim hands back to the page cache after each interval, so they
// fault in again), a C++ name is demangled, a DWARF line table is walked.
//
// Two generations bound its memory: when the current one is full it becomes
// the previous one and the older is dropped; an address found in the
// previous generation moves to the current one. Keys are table serials
// rather than pointers, so the memo never keeps an evicted table alive, and
// the strings it holds are its own (interned per generation), never slices
// of a table's names.
type symbolMemo struct {
	mu        sync.Mutex
	cur, prev memoGen
	hits      uint64 // addresses answered from the memo
}

type memoKey struct {
	table uint64 // SymbolTable.serial
	addr  uint64 // ELF virtual address in that table
}

type memoGen struct {
	syms    map[memoKey][]Symbol // nil: the address resolved to nothing
	strings map[string]string    // interned function and file names
	bytes   int                  // heap held, about (memoKeyBytes, memoSymbolBytes, names)
}

// What the memo's heap is counted in: an address's map slot (key, slice
// header and the map's own overhead), each of its symbols, and each
// interned name's slot besides its bytes.
const (
	memoKeyBytes    = 64
	memoSymbolBytes = int(unsafe.Sizeof(Symbol{}))
	memoNameBytes   = 48
)

// tableSerials numbers tables for the memo's keys.
var tableSerials atomic.Uint64

// get returns what (table, addr) resolved to when it is remembered.
func (m *symbolMemo) get(table, addr uint64) ([]Symbol, bool) {
	k := memoKey{table, addr}
	m.mu.Lock()
	defer m.mu.Unlock()
	if syms, ok := m.cur.syms[k]; ok {
		m.hits++
		return syms, true
	}
	syms, ok := m.prev.syms[k]
	if !ok {
		return nil, false
	}
	m.hits++
	m.promoteLocked(k, syms)
	return syms, true
}

// put remembers what (table, addr) resolved to and returns the memo's copy
// of syms.
func (m *symbolMemo) put(table, addr uint64, syms []Symbol) []Symbol {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roomLocked()
	var own []Symbol
	if len(syms) > 0 {
		own = make([]Symbol, len(syms))
		for i, s := range syms {
			s.Function, s.File = m.cur.intern(s.Function), m.cur.intern(s.File)
			own[i] = s
		}
	}
	m.storeLocked(memoKey{table, addr}, own)
	return own
}

// promoteLocked moves syms, found in the previous generation, to the
// current one, with their names (already the memo's own).
func (m *symbolMemo) promoteLocked(k memoKey, syms []Symbol) {
	m.roomLocked()
	for _, s := range syms {
		for _, name := range [2]string{s.Function, s.File} {
			if _, ok := m.cur.strings[name]; !ok && name != "" {
				m.cur.hold(name)
			}
		}
	}
	m.storeLocked(k, syms)
}

// storeLocked puts syms, whose names the current generation holds, in it.
func (m *symbolMemo) storeLocked(k memoKey, syms []Symbol) {
	m.cur.syms[k] = syms
	m.cur.bytes += memoKeyBytes + len(syms)*memoSymbolBytes
}

// roomLocked makes sure the current generation can take one more address,
// starting a new one when it is full.
func (m *symbolMemo) roomLocked() {
	if len(m.cur.syms) >= memoGeneration || m.cur.bytes >= memoGenerationBytes {
		m.prev, m.cur = m.cur, memoGen{}
	}
	if m.cur.syms == nil {
		m.cur = memoGen{syms: make(map[memoKey][]Symbol, 256), strings: make(map[string]string, 256)}
	}
}

// intern returns s as held by g: strings from a table's names (a substring
// of its heap copy, or a copy per lookup from its file mapping) become one
// string per generation.
func (g *memoGen) intern(s string) string {
	if s == "" {
		return ""
	}
	if own, ok := g.strings[s]; ok {
		return own
	}
	own := strings.Clone(s)
	g.hold(own)
	return own
}

// hold adds own, a string the memo owns, to g's names.
func (g *memoGen) hold(own string) {
	g.strings[own] = own
	g.bytes += memoNameBytes + len(own)
}

// len is the number of addresses remembered.
func (m *symbolMemo) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cur.syms) + len(m.prev.syms)
}

// size is the heap the memo holds, about.
func (m *symbolMemo) size() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur.bytes + m.prev.bytes
}
