package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hotpath-dev/hotpath/bench/internal/storebench"
	"github.com/hotpath-dev/hotpath/internal/simday"
)

func storageCmd(args []string) error {
	fs := flag.NewFlagSet("storage", flag.ExitOnError)
	out := fs.String("out", "storage.json", "result file")
	dir := fs.String("dir", "", "directory for the DuckDB files (default: a new temporary directory, removed afterwards)")
	span := fs.Duration("span", 24*time.Hour, "simulated time written to the summary tier")
	localSpan := fs.Duration("local-span", 3*time.Hour, "the last part of -span also written to the local tier (scaled to a day)")
	longRuns := fs.Int("long-runs", 3, "timed runs of the multi-day queries")
	days := fs.Int("days", 30, "days stored for the long query")
	// 11, not 5: on this 2-core VM a query's runs spread over 2x, and the
	// median of 5 moved by tens of ms between runs of the same file.
	runs := fs.Int("runs", 11, "timed runs per query, after one untimed run (the report gives their median and range)")
	services := fs.Int("services", 10, "simulated services")
	cli := fs.String("cli", siblingBinary("hotpath"), "the hotpath binary, to time `hotpath profile` as a command too (\"\": not)")
	_ = fs.Parse(args)
	if *span < time.Hour || *days < 1 || *runs < 1 {
		return fmt.Errorf("-span must be at least 1h, -days and -runs at least 1")
	}
	if *dir != "" {
		if err := os.MkdirAll(*dir, 0o755); err != nil {
			return err
		}
	} else {
		d, err := os.MkdirTemp("", "hotpath-bench-storage-")
		if err != nil {
			return err
		}
		*dir = d
		defer os.RemoveAll(d)
	}
	p := simday.Default()
	p.Services = *services
	o := storebench.Options{
		Dir: *dir, Host: p, Span: *span, LocalSpan: *localSpan, Days: *days, Runs: *runs, LongRuns: *longRuns,
		End: time.Now().UTC().Truncate(time.Minute), Log: logf, CLI: *cli,
	}
	logf("storage: writing %s of %d services (%d samples per %s) through the duckdbprofile exporter into %s",
		*span, p.Services, p.SamplesPerInterval(), p.Interval, *dir)
	res, err := storebench.Run(context.Background(), o)
	if err != nil {
		return err
	}
	return writeJSON(*out, res)
}

// siblingBinary is the path of name beside this program (make builds both
// into bin/), or "" when there is none.
func siblingBinary(name string) string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	path := filepath.Join(filepath.Dir(self), name)
	if st, err := os.Stat(path); err != nil || st.IsDir() {
		return ""
	}
	return path
}
