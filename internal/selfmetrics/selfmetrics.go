// Package selfmetrics reads a collector's own telemetry from its Prometheus
// endpoint (service::telemetry::metrics, e.g. http://127.0.0.1:8888/metrics)
// for the benchmarks and the end-to-end tests. Parsing is Prometheus's own
// (expfmt); this package only flattens the families into series and sums
// them by name and labels.
package selfmetrics

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Series is one sample of a scrape: a metric name (histograms and summaries
// flattened to <name>_sum, <name>_count, <name>_bucket) with its labels.
type Series struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is one scrape.
type Metrics []Series

// Scrape reads url, giving up after 5 s.
func Scrape(url string) (Metrics, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	m, err := Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return m, nil
}

// Parse reads the Prometheus text exposition format.
func Parse(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	names := make([]string, 0, len(families))
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	var out Metrics
	for _, n := range names {
		for _, m := range families[n].GetMetric() {
			out = append(out, flatten(n, m)...)
		}
	}
	return out, nil
}

// flatten turns one metric of family name into its series, named as the
// text format writes them.
func flatten(name string, m *dto.Metric) []Series {
	labels := map[string]string{}
	for _, lp := range m.GetLabel() {
		labels[lp.GetName()] = lp.GetValue()
	}
	with := func(k, v string) map[string]string {
		l := make(map[string]string, len(labels)+1)
		for a, b := range labels {
			l[a] = b
		}
		l[k] = v
		return l
	}
	switch {
	case m.Counter != nil:
		return []Series{{name, labels, m.GetCounter().GetValue()}}
	case m.Gauge != nil:
		return []Series{{name, labels, m.GetGauge().GetValue()}}
	case m.Untyped != nil:
		return []Series{{name, labels, m.GetUntyped().GetValue()}}
	case m.Histogram != nil:
		h := m.GetHistogram()
		out := []Series{
			{name + "_sum", labels, h.GetSampleSum()},
			{name + "_count", labels, float64(h.GetSampleCount())},
		}
		for _, b := range h.GetBucket() {
			out = append(out, Series{name + "_bucket", with("le", fmt.Sprint(b.GetUpperBound())), float64(b.GetCumulativeCount())})
		}
		return append(out, Series{name + "_bucket", with("le", "+Inf"), float64(h.GetSampleCount())})
	case m.Summary != nil:
		s := m.GetSummary()
		out := []Series{
			{name + "_sum", labels, s.GetSampleSum()},
			{name + "_count", labels, float64(s.GetSampleCount())},
		}
		for _, q := range s.GetQuantile() {
			out = append(out, Series{name, with("quantile", fmt.Sprint(q.GetQuantile())), q.GetValue()})
		}
		return out
	}
	return nil
}

// Sum adds every series called name whose labels include each of the
// given pairs, written key="value" as in the text format; it reports
// whether any series matched.
func (ms Metrics) Sum(name string, labels ...string) (float64, bool) {
	want := make(map[string]string, len(labels))
	for _, l := range labels {
		k, v, _ := strings.Cut(l, "=")
		want[k] = strings.Trim(v, `"`)
	}
	total, found := 0.0, false
	for _, s := range ms {
		if s.Name != name || !matches(s.Labels, want) {
			continue
		}
		total += s.Value
		found = true
	}
	if math.IsNaN(total) {
		return 0, false
	}
	return total, found
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// First returns the first of names that is present, and its name: a metric
// is exported under different names by exporter versions (unit and _total
// suffixes).
func (ms Metrics) First(names []string, labels ...string) (float64, string, bool) {
	for _, n := range names {
		if v, ok := ms.Sum(n, labels...); ok {
			return v, n, true
		}
	}
	return 0, "", false
}

// ByLabel splits the series of name by the value of one label: for
// samples{outcome="kept"} and samples{outcome="idle"}, ByLabel("samples",
// "outcome") is {kept: …, idle: …}. Series without the label are left out.
func (ms Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ms {
		if v, ok := s.Labels[label]; ok && s.Name == name {
			out[v] += s.Value
		}
	}
	return out
}

// ReceiverNames are the names the ebpfprofile receiver's self-metric name
// ("samples", "frequency", …) may be exported under, in the order they are
// tried: the collector's naming convention for a component, as its
// metadata.yaml declares it (otelcol_receiver_ebpfprofile_<name>), then the
// names agents before that convention used (hotpath_receiver_<name>,
// otelcol_hotpath_receiver_<name>), so a run against an older binary still
// reads; each bare and with every one of suffixes (the Prometheus exporter
// appends the unit, "_hertz", "_bytes", "_seconds", and "_total" to
// counters, depending on its version).
func ReceiverNames(name string, suffixes ...string) []string {
	var out []string
	for _, prefix := range []string{"otelcol_receiver_ebpfprofile_", "hotpath_receiver_", "otelcol_hotpath_receiver_"} {
		out = append(out, prefix+name)
		for _, s := range suffixes {
			out = append(out, prefix+name+s)
		}
	}
	return out
}

// Receiver is the receiver's self-metric name (see ReceiverNames) with
// labels: its value, the name it was found under, and whether it was.
func (ms Metrics) Receiver(name string, suffixes []string, labels ...string) (float64, string, bool) {
	return ms.First(ReceiverNames(name, suffixes...), labels...)
}
