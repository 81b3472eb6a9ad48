//go:build linux && privileged

package sampler

import (
	"bufio"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// leafSource burns CPU in hot_leaf, a leaf without a frame (built with
// -momit-leaf-frame-pointer), called by dispatch. It prints the runtime
// addresses of both and how long dispatch's code is.
const leafSource = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) unsigned long hot_leaf(unsigned long x) {
	for (int i = 0; i < 2000; i++) {
		x = x * 6364136223846793005UL + 1442695040888963407UL;
		__asm__ volatile("" : "+r"(x));
	}
	return x;
}

__attribute__((noinline)) unsigned long dispatch(int n, unsigned long x) {
	for (int i = 0; i < n; i++)
		x = hot_leaf(x);
	return x;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

volatile unsigned long sink;

int main(int argc, char **argv) {
	double end = now() + atof(argv[1]);
	printf("%p %p\n", (void *)hot_leaf, (void *)dispatch);
	fflush(stdout);
	while (now() < end)
		sink += dispatch(1000, sink);
	return 0;
}
`

// TestLeafReturnWord checks what leaf-caller recovery relies on: while the
// CPU is in a frameless leaf, the word the sampler reads at the user stack
// pointer is the return address into the leaf's caller.
func TestLeafReturnWord(t *testing.T) {
	bin := buildC(t, "leaf", leafSource, "-O2", "-fno-omit-frame-pointer", "-momit-leaf-frame-pointer")
	const hz = 199
	s := openSampler(t, Config{FrequencyHz: hz, Interval: 5 * time.Second})
	drain(t, s)

	cmd := exec.Command(bin, "1.5")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("read addresses: %v", err)
	}
	var leaf, disp uint64
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "0x%x 0x%x", &leaf, &disp); err != nil {
		t.Fatalf("parse %q: %v", line, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	b := drain(t, s)

	// hot_leaf and dispatch are each well under 256 bytes of code.
	leafEnd := leaf + 256
	if disp > leaf && disp < leafEnd {
		leafEnd = disp
	}
	var inLeaf, retInDispatch uint64
	for _, smp := range b.Samples {
		if smp.PID != uint32(cmd.Process.Pid) || len(smp.UserStack) == 0 {
			continue
		}
		if pc := smp.UserStack[0]; pc < leaf || pc >= leafEnd {
			continue
		}
		inLeaf += smp.Count
		if smp.UserLeafRet > disp && smp.UserLeafRet < disp+256 {
			retInDispatch += smp.Count
		}
	}
	if inLeaf < 20 {
		t.Fatalf("only %d samples in hot_leaf", inLeaf)
	}
	if retInDispatch < inLeaf*95/100 {
		t.Errorf("word at SP is a return address into dispatch in %d of %d hot_leaf samples", retInDispatch, inLeaf)
	}

	// How much the word splits keys (it is part of the stack hash): keys
	// that differ only in it, over the whole machine.
	type shape struct {
		pid, tid uint32
		user     string
		kernel   string
	}
	distinct := map[shape]bool{}
	for _, smp := range b.Samples {
		distinct[shape{smp.PID, smp.TID, fmt.Sprint(smp.UserStack), fmt.Sprint(slices.Clip(smp.KernelStack))}] = true
	}
	t.Logf("hot_leaf: %d samples, %d with the return address into dispatch; machine: %d keys, %d without the word at SP", inLeaf, retInDispatch, len(b.Samples), len(distinct))
}
