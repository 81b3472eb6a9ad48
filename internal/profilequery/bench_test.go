package profilequery

import (
	"fmt"
	"testing"
)

// bigProfile is 20,000 distinct stacks of depth 12 over two builds, about
// what a busy service's gateway tier holds for a day.
func bigProfile() *Profile {
	p := prof()
	for i := 0; i < 20000; i++ {
		frames := make([]string, 12)
		for d := range frames {
			frames[d] = fmt.Sprintf("pkg%d.fn%d", d, (i>>uint(d))%37)
		}
		build := "aaaa1111bbbb2222"
		if i%3 == 0 {
			build = "ccc"
		}
		p.Stacks = append(p.Stacks, Stack{BuildID: build, Frames: frames, Count: int64(1 + i%50)})
	}
	return p
}

func BenchmarkFolded(b *testing.B) {
	p := bigProfile()
	for b.Loop() {
		_ = p.Folded()
	}
}

func BenchmarkFunctions(b *testing.B) {
	p := bigProfile()
	for b.Loop() {
		_ = p.Functions()
	}
}

func BenchmarkPprof(b *testing.B) {
	p := bigProfile()
	for b.Loop() {
		if _, err := p.Pprof(); err != nil {
			b.Fatal(err)
		}
	}
}
