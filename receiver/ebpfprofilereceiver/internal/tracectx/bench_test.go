//go:build linux && privileged

package tracectx

import (
	"context"
	"os"
	"testing"

	"go.opentelemetry.io/otel/trace"

	sdk "github.com/hotpath-dev/hotpath/sdk/go/tracectx"
)

// BenchmarkMarkers is the Go SDK's cost per request: a Set/Clear pair and a
// whole tracectx.Do, in this process without the agent (detached) and with
// the agent's uprobes on its markers (attached: two uprobe hits per op, each
// a trap into the kernel and a BPF program run).
func BenchmarkMarkers(b *testing.B) {
	ctx := trace.ContextWithSpanContext(context.Background(), testSpan)
	fn := func(context.Context) {}
	run := func(b *testing.B) {
		b.Run("set+clear", func(b *testing.B) {
			for b.Loop() {
				sdk.Set(testSpan)
				sdk.Clear()
			}
		})
		b.Run("do", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				sdk.Do(ctx, fn)
			}
		})
	}
	b.Run("detached", run)
	b.Run("attached", func(b *testing.B) {
		m := openTestMaps(b)
		p := openProbes(b, m)
		if err := p.Observe(os.Getpid()); err != nil {
			b.Fatal(err)
		}
		if len(p.Attached()) == 0 {
			b.Fatal("test binary not attached")
		}
		run(b)
		st, err := p.Stats()
		if err != nil {
			b.Fatal(err)
		}
		if st.Set == 0 {
			b.Fatal("uprobes never fired")
		}
	})
}
