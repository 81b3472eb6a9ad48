package hotspot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
)

// A compiled method's code holds the methods the JIT inlined into it. At
// each call site and safepoint the nmethod records a PcDesc (the code
// offset, and where its scope is described); a scope is three numbers in
// HotSpot's compressed stream (UNSIGNED5): where the enclosing scope is
// described (0: none), the method (an index into the nmethod's metadata
// array of Method*, from 1) and the bytecode index. The scope at a PcDesc is
// the innermost method; following the enclosing scopes ends at the
// nmethod's own method. This is what HotSpot's own stack walks read
// (ScopeDesc, libjvm_db.c's scopeDesc_chain), and without it a compiled
// method's time includes everything inlined into it under its name alone.

// scopeLayout is where an nmethod keeps its PcDescs, scopes and metadata:
// JDK 9 to 22 in the nmethod's own memory after its code, JDK 25 and
// later in its immutable data (PcDescs and scopes) and mutable data
// (metadata, after the relocations). JDK 23 and 24 kept the metadata after
// the code at a 16-bit offset: not read (their compiled methods are named
// without their inlined methods).
type scopeLayout struct {
	ok                bool
	exclusion         byte // UNSIGNED5's excluded low byte values: 1 from JDK 20, 0 before
	codeBegin         uint64
	codeBeginIsOffset bool // JDK 23+: CodeBlob::_code_offset from the blob, before a pointer
	compileID         uint64
	pcDescSize        uint64
	pcOffset, pcScope uint64
	immutable         bool
	// JDK 9-22: offsets from the nmethod, and a pointer to its scopes.
	metadataOffset, scopesDataBegin, scopesPcsOffset, dependenciesOffset uint64
	// JDK 25+.
	mutableData, relocationSize, mutableDataSize   uint64
	immutableData, immutableDataSize, scopesDataAt uint64
}

// Bounds on one nmethod's scope data and the chain read from it.
const (
	maxScopeBytes    = 1 << 20 // one nmethod's PcDescs, scopes or metadata
	maxInlinedScopes = 32
)

// ScopeBudget bounds the bytes of nmethod scopes that all the CodeCaches
// sharing it keep between lookups: a node runs many JVMs, and the agent's
// memory must not grow with them. A JVM whose scopes would go over it
// drops its own and starts again; one that still does not fit reads them
// at each lookup.
type ScopeBudget struct {
	limit int64
	used  atomic.Int64
}

// NewScopeBudget returns a budget of limit bytes.
func NewScopeBudget(limit int64) *ScopeBudget { return &ScopeBudget{limit: limit} }

// take reserves n bytes, if they fit.
func (b *ScopeBudget) take(n int) bool {
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

func (b *ScopeBudget) give(n int) { b.used.Add(-int64(n)) }

// Used is the bytes kept now.
func (b *ScopeBudget) Used() int64 { return b.used.Load() }

// dropScopes gives back every nmethod's scopes c keeps.
func (c *CodeCache) dropScopes() {
	clear(c.scopeCache)
	c.budget.give(c.scopeBytes)
	c.scopeBytes = 0
}

// readScopeLayout picks the fields of one of the two layouts from the
// JVM's description; a JVM that has neither gets names without inlined
// methods.
func readScopeLayout(fields, sizes map[string]uint64, major uint32) scopeLayout {
	var s scopeLayout
	have := func(name string, dst *uint64) bool {
		v, ok := fields[name]
		*dst = v
		return ok
	}
	if major >= 20 {
		s.exclusion = 1
	}
	var ok bool
	if s.pcDescSize, ok = sizes["PcDesc"]; !ok || s.pcDescSize < 8 || s.pcDescSize > 64 {
		return s
	}
	if !have("PcDesc::_pc_offset", &s.pcOffset) || !have("PcDesc::_scope_decode_offset", &s.pcScope) ||
		!have("nmethod::_compile_id", &s.compileID) || !have("nmethod::_scopes_pcs_offset", &s.scopesPcsOffset) {
		return s
	}
	if have("CodeBlob::_code_offset", &s.codeBegin) {
		s.codeBeginIsOffset = true
	} else if !have("CodeBlob::_code_begin", &s.codeBegin) {
		return s
	}
	if have("nmethod::_immutable_data", &s.immutableData) {
		s.immutable = true
		s.ok = have("nmethod::_immutable_data_size", &s.immutableDataSize) && have("nmethod::_scopes_data_offset", &s.scopesDataAt) &&
			have("CodeBlob::_mutable_data", &s.mutableData) && have("CodeBlob::_relocation_size", &s.relocationSize) &&
			have("CodeBlob::_mutable_data_size", &s.mutableDataSize)
		return s
	}
	s.ok = have("nmethod::_metadata_offset", &s.metadataOffset) && have("nmethod::_dependencies_offset", &s.dependenciesOffset) &&
		have("CompiledMethod::_scopes_data_begin", &s.scopesDataBegin)
	return s
}

// headerEnd is the bytes of an nmethod the layout reads.
func (s *scopeLayout) headerEnd() uint64 {
	if !s.ok {
		return 0
	}
	return max(s.codeBegin, s.compileID, s.scopesPcsOffset, s.metadataOffset, s.scopesDataBegin, s.dependenciesOffset,
		s.mutableData, s.relocationSize, s.mutableDataSize, s.immutableData, s.immutableDataSize, s.scopesDataAt) + 8
}

// nmethodScopes is what one nmethod says of its inlining.
type nmethodScopes struct {
	compileID uint32
	codeBegin uint64
	pcs       []byte // PcDescs
	scopes    []byte
	metadata  []byte // Method* (and other metadata), 8 bytes each
}

func (n *nmethodScopes) bytes() int { return len(n.pcs) + len(n.scopes) + len(n.metadata) }

// inlined returns the Method* and bytecode index of the scopes at pc in
// the nmethod at blob (its first hdr bytes read), innermost first and
// ending with method, the nmethod's own: just method (no bytecode index)
// where the nmethod records no scope there.
// scopeAt is a method at a bytecode index (noBCI: not known).
type scopeAt struct {
	method uint64
	bci    int
}

const noBCI = -2

func (c *CodeCache) inlined(blob uint64, hdr []byte, pc, method uint64) ([]scopeAt, error) {
	s := &c.l.scopes
	alone := []scopeAt{{method: method, bci: noBCI}}
	if !s.ok {
		return alone, nil
	}
	id := binary.LittleEndian.Uint32(hdr[s.compileID:])
	n := c.scopeCache[blob]
	if n == nil || n.compileID != id {
		var err error
		if n, err = c.readScopes(blob, hdr); err != nil {
			return nil, err
		}
		fits := c.budget.take(n.bytes())
		if !fits {
			c.dropScopes()
			fits = c.budget.take(n.bytes())
		}
		if fits {
			c.scopeCache[blob] = n
			c.scopeBytes += n.bytes()
		}
	}
	if pc < n.codeBegin {
		return alone, nil
	}
	// HotSpot's approximate match (PcDescContainer): the first PcDesc at
	// or after the offset. A caller's frame is at its return address less
	// one, so its call's PcDesc (at the return address) is that one; a
	// leaf in a loop gets the loop's next safepoint, in the same scope.
	delta := int64(pc - n.codeBegin)
	scope := uint64(0)
	for i := uint64(0); i+s.pcDescSize <= uint64(len(n.pcs)); i += s.pcDescSize {
		if int64(int32(binary.LittleEndian.Uint32(n.pcs[i+s.pcOffset:]))) >= delta {
			scope = uint64(binary.LittleEndian.Uint32(n.pcs[i+s.pcScope:]))
			break
		}
	}
	var chain []scopeAt
	// Each enclosing scope is described before the one it encloses: the
	// offsets fall, which also ends any loop in a corrupt stream.
	for limit := uint64(len(n.scopes)); scope != 0 && scope < limit && len(chain) < maxInlinedScopes; {
		r := unsigned5{b: n.scopes[scope:], x: s.exclusion}
		sender, idx := r.next(), r.next()
		// The bytecode index plus one (InvocationEntryBci, -1, is 0).
		bci := int(r.next()) - 1
		if r.err != nil {
			return nil, fmt.Errorf("nmethod %#x: scope at %d: %w", blob, scope, r.err)
		}
		if idx == 0 || 8*uint64(idx) > uint64(len(n.metadata)) {
			return nil, fmt.Errorf("nmethod %#x: scope at %d: method %d of %d", blob, scope, idx, len(n.metadata)/8)
		}
		chain = append(chain, scopeAt{binary.LittleEndian.Uint64(n.metadata[8*(idx-1):]), bci})
		limit, scope = scope, uint64(sender)
	}
	// The outermost scope is the nmethod's own method; a chain that ends
	// elsewhere was not read right, and its method alone is what is sure.
	if len(chain) == 0 || chain[len(chain)-1].method != method {
		return alone, nil
	}
	return chain, nil
}

// readScopes reads the PcDescs, scopes and metadata of the nmethod at
// blob.
func (c *CodeCache) readScopes(blob uint64, hdr []byte) (*nmethodScopes, error) {
	s := &c.l.scopes
	u32 := func(off uint64) uint64 { return uint64(binary.LittleEndian.Uint32(hdr[off:])) }
	n := &nmethodScopes{compileID: binary.LittleEndian.Uint32(hdr[s.compileID:])}
	if s.codeBeginIsOffset {
		n.codeBegin = blob + u32(s.codeBegin)
	} else {
		n.codeBegin = le(hdr, s.codeBegin)
	}
	type span struct{ start, end uint64 }
	var pcs, scopes, metadata span
	if s.immutable {
		imm := le(hdr, s.immutableData)
		pcs = span{imm + u32(s.scopesPcsOffset), imm + u32(s.scopesDataAt)}
		scopes = span{pcs.end, imm + u32(s.immutableDataSize)}
		mut := le(hdr, s.mutableData)
		metadata = span{mut + u32(s.relocationSize), mut + u32(s.mutableDataSize)}
	} else {
		metadata = span{blob + u32(s.metadataOffset), le(hdr, s.scopesDataBegin)}
		scopes = span{metadata.end, blob + u32(s.scopesPcsOffset)}
		pcs = span{scopes.end, blob + u32(s.dependenciesOffset)}
	}
	for _, sp := range []struct {
		span
		dst *[]byte
	}{{pcs, &n.pcs}, {scopes, &n.scopes}, {metadata, &n.metadata}} {
		if sp.end < sp.start || sp.end-sp.start > maxScopeBytes {
			return nil, fmt.Errorf("nmethod %#x: implausible debug information [%#x, %#x)", blob, sp.start, sp.end)
		}
		*sp.dst = make([]byte, sp.end-sp.start)
		if err := c.read(sp.start, *sp.dst); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// unsigned5 reads HotSpot's compressed stream (the Pack200 UNSIGNED5
// coding: up to five bytes, six bits more in each after the first while a
// byte is 192 or more; from JDK 20 byte values below x are excluded, so
// that no encoded number has a zero byte).
type unsigned5 struct {
	b   []byte
	x   byte
	err error
}

var errUnsigned5 = errors.New("bad compressed number")

func (r *unsigned5) next() uint32 {
	if r.err != nil {
		return 0
	}
	var sum uint32
	for i := range 5 {
		if len(r.b) == 0 || r.b[0] < r.x {
			r.err = errUnsigned5
			return 0
		}
		raw := r.b[0]
		r.b = r.b[1:]
		sum += uint32(raw-r.x) << (6 * i)
		// The last byte of a number is below 192 (L + x, L being
		// 192 - x), or the fifth.
		if raw < 192 {
			break
		}
	}
	return sum
}
