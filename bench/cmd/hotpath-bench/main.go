// Command hotpath-bench measures what hotpath costs on this machine; `make
// bench` (scripts/bench.sh) runs it. Each subcommand measures one group of
// figures and writes them as JSON; `report` turns the JSON files and the Go
// benchmark output into the results table.
//
//	hotpath-bench storage   -out storage.json   simulated day through the real exporter, query latency
//	hotpath-bench symbolize -out symbolize.json  per-interval symbolization time, p50/p99
//	hotpath-bench agent     -out agent.json      the real collector under load: CPU, memory, start, slowdown
//	hotpath-bench unwinding -out unwinding.json  the agent with unwinding: auto vs frame_pointer on code without frame pointers
//	hotpath-bench churn     -out churn.json      the agent on a node that keeps starting processes and building binaries, guard on and off
//	hotpath-bench report    -dir DIR -results FILE
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "storage":
		err = storageCmd(os.Args[2:])
	case "symbolize":
		err = symbolizeCmd(os.Args[2:])
	case "agent":
		err = agentCmd(os.Args[2:])
	case "unwinding":
		err = unwindingCmd(os.Args[2:])
	case "churn":
		err = churnCmd(os.Args[2:])
	case "report":
		err = reportCmd(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "hotpath-bench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: hotpath-bench storage|symbolize|agent|unwinding|churn|report [flags] (-h for flags)")
	os.Exit(2)
}

// logf reports progress on stderr; stdout stays for results.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func writeJSON(path string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(raw, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func readJSON(path string, v any) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}
