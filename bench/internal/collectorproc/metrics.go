package collectorproc

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Metrics is one scrape of a Prometheus text endpoint: series (name plus
// labels, as written) to value.
type Metrics map[string]float64

// Scrape reads url (e.g. http://127.0.0.1:8888/metrics).
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
	return ParseMetrics(resp.Body)
}

// ParseMetrics parses the Prometheus text format (comments skipped,
// timestamps ignored).
func ParseMetrics(r io.Reader) (Metrics, error) {
	m := Metrics{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The value follows the series; labels may hold spaces, so split
		// after the closing brace when there is one.
		split := strings.LastIndexByte(line, '}')
		var series, rest string
		if split >= 0 {
			series, rest = line[:split+1], line[split+1:]
		} else {
			i := strings.IndexByte(line, ' ')
			if i < 0 {
				return nil, fmt.Errorf("parse metrics: no value in %q", line)
			}
			series, rest = line[:i], line[i:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("parse metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("parse metrics: value of %s: %w", series, err)
		}
		m[series] = v
	}
	return m, sc.Err()
}

// Sum adds every series whose name (before any '{') is name and whose
// labels contain all of the given label="value" pairs.
func (m Metrics) Sum(name string, labels ...string) (float64, bool) {
	var total float64
	found := false
	for series, v := range m {
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(lbl, l) {
				ok = false
				break
			}
		}
		if ok {
			total += v
			found = true
		}
	}
	return total, found
}

// First returns the first of names that is present (metric names differ
// by exporter version in their unit and _total suffixes).
func (m Metrics) First(names []string, labels ...string) (float64, string, bool) {
	for _, n := range names {
		if v, ok := m.Sum(n, labels...); ok {
			return v, n, true
		}
	}
	return 0, "", false
}

// ByLabel splits the series of name by the value of one label: for
// samples{outcome="kept"} and samples{outcome="idle"}, ByLabel("samples",
// "outcome") is {kept: …, idle: …}. Series without the label are left out.
func (m Metrics) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	prefix := label + `="`
	for series, v := range m {
		n, lbl, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		for _, kv := range splitLabels(strings.TrimSuffix(lbl, "}")) {
			if val, ok := strings.CutPrefix(kv, prefix); ok {
				out[strings.TrimSuffix(val, `"`)] += v
			}
		}
	}
	return out
}

// splitLabels splits a="x",b="y" at the commas between pairs (not those
// inside quoted values).
func splitLabels(s string) []string {
	var out []string
	inQuote, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQuote = !inQuote
		case ',':
			if !inQuote {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
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
func (m Metrics) Receiver(name string, suffixes []string, labels ...string) (float64, string, bool) {
	return m.First(ReceiverNames(name, suffixes...), labels...)
}
