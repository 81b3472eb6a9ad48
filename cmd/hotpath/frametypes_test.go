package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
)

// typedFixture is a Python service as the receiver reports it: CPython
// frames typed python with file and line, a perf-trampoline JIT frame, the
// interpreter's native frames and a kernel frame.
func typedFixture(now time.Time) []batch {
	return []batch{{at: now.Add(-5 * time.Minute), service: "pyapp", stacks: map[string]int64{
		"native:_start;native:Py_RunMain;python:<module>@/srv/app.py:40;python:handle@/srv/app.py:12;python:parse@/srv/lib/parse.py:7": 30,
		"native:_start;native:Py_RunMain;python:<module>@/srv/app.py:40;jit:py::handle:/srv/app.py":                                    20,
		"native:_start;native:Py_RunMain;python:<module>@/srv/app.py:40;kernel:do_syscall_64":                                          10,
	}}}
}

// TestFrameTypesThroughTheCLI: types, files and lines stored by the real
// exporter come back in `profile --format json`, `top --format json` and
// the pprof file's functions and lines.
func TestFrameTypesThroughTheCLI(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), tier+".duckdb")
			writeDB(t, tier, db, "", typedFixture(time.Now()))

			out, stderr, code := runCLI(t, "profile", "--db", db, "--service", "pyapp", "--since", "1h", "--format", "json")
			if code != 0 {
				t.Fatalf("profile: %s", stderr)
			}
			var doc struct {
				Stacks []struct {
					Frames    []string `json:"frames"`
					FrameInfo []struct {
						Type, File string
						Line       int64
					} `json:"frame_info"`
					Samples int64 `json:"samples"`
				} `json:"stacks"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			got := map[string]string{}
			for _, s := range doc.Stacks {
				if len(s.FrameInfo) != len(s.Frames) {
					t.Fatalf("%d frames, %d infos", len(s.Frames), len(s.FrameInfo))
				}
				for i, f := range s.Frames {
					fi := s.FrameInfo[i]
					got[f] = fi.Type + " " + fi.File + " " + itoa(fi.Line)
				}
			}
			want := map[string]string{
				"_start":                     "native  0",
				"<module>":                   "python /srv/app.py 40",
				"handle":                     "python /srv/app.py 12",
				"parse":                      "python /srv/lib/parse.py 7",
				"py::handle:/srv/app.py_[j]": "jit  0",
				"do_syscall_64_[k]":          "kernel  0",
			}
			for f, w := range want {
				if got[f] != w {
					t.Errorf("profile json: frame %q: %q, want %q", f, got[f], w)
				}
			}

			out, stderr, code = runCLI(t, "top", "--db", db, "--service", "pyapp", "--since", "1h", "--format", "json", "-n", "0")
			if code != 0 {
				t.Fatalf("top: %s", stderr)
			}
			var top struct {
				Functions []struct {
					Function, Type, File string
					Line                 int64
					Self                 int64 `json:"self_samples"`
				} `json:"functions"`
			}
			if err := json.Unmarshal([]byte(out), &top); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var parse bool
			for _, f := range top.Functions {
				if f.Function == "parse" {
					parse = f.Type == "python" && f.File == "/srv/lib/parse.py" && f.Line == 7 && f.Self == 30
				}
			}
			if !parse {
				t.Errorf("top json has no typed parse: %s", out)
			}

			pb := filepath.Join(t.TempDir(), "cpu.pb.gz")
			if _, stderr, code := runCLI(t, "profile", "--db", db, "--service", "pyapp", "--since", "1h", "--format", "pprof", "-o", pb); code != 0 {
				t.Fatalf("pprof: %s", stderr)
			}
			fh, err := os.Open(pb)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			p, err := profile.Parse(fh)
			if err != nil {
				t.Fatal(err)
			}
			var handle bool
			for _, l := range p.Location {
				for _, ln := range l.Line {
					if ln.Function.Name == "handle" {
						handle = ln.Function.Filename == "/srv/app.py" && ln.Line == 12
					}
				}
			}
			if !handle {
				t.Errorf("pprof: handle has no file /srv/app.py and line 12")
			}

			// The flame graph colours by the stored type: CPython frames
			// carry no suffix, only their type says python.
			svg, stderr, code := runCLI(t, "profile", "--db", db, "--service", "pyapp", "--since", "1h", "--format", "svg")
			if code != 0 {
				t.Fatalf("svg: %s", stderr)
			}
			if !strings.Contains(svg, `id="legend"`) {
				t.Error("flame graph has no frame type legend")
			}
			pyFill := regexp.MustCompile(`<rect class="legend" data-type="python"[^>]*fill="(rgb\([0-9,]+\))"`).FindStringSubmatch(svg)
			handleFill := regexp.MustCompile(`data-n="handle">.*?fill="rgb\((\d+),(\d+),(\d+)\)"`).FindStringSubmatch(svg)
			if pyFill == nil || handleFill == nil {
				t.Fatalf("no python legend or handle frame in the svg")
			}
			// Python's palette is blue (flamegraph's own test checks ranges).
			var r, g, b int
			fmt.Sscan(handleFill[1], &r)
			fmt.Sscan(handleFill[2], &g)
			fmt.Sscan(handleFill[3], &b)
			if !(b > 200 && r < 120) {
				t.Errorf("python frame handle is rgb(%d,%d,%d), want python's blue", r, g, b)
			}
		})
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
