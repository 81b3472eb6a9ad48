package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLoadLocalHour measures reading a profile from a local-tier file
// (read-only open, the aggregate query, decoding): 2,000 distinct stacks of
// depth 10 at each of 240 15-second intervals, an hour of a busy service
// (480k rows).
func BenchmarkLoadLocalHour(b *testing.B) {
	path := filepath.Join(b.TempDir(), "agent.duckdb")
	now := time.Now()
	var bs []batch
	for i := 0; i < 240; i++ {
		st := map[string]int64{}
		for s := 0; s < 2000; s++ {
			folded := "main.main"
			for d := 1; d < 10; d++ {
				folded += fmt.Sprintf(";pkg%d.fn%d", d, (s>>uint(d%8))%23)
			}
			st[folded+fmt.Sprintf(";leaf%d", s)] = int64(1 + s%5)
		}
		bs = append(bs, batch{at: now.Add(-time.Hour + time.Duration(i)*15*time.Second), service: "api", build: oldBuild, exe: "/srv/api", stacks: st})
	}
	writeDB(b, "local", path, "", bs)
	ctx := context.Background()
	target := &targetFlags{db: path}
	sel := &selectFlags{service: "api", since: "2h", tz: "UTC"}
	b.ResetTimer()
	for b.Loop() {
		p, err := loadProfile(ctx, target, sel, now, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Stacks) != 2000 {
			b.Fatalf("%d stacks", len(p.Stacks))
		}
	}
}
