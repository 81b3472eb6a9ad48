// Package ehframetest holds what the .eh_frame tests share: a C program
// whose call frame information exercises every rule gcc emits, a gcc
// driver, a section reader and a hand assembler for sections gcc would
// never produce.
package ehframetest

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Program has leaves (rsp+8), pushes with early returns
// (remember/restore_state), a large frame, alloca (rbp-based CFA), a
// stack-realigning prologue with alloca (CFA from r10, then by expression;
// rbp by expression), recursion, a noreturn call and calls through the PLT.
const Program = `
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <alloca.h>
__attribute__((noinline)) long leaf(long x) { long s = 0; for (long i = 0; i < x; i++) s += i * i ^ x; return s; }
__attribute__((noinline)) long withpush(long a, long b, long c) {
	long r = leaf(a) + leaf(b);
	if (r & 1) return r + leaf(c);
	return r * 3 + c;
}
__attribute__((noinline)) long withalloca(long n) {
	char *p = alloca(n);
	for (long i = 0; i < n; i++) p[i] = i;
	return p[n / 2] + leaf(n);
}
__attribute__((noinline)) long manyregs(long *v, long n) {
	long a = v[0], b = v[1], c = v[2], d = v[3], e = v[4], f = v[5];
	for (long i = 0; i < n; i++) { a += leaf(b); b ^= leaf(c); c += leaf(d) * e; d -= leaf(f); e += a; f ^= b; }
	return a + b + c + d + e + f;
}
__attribute__((noinline)) long bigframe(int n) {
	char buf[8192];
	memset(buf, n, sizeof buf);
	snprintf(buf, 64, "%d", n);
	return strlen(buf) + buf[4000];
}
__attribute__((noinline)) long aligned(long n) {
	_Alignas(64) char buf[256];
	char *p = alloca(n + 1);
	for (long i = 0; i < 256; i++) buf[i] = (char)(i * n);
	p[0] = 1;
	return leaf(buf[n & 255]) + buf[(n + 7) & 255] + p[n / 2];
}
__attribute__((noinline, noreturn)) void die(const char *m) { fputs(m, stderr); exit(2); }
__attribute__((noinline)) long recurse(long n) {
	if (n < 0) die("negative");
	if (n <= 1) return 1;
	return n * recurse(n - 1) + leaf(n);
}
int main(int argc, char **argv) {
	long v[6] = {argc, 2, 3, 4, 5, 6};
	(void)argv;
	printf("%ld\n", withpush(argc, 2, 3) + withalloca(argc * 100) + manyregs(v, argc) +
		bigframe(argc) + aligned(argc) + recurse(argc));
	return 0;
}
`

// BuildC compiles src with gcc and flags into a temporary directory.
func BuildC(t testing.TB, src string, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	c := filepath.Join(dir, "prog.c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "prog")
	args := append(append([]string{}, flags...), "-o", bin, c)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, out)
	}
	return bin
}

// Section returns the .eh_frame of the ELF file at path and its address.
func Section(t testing.TB, path string) ([]byte, uint64) {
	t.Helper()
	ef, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ef.Close()
	sec := ef.Section(".eh_frame")
	if sec == nil {
		t.Fatalf("%s has no .eh_frame", path)
		return nil, 0 // not reached; staticcheck cannot know that TB.Fatalf stops
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	return data, sec.Addr
}

// FDE is one FDE of a hand-built section: [Lo, Lo+N), instructions Ins.
type FDE struct {
	Lo, N uint64
	Ins   []byte
}

// CIEDefault is the initial instructions of an x86-64 CIE as gcc emits
// them: def_cfa rsp+8, return address at cfa-8.
var CIEDefault = []byte{0x0c, 0x07, 0x08, 0x90, 0x01}

// PLTExpr is the CFA expression binutils emits for .plt entries (N = 11),
// without the DW_CFA_def_cfa_expression opcode and length.
var PLTExpr = []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22}

// Assemble builds an .eh_frame loaded at addr: one CIE (version 1, "zR"
// with pcrel sdata4 pointers, code alignment 1, data alignment -8, return
// address column 16, initial instructions cieIns), the FDEs in the order
// given, and a zero terminator.
func Assemble(addr uint64, cieIns []byte, fdes ...FDE) []byte {
	return AssembleAugmented(addr, "", cieIns, fdes...)
}

// AssembleAugmented is Assemble with more augmentation letters after "zR"
// that carry no data ("S": the FDEs are signal trampolines).
func AssembleAugmented(addr uint64, more string, cieIns []byte, fdes ...FDE) []byte {
	le32 := func(b []byte, v uint32) []byte { return binary.LittleEndian.AppendUint32(b, v) }
	cieBody := append([]byte{0, 0, 0, 0, 1, 'z', 'R'}, more...)
	cieBody = append(cieBody, 0, 1, 0x78, 16, 1, 0x1b)
	cieBody = append(cieBody, cieIns...)
	out := le32(nil, uint32(len(cieBody)))
	out = append(out, cieBody...)
	for _, f := range fdes {
		start := len(out)
		out = le32(out, 0) // length, patched below
		out = le32(out, uint32(len(out)))
		out = le32(out, uint32(f.Lo-(addr+uint64(len(out)))))
		out = le32(out, uint32(f.N))
		out = append(out, 0) // augmentation data length
		out = append(out, f.Ins...)
		binary.LittleEndian.PutUint32(out[start:], uint32(len(out)-start-4))
	}
	return le32(out, 0)
}
