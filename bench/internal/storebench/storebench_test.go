package storebench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/simday"
)

// TestSmallRun drives the real exporter with a small simulated host for
// an hour: both files hold every sample, every query returns exactly the
// stored samples, and the probe trace is found whole. The hour ends 15
// minutes before now, so the agent's default retention (1 h, against the
// real clock) keeps about its last 45 minutes. The hotpath CLI is timed
// as a command too: bin/hotpath under make test (HOTPATH_CLI), else built
// for the test. The long queries' file holds 2 days, whose roll-ups the
// exporter closes in the background, and 1 day, whose roll-ups it closes
// while it opens the file (so the run must not wait for a background
// catch-up).
func TestSmallRun(t *testing.T) {
	cli := os.Getenv("HOTPATH_CLI")
	if cli == "" {
		cli = filepath.Join(t.TempDir(), "hotpath")
		if out, err := exec.Command("go", "build", "-o", cli, "github.com/hotpath-dev/hotpath/cmd/hotpath").CombinedOutput(); err != nil {
			t.Fatalf("build the CLI: %v\n%s", err, out)
		}
	}
	for _, days := range []int{2, 1} {
		t.Run(fmt.Sprintf("%d-day long file", days), func(t *testing.T) { smallRun(t, cli, days) })
	}
}

func smallRun(t *testing.T, cli string, days int) {
	p := simday.Default()
	p.Services = 3
	o := Options{
		Dir: t.TempDir(), Host: p, Span: time.Hour, LocalSpan: time.Hour, Days: days, Runs: 1, LongRuns: 1,
		End: time.Now().UTC().Truncate(time.Minute).Add(-15 * time.Minute), Log: t.Logf, CLI: cli,
	}
	res, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	perInterval := int64(p.SamplesPerInterval())
	if want := perInterval * 4 * 60; res.Summary.Samples != want {
		t.Fatalf("summary tier holds %d samples, want %d", res.Summary.Samples, want)
	}
	if want := perInterval * 4 * 60; res.Local.Samples != want {
		t.Fatalf("local tier holds %d samples, want %d", res.Local.Samples, want)
	}
	if res.Local.Pushes != 240 || res.Summary.Pushes != 60 {
		t.Fatalf("pushes: local %d (want 240), summary %d (want 60)", res.Local.Pushes, res.Summary.Pushes)
	}
	for _, tier := range []Tier{res.Local, res.Summary} {
		if tier.FileBytes <= 0 || tier.BytesPerSvcDay <= 0 || tier.Rows <= 0 || tier.TracedRows <= 0 {
			t.Fatalf("implausible tier figures: %+v", tier)
		}
		if tier.UsedBytes <= 0 || tier.UsedBytes > tier.FileBytes || tier.CompactBytes <= 0 {
			t.Fatalf("implausible block figures: file %d, used %d, compact copy %d", tier.FileBytes, tier.UsedBytes, tier.CompactBytes)
		}
	}
	if len(res.Summary.Breakdown) == 0 || res.Summary.Breakdown[0].Bytes <= 0 {
		t.Fatalf("no storage breakdown: %+v", res.Summary.Breakdown)
	}
	// The agent's retention deleted the rows of the hour's first 15
	// minutes or more, and the stacks only they used.
	lh := res.LocalHour
	if lh.KeptHours <= 0 || lh.KeptHours > 0.75 || lh.Rows <= 0 || lh.Rows >= res.Local.Rows || lh.Stacks <= 0 || lh.Stacks >= res.Local.Stacks {
		t.Fatalf("agent file after retention: %.2f h, %d of %d rows, %d of %d stacks; want under 45 minutes and fewer rows and stacks",
			lh.KeptHours, lh.Rows, res.Local.Rows, lh.Stacks, res.Local.Stacks)
	}
	if want := float64(lh.CompactBytes) / 3 / lh.KeptHours; lh.CompactBytes <= 0 || lh.BytesPerSvcHour != want {
		t.Fatalf("agent's hour: %.0f bytes per service per hour, want compact copy %d ÷ 3 services ÷ %.2f h", lh.BytesPerSvcHour, lh.CompactBytes, lh.KeptHours)
	}
	// The gateway's default retention keeps 30 days: it leaves the whole
	// simulated hour, the dictionaries and roll-ups.
	if sd := res.Steady; sd.UsedBytes <= 0 || sd.FileBytes < sd.UsedBytes || sd.BytesPerSvcDay <= 0 || sd.CompactBytes <= 0 {
		t.Fatalf("implausible steady state: %+v", sd)
	}
	// 6 SQL queries and 5 loads of the CLI's profile, 2 of them through a
	// running collector's endpoint, each load also as the CLI's command
	// (each checked against the stored total like the queries).
	if len(res.Queries) != 16 {
		t.Fatalf("%d queries, want 16", len(res.Queries))
	}
	through, commands := 0, 0
	for _, q := range res.Queries {
		if strings.Contains(q.Name, "through a running collector") {
			through++
		}
		if strings.HasSuffix(q.Name, ", as a command") {
			commands++
		}
	}
	if through != 4 || commands != 5 {
		t.Errorf("%d loads through a collector (want 4), %d as a command (want 5)", through, commands)
	}
	for _, q := range res.Queries {
		if q.Want <= 0 || q.Samples != q.Want || len(q.Millis) != 1 {
			t.Errorf("query %q: %d samples, want %d (runs %v)", q.Name, q.Samples, q.Want, q.Millis)
		}
	}
}
