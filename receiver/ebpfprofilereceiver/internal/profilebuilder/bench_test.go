package profilebuilder

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
)

// BenchmarkInterval builds one interval the size the running agent drains on
// a busy 2-core node (make bench's agent phase: about 400 distinct stacks of
// 15 frames an interval): four processes, each a Go executable with a GNU
// and a Go build ID (where most frames are) and libc, and a fifth of the
// stacks entering the kernel. One op is New, every Add, and Profiles.
func BenchmarkInterval(b *testing.B) {
	const procs, stacksPerProc, depth, functions = 4, 100, 15, 400
	rng := rand.New(rand.NewPCG(1, 2))
	kernel := &Mapping{File: "[kernel.kallsyms]"}
	host := &Host{Name: "node-1", ID: "0f3c9a5e2b7d4e81a6c0d9f2e4b1a7c3", Arch: "amd64", OSType: "linux"}
	type proc struct {
		Process
		stacks [][]Frame
	}
	var ps []proc
	for p := range procs {
		build := buildid.Info{GNU: fmt.Sprintf("%040x", p+1), Go: fmt.Sprintf("go-build-%d/abc", p)}
		exe := fmt.Sprintf("/srv/svc-%d", p)
		mappings := []Mapping{
			{Start: 0x400000, Limit: 0x1400000, File: exe, Build: build},
			{Start: 0x7f0000000000, Limit: 0x7f0000200000, Offset: 0x28000, File: "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		}
		pr := proc{Process: Process{PID: uint32(1000 + p), ServiceName: fmt.Sprintf("svc-%d", p), ExeName: exe, ExePath: exe, Host: host, Build: build}}
		for range stacksPerProc {
			var st []Frame
			if rng.IntN(5) == 0 {
				for k := range 3 {
					st = append(st, Frame{Address: 0xffffffff81000000 + uint64(k)<<8, Function: fmt.Sprintf("kernel_fn_%d", rng.IntN(50)), Kind: Kernel, Mapping: kernel})
				}
			}
			for k := range depth {
				m := &mappings[0]
				if k == 0 && rng.IntN(4) == 0 {
					m = &mappings[1]
				}
				fn := rng.IntN(functions)
				st = append(st, Frame{Address: m.Start + uint64(fn)<<6, Function: fmt.Sprintf("main.fn%d", fn), File: "main.go", Line: int64(fn), Kind: Go, Mapping: m})
			}
			pr.stacks = append(pr.stacks, st)
		}
		ps = append(ps, pr)
	}
	start := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		bl := New(start, 15*time.Second, time.Second/19)
		for _, p := range ps {
			for i, st := range p.stacks {
				bl.Add(p.Process, st, [16]byte{}, [8]byte{}, uint64(1+i%3))
			}
		}
		_ = bl.Profiles()
	}
}
