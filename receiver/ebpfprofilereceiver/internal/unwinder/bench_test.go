//go:build linux && privileged

package unwinder

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/receiver/ebpfprofilereceiver/internal/sampler"
)

// chainC burns CPU 8 calls below main in code without frame pointers,
// half of the time inside glibc (qsort calling back).
const chainC = `#include <stdlib.h>
volatile unsigned long sink;
static int cmp(const void *a, const void *b) {
	unsigned long x = *(const unsigned long *)a;
	for (int i = 0; i < 50; i++) { x = x * 6364136223846793005UL + 1; __asm__ volatile("" : "+r"(x)); }
	return (int)(x & 3) - 1;
}
#define LEVEL(name, next) __attribute__((noinline)) unsigned long name(unsigned long x) { \
	volatile char b[32]; b[0] = (char)x; unsigned long r = next(x + b[0]); sink += b[31]; return r + 1; }
__attribute__((noinline)) unsigned long leaf(unsigned long x) {
	static unsigned long d[512];
	for (int i = 0; i < 512; i++) d[i] = x + i * 7919;
	qsort(d, 512, sizeof d[0], cmp);
	return d[0];
}
LEVEL(l6, leaf) LEVEL(l5, l6) LEVEL(l4, l5) LEVEL(l3, l4) LEVEL(l2, l3) LEVEL(l1, l2)
int main(void) { for (;;) sink += l1(sink); }
`

// BenchmarkUnwindCost measures what the DWARF unwinder costs in the
// kernel per sample, against frame pointers on the same stacks: two
// samplers side by side on the same CPUs at 2999 Hz, one frame-pointer
// only and one with tables for the workload (C without frame pointers plus
// glibc). Reports bpf-ns per run of each program and their ratio (idle-CPU
// runs included in both); ns/op is the 200 ms window and means nothing.
func BenchmarkUnwindCost(b *testing.B) {
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enable BPF run-time stats: %v", err)
	}
	defer stats.Close()
	dir := b.TempDir()
	src := filepath.Join(dir, "chain.c")
	if err := os.WriteFile(src, []byte(chainC), 0o644); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(dir, "chain")
	if out, err := exec.Command("gcc", "-O2", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-o", bin, src).CombinedOutput(); err != nil {
		b.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(50 * time.Millisecond) // the loader maps glibc

	open := func(dwarf bool) *sampler.Sampler {
		s, err := sampler.Open(sampler.Config{FrequencyHz: 2999, Interval: time.Second, DWARFUnwind: dwarf})
		if err != nil {
			b.Fatalf("open sampler (needs root): %v", err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	fp, dw := open(false), open(true)
	sym := symbolize.New(symbolize.Options{})
	p, err := sym.Snapshot(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	u := New(dw, sym, 64<<20, nil, zap.NewNop())
	if ok, err := u.Attach(p, nil); !ok || err != nil {
		b.Fatalf("Attach = %v, %v", ok, err)
	}

	var rt [2]time.Duration
	var runs, depth, stacks [2]uint64
	for b.Loop() {
		var rt0 [2]time.Duration
		var n0 [2]uint64
		for i, s := range []*sampler.Sampler{fp, dw} {
			rt0[i], n0[i], _ = s.ProgramStats()
		}
		time.Sleep(200 * time.Millisecond)
		for i, s := range []*sampler.Sampler{fp, dw} {
			r, n, err := s.ProgramStats()
			if err != nil {
				b.Fatal(err)
			}
			rt[i] += r - rt0[i]
			runs[i] += n - n0[i]
			batch, err := s.Drain()
			if err != nil {
				b.Fatal(err)
			}
			for _, smp := range batch.Samples {
				if smp.PID == uint32(cmd.Process.Pid) {
					depth[i] += uint64(len(smp.UserStack)) * smp.Count
					stacks[i] += smp.Count
				}
			}
		}
	}
	if runs[0] == 0 || runs[1] == 0 || stacks[0] == 0 || stacks[1] == 0 {
		b.Fatal("a sampling program never ran or never sampled the workload")
	}
	perFP := float64(rt[0].Nanoseconds()) / float64(runs[0])
	perDW := float64(rt[1].Nanoseconds()) / float64(runs[1])
	b.ReportMetric(perFP, "fp-bpf-ns/run")
	b.ReportMetric(perDW, "dwarf-bpf-ns/run")
	b.ReportMetric(perDW/perFP, "dwarf/fp")
	b.ReportMetric(float64(depth[0])/float64(stacks[0]), "fp-frames")
	b.ReportMetric(float64(depth[1])/float64(stacks[1]), "dwarf-frames")
}
