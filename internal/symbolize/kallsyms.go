package symbolize

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Kallsyms is the kernel's text symbol table (vmlinux and loaded modules,
// including BPF programs), packed like SymbolTable: sorted addresses, offsets
// into one name blob, and a module index per symbol.
type Kallsyms struct {
	addrs    []uint64
	nameOffs []uint32 // len(addrs)+1
	names    string
	mods     []uint16 // index into modNames; 0 is vmlinux
	modNames []string
}

// ErrKallsymsHidden means /proc/kallsyms lists every address as 0: the kernel
// hides them (kernel.kptr_restrict) from readers without CAP_SYSLOG.
var ErrKallsymsHidden = errors.New("kallsyms addresses are all 0: kernel.kptr_restrict hides them; the agent needs CAP_SYSLOG (or kptr_restrict=0)")

// maxKernelSymbolSpan bounds how far past a symbol's start an address may be
// and still count as inside it: kallsyms has no sizes, and an address past the
// end of kernel text would otherwise resolve to the last function before it.
const maxKernelSymbolSpan = 1 << 20

// LoadKallsyms reads a kallsyms file (normally /proc/kallsyms).
func LoadKallsyms(path string) (*Kallsyms, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load kallsyms: %w", err)
	}
	defer f.Close()

	type entry struct {
		addr      uint64
		off, size uint32
		mod       uint16
	}
	var (
		entries []entry
		blob    []byte
		seen    int
		modIdx  = map[string]uint16{"": 0}
		k       = &Kallsyms{modNames: []string{""}}
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// "ffffffff816b89f0 T vfs_read" or "... t nft_do_chain\t[nf_tables]"
		line := sc.Bytes()
		sp1 := bytes.IndexByte(line, ' ')
		if sp1 < 0 || sp1+3 > len(line) || line[sp1+2] != ' ' {
			continue
		}
		seen++
		if t := line[sp1+1]; t != 't' && t != 'T' {
			continue
		}
		addr, err := strconv.ParseUint(string(line[:sp1]), 16, 64)
		if err != nil || addr == 0 {
			continue
		}
		rest := line[sp1+3:]
		name, mod := rest, []byte(nil)
		if i := bytes.IndexAny(rest, "\t "); i >= 0 {
			name = rest[:i]
			mod = bytes.Trim(rest[i:], "\t []")
		}
		// __pfx_ symbols are the padding in front of every function
		// (CONFIG_FUNCTION_PADDING); they halve the table and never run.
		if len(name) == 0 || bytes.HasPrefix(name, []byte("__pfx_")) {
			continue
		}
		mi, ok := modIdx[string(mod)]
		if !ok {
			mi = uint16(len(k.modNames))
			modIdx[string(mod)] = mi
			k.modNames = append(k.modNames, string(mod))
		}
		entries = append(entries, entry{addr: addr, off: uint32(len(blob)), size: uint32(len(name)), mod: mi})
		blob = append(blob, name...)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(entries) == 0 {
		if seen > 0 {
			return nil, fmt.Errorf("load kallsyms from %s: %w", path, ErrKallsymsHidden)
		}
		return nil, fmt.Errorf("load kallsyms from %s: no text symbols", path)
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		switch {
		case a.addr < b.addr:
			return -1
		case a.addr > b.addr:
			return 1
		}
		return 0
	})
	// Aliases share an address; keep the first listed.
	entries = slices.CompactFunc(entries, func(a, b entry) bool { return a.addr == b.addr })
	var sb strings.Builder
	sb.Grow(len(blob))
	k.addrs = make([]uint64, len(entries))
	k.nameOffs = make([]uint32, len(entries)+1)
	k.mods = make([]uint16, len(entries))
	for i, e := range entries {
		k.addrs[i] = e.addr
		k.mods[i] = e.mod
		k.nameOffs[i] = uint32(sb.Len())
		sb.Write(blob[e.off : e.off+e.size])
	}
	k.nameOffs[len(entries)] = uint32(sb.Len())
	k.names = sb.String()
	return k, nil
}

// Lookup returns the function containing addr and its module ("" for
// vmlinux, else the module name such as "nf_tables" or "bpf").
func (k *Kallsyms) Lookup(addr uint64) (name, module string, ok bool) {
	i, found := slices.BinarySearch(k.addrs, addr)
	if !found {
		i--
	}
	if i < 0 || addr-k.addrs[i] >= maxKernelSymbolSpan {
		return "", "", false
	}
	return k.names[k.nameOffs[i]:k.nameOffs[i+1]], k.modNames[k.mods[i]], true
}

// Symbols is the number of text symbols held.
func (k *Kallsyms) Symbols() int { return len(k.addrs) }

// Size is the heap footprint in bytes.
func (k *Kallsyms) Size() int {
	n := len(k.addrs)*8 + len(k.nameOffs)*4 + len(k.mods)*2 + len(k.names)
	for _, m := range k.modNames {
		n += len(m) + 16
	}
	return n
}
