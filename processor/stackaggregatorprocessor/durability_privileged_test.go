//go:build privileged

// Tests that need root: a full disk is a small tmpfs mounted for the test.

package stackaggregatorprocessor

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/smalldisk"
)

// A full disk refuses the batch (the sender keeps it) instead of
// acknowledging what the log could not take.
func TestFullDiskRefusesBatchesAndLosesNoneAcknowledged(t *testing.T) {
	dir := smalldisk.Mount(t, 128<<10)
	minute := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	clk := &fakeClock{t: minute.Add(5 * time.Second)}
	sink := newStoreSink()
	p, _ := walProcessor(t, dir, clk, sink, nil)
	var acked []pprofile.Profiles
	var refusal error
	for i := range 400 {
		in := input(minute, 15*time.Second, nil, nil, procSpec{service: "api", host: "h", pid: int64(i), samples: []sampleSpec{
			{stack: []string{fmt.Sprintf("f%d", i), "g", "main"}, n: 3},
		}})
		in.ResourceProfiles().At(0).Resource().Attributes().PutStr(profileschema.AttrBatchID, fmt.Sprintf("agent-e-%d", i))
		if refusal = p.ConsumeProfilesForTest(in); refusal != nil {
			break
		}
		acked = append(acked, in)
	}
	if refusal == nil {
		t.Fatal("a full 128k disk kept accepting batches")
	}
	t.Logf("refused after %d batches: %v", len(acked), refusal)
	crash(p)
	p2, _ := walProcessor(t, dir, clk, sink, nil)
	if err := p2.shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := sink.totals(), totals(acked...); !maps.Equal(got, want) {
		t.Fatalf("stored %v, want the acknowledged %v", got, want)
	}
}
