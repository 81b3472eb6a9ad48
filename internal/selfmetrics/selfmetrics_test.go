package selfmetrics

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	text := `# HELP hotpath_receiver_samples_total CPU samples taken
# TYPE hotpath_receiver_samples_total counter
hotpath_receiver_samples_total{otel_scope_name="x",outcome="kept",receiver="ebpfprofile"} 1140
hotpath_receiver_samples_total{otel_scope_name="x",outcome="idle",receiver="ebpfprofile"} 60
hotpath_receiver_symbolize_duration_seconds_sum{receiver="ebpfprofile"} 0.25
hotpath_receiver_symbolize_duration_seconds_count{receiver="ebpfprofile"} 4
up 1 1700000000000
`
	m, err := Parse(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Sum("hotpath_receiver_samples_total", `outcome="kept"`); !ok || v != 1140 {
		t.Fatalf("kept = %v %v", v, ok)
	}
	if v, _ := m.Sum("hotpath_receiver_samples_total"); v != 1200 {
		t.Fatalf("all samples = %v, want 1200", v)
	}
	if v, n, ok := m.First([]string{"hotpath_receiver_symbolize_duration_sum", "hotpath_receiver_symbolize_duration_seconds_sum"}); !ok || v != 0.25 || !strings.Contains(n, "seconds") {
		t.Fatalf("First = %v %q %v", v, n, ok)
	}
	if v, _ := m.Sum("up"); v != 1 {
		t.Fatalf("up = %v (timestamp taken for the value?)", v)
	}
	by := m.ByLabel("hotpath_receiver_samples_total", "outcome")
	if len(by) != 2 || by["kept"] != 1140 || by["idle"] != 60 {
		t.Fatalf("ByLabel(outcome) = %v", by)
	}
	ended, err := Parse(strings.NewReader(`hotpath_receiver_stacks_ended_early{note="a,reason=\"x\"",reason="truncated"} 3
hotpath_receiver_stacks_ended_early{reason="no_unwind_rule"} 41
hotpath_receiver_stacks_ended_early 7
`))
	if err != nil {
		t.Fatal(err)
	}
	if by := ended.ByLabel("hotpath_receiver_stacks_ended_early", "reason"); len(by) != 2 || by["truncated"] != 3 || by["no_unwind_rule"] != 41 {
		t.Fatalf("ByLabel(reason) = %v (a comma or label name inside a quoted value must not split)", by)
	}
	if _, err := Parse(strings.NewReader("broken_line_without_value\n")); err == nil {
		t.Fatal("want an error for a line without a value")
	}
}

// TestReceiverNames finds a receiver metric under the name the receiver
// declares and under the collector's component naming, with or without
// the exporter's suffixes.
func TestReceiverNames(t *testing.T) {
	for _, text := range []string{
		"hotpath_receiver_frequency 19\n",
		"otelcol_receiver_ebpfprofile_frequency_hertz 19\n",
		"otelcol_hotpath_receiver_frequency 19\n",
	} {
		m, err := Parse(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		if v, name, ok := m.Receiver("frequency", []string{"_hertz"}); !ok || v != 19 || !strings.HasPrefix(text, name+" ") {
			t.Errorf("%q: got %v %q %v", text, v, name, ok)
		}
	}
	m, _ := Parse(strings.NewReader("otelcol_receiver_ebpfprofile_samples_total{outcome=\"kept\"} 7\nhotpath_receiver_samples_lost 1\n"))
	if v, _, ok := m.Receiver("samples", []string{"_total"}, `outcome="kept"`); !ok || v != 7 {
		t.Errorf("renamed counter: %v %v", v, ok)
	}
	if _, _, ok := m.Receiver("binary_work", []string{"_total"}); ok {
		t.Error("a metric this build does not export was found")
	}
}
