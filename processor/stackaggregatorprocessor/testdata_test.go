package stackaggregatorprocessor

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/pdata/pprofile"
	"go.yaml.in/yaml/v3"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

var update = flag.Bool("update", false, "rewrite testdata/*/output.txt from the current behaviour (review the diff!)")

// A testdata case is a folder: input.yaml (config and the batches the
// receiver would send, stacks written folded, root first) and output.txt
// (what is emitted, folded). A new behaviour is a new folder.
type caseInput struct {
	Config  map[string]any `yaml:"config"`
	Batches []struct {
		Start     string `yaml:"start"` // offset from a minute boundary
		Processes []struct {
			Service string   `yaml:"service"`
			Host    string   `yaml:"host"`
			PID     int64    `yaml:"pid"`
			BuildID string   `yaml:"build_id"`
			Samples []string `yaml:"samples"` // "root;...;leaf N [trace=K] [at=OFF,OFF]"
		} `yaml:"processes"`
	} `yaml:"batches"`
}

func parseSample(t *testing.T, line string) sampleSpec {
	t.Helper()
	fields := strings.Fields(line)
	if len(fields) < 2 {
		t.Fatalf("sample %q: want \"stack count [trace=K] [at=...]\"", line)
	}
	frames := strings.Split(fields[0], ";")
	var s sampleSpec
	for i := len(frames) - 1; i >= 0; i-- {
		s.stack = append(s.stack, frames[i]) // leaf first, as in OTLP
	}
	n, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		t.Fatalf("sample %q: %v", line, err)
	}
	s.n = n
	for _, f := range fields[2:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "trace":
			tr, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("sample %q: %v", line, err)
			}
			s.trace = byte(tr)
		case "at":
			for _, off := range strings.Split(v, ",") {
				d, err := time.ParseDuration(off)
				if err != nil {
					t.Fatalf("sample %q: %v", line, err)
				}
				s.ts = append(s.ts, uint64(t0.Add(d).UnixNano()))
			}
		default:
			t.Fatalf("sample %q: unknown field %q", line, k)
		}
	}
	return s
}

// folded renders emitted Profiles for a golden file.
func folded(pds []pprofile.Profiles) string {
	var b strings.Builder
	for _, pd := range pds {
		dict := pd.Dictionary()
		for r := 0; r < pd.ResourceProfiles().Len(); r++ {
			rp := pd.ResourceProfiles().At(r)
			var attrs []string
			for k, v := range rp.Resource().Attributes().All() {
				if k == profileschema.AttrBatchID {
					continue // random per run; tested on its own
				}
				attrs = append(attrs, k+"="+v.AsString())
			}
			sort.Strings(attrs)
			profs := rp.ScopeProfiles().At(0).Profiles()
			for p := 0; p < profs.Len(); p++ {
				prof := profs.At(p)
				if p == 0 {
					fmt.Fprintf(&b, "window +%s %s\n", prof.Time().AsTime().Sub(t0), time.Duration(prof.DurationNano()))
					fmt.Fprintf(&b, "  resource %s\n", strings.Join(attrs, " "))
				}
				fmt.Fprintf(&b, "  %s/%s\n", profileschema.Str(dict, prof.SampleType().TypeStrindex()), profileschema.Str(dict, prof.SampleType().UnitStrindex()))
				var lines []string
				for i := 0; i < prof.Samples().Len(); i++ {
					s := prof.Samples().At(i)
					li := dict.StackTable().At(int(s.StackIndex())).LocationIndices()
					var frames []string
					for j := li.Len() - 1; j >= 0; j-- {
						frames = append(frames, profileschema.FrameName(dict, dict.LocationTable().At(int(li.At(j)))))
					}
					line := fmt.Sprintf("    %s %d", strings.Join(frames, ";"), s.Values().At(0))
					if s.LinkIndex() != 0 {
						line += fmt.Sprintf(" trace=%d", dict.LinkTable().At(int(s.LinkIndex())).TraceID()[0])
					}
					lines = append(lines, line)
				}
				sort.Strings(lines)
				for _, l := range lines {
					b.WriteString(l + "\n")
				}
			}
		}
	}
	return b.String()
}

func TestTestdata(t *testing.T) {
	dirs, err := filepath.Glob("testdata/*/input.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no testdata cases (%v)", err)
	}
	for _, in := range dirs {
		dir := filepath.Dir(in)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			var c caseInput
			if err := yaml.Unmarshal(raw, &c); err != nil {
				t.Fatal(err)
			}
			cfg := createDefaultConfig()
			if err := confmap.NewFromStringMap(c.Config).Unmarshal(cfg); err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			a := newAggregator(cfg)
			for _, batch := range c.Batches {
				off, err := time.ParseDuration(batch.Start)
				if err != nil {
					t.Fatal(err)
				}
				var procs []procSpec
				for _, p := range batch.Processes {
					ps := procSpec{service: p.Service, host: p.Host, pid: p.PID, buildID: p.BuildID}
					for _, s := range p.Samples {
						ps.samples = append(ps.samples, parseSample(t, s))
					}
					procs = append(procs, ps)
				}
				a.Add(input(t0.Add(off), 15*time.Second, nil, nil, procs...), t0, nil)
			}
			got := folded(emitAll(a, cfg.Window))
			golden := filepath.Join(dir, "output.txt")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("output differs from %s:\n--- got\n%s--- want\n%s", golden, got, want)
			}
		})
	}
}
