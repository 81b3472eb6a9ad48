package symbolize

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"slices"
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

// LoadKallsyms reads a kallsyms file (normally /proc/kallsyms). It reads the
// file twice, first to count, so the table is allocated at its final size:
// growing slices for ~65k symbols would leave several times the table's size
// as garbage in an agent that aims for a small RSS.
func LoadKallsyms(path string) (*Kallsyms, error) {
	var nsym, nbytes, seen int
	err := scanKallsyms(path, func(addr uint64, name, mod []byte) {
		nsym++
		nbytes += len(name)
	}, &seen)
	if err != nil {
		return nil, err
	}
	if nsym == 0 {
		if seen > 0 {
			return nil, fmt.Errorf("load kallsyms from %s: %w", path, ErrKallsymsHidden)
		}
		return nil, fmt.Errorf("load kallsyms from %s: no text symbols", path)
	}
	k := &Kallsyms{
		addrs:    make([]uint64, 0, nsym),
		nameOffs: make([]uint32, 0, nsym+1),
		mods:     make([]uint16, 0, nsym),
		modNames: []string{""},
	}
	modIdx := map[string]uint16{"": 0}
	var sb strings.Builder
	sb.Grow(nbytes)
	sorted := true
	err = scanKallsyms(path, func(addr uint64, name, mod []byte) {
		mi, ok := modIdx[string(mod)]
		if !ok {
			mi = uint16(len(k.modNames))
			modIdx[string(mod)] = mi
			k.modNames = append(k.modNames, string(mod))
		}
		if n := len(k.addrs); n > 0 && addr <= k.addrs[n-1] {
			if addr == k.addrs[n-1] {
				return // an alias: keep the first name listed
			}
			sorted = false
		}
		k.addrs = append(k.addrs, addr)
		k.mods = append(k.mods, mi)
		k.nameOffs = append(k.nameOffs, uint32(sb.Len()))
		sb.Write(name)
	}, &seen)
	if err != nil {
		return nil, err
	}
	k.nameOffs = append(k.nameOffs, uint32(sb.Len()))
	k.names = sb.String()
	if !sorted {
		k.sort()
	}
	return k, nil
}

// scanKallsyms calls fn for each text symbol; seen counts all symbol lines.
func scanKallsyms(path string, fn func(addr uint64, name, mod []byte), seen *int) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("load kallsyms: %w", err)
	}
	defer f.Close()
	*seen = 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		// "ffffffff816b89f0 T vfs_read" or "... t nft_do_chain\t[nf_tables]"
		line := sc.Bytes()
		sp1 := bytes.IndexByte(line, ' ')
		if sp1 < 0 || sp1+3 > len(line) || line[sp1+2] != ' ' {
			continue
		}
		*seen++
		if t := line[sp1+1]; t != 't' && t != 'T' {
			continue
		}
		addr, ok := parseHex(line[:sp1])
		if !ok || addr == 0 {
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
		fn(addr, name, mod)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// sort orders symbols by address (module symbols need not come in order),
// rebuilding the name blob in the new order; at one address the first
// listed symbol is kept.
func (k *Kallsyms) sort() {
	idx := make([]int32, len(k.addrs))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return cmp.Compare(k.addrs[a], k.addrs[b]) })
	addrs := make([]uint64, 0, len(idx))
	mods := make([]uint16, 0, len(idx))
	offs := make([]uint32, 0, len(idx)+1)
	var sb strings.Builder
	sb.Grow(len(k.names))
	for _, i := range idx {
		if n := len(addrs); n > 0 && addrs[n-1] == k.addrs[i] {
			continue
		}
		addrs = append(addrs, k.addrs[i])
		mods = append(mods, k.mods[i])
		offs = append(offs, uint32(sb.Len()))
		sb.WriteString(k.names[k.nameOffs[i]:k.nameOffs[i+1]])
	}
	k.addrs, k.mods, k.nameOffs = addrs, mods, append(offs, uint32(sb.Len()))
	k.names = sb.String()
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
