package profilequery

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

// ParseTraceID accepts a trace ID as 32 hex characters, as a UUID (the
// 8-4-4-4-12 form the trace tables' trace_id column reads in SQL), or a
// W3C traceparent ("00-<trace-id>-<parent-id>-<flags>", optionally with
// its "traceparent:" header name), and returns the trace ID in the stored
// form: 32 lowercase hex characters.
func ParseTraceID(s string) (string, error) {
	in := strings.TrimSpace(s)
	if name, v, ok := strings.Cut(in, ":"); ok && strings.EqualFold(strings.TrimSpace(name), "traceparent") {
		in = strings.TrimSpace(v)
	}
	id := in
	switch strings.Count(in, "-") {
	case 4:
		parts := strings.Split(in, "-")
		if len(parts[0]) != 8 || len(parts[1]) != 4 || len(parts[2]) != 4 || len(parts[3]) != 4 || len(parts[4]) != 12 {
			return "", fmt.Errorf("trace ID %q: a UUID is <8>-<4>-<4>-<4>-<12> hex characters", s)
		}
		id = strings.Join(parts, "")
	case 3:
		parts := strings.Split(in, "-")
		if len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
			return "", fmt.Errorf("trace ID %q: a W3C traceparent is 00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", s)
		}
		id = parts[1]
	}
	if len(id) != 32 {
		return "", fmt.Errorf("trace ID %q: want 32 hex characters (a 128-bit W3C trace ID), a UUID or a traceparent, got %d characters", s, len(id))
	}
	b, err := hex.DecodeString(id)
	if err != nil {
		return "", fmt.Errorf("trace ID %q: not hexadecimal", s)
	}
	if id == strings.Repeat("0", 32) {
		return "", fmt.Errorf("trace ID %q: the all-zero trace ID is invalid (W3C) and marks untraced samples", s)
	}
	return hex.EncodeToString(b), nil
}

// TraceProfile is the CPU profile of one trace: the samples that were taken
// while the trace was active, per service.
type TraceProfile struct {
	TraceID  string
	Tier     Tier
	Services []ServiceProfile // most samples first
}

// ServiceProfile is one service's share of a trace.
type ServiceProfile struct {
	*Profile          // Range spans the first to the last stored time of the trace's samples
	Spans    int      // distinct span IDs with samples
	SpanIDs  []string // sorted
}

// Total is the trace's samples over every service.
func (tp *TraceProfile) Total() int64 {
	var n int64
	for _, s := range tp.Services {
		n += s.Total()
	}
	return n
}

// CPU is the trace's CPU time over every service.
func (tp *TraceProfile) CPU() time.Duration {
	var d time.Duration
	for _, s := range tp.Services {
		d += s.CPU()
	}
	return d
}

// Frequencies lists the sampling frequencies of the trace's samples, most
// samples first.
func (tp *TraceProfile) Frequencies() []float64 {
	all := &Profile{Periods: map[time.Duration]int64{}}
	for _, s := range tp.Services {
		all.Fallback = s.Fallback
		for period, n := range s.Periods {
			all.Periods[period] += n
		}
	}
	return all.Frequencies()
}

// Folded is the trace's folded stacks with the service as the root frame,
// "service;root;...;leaf count", so flamegraph.pl draws one tower per
// service.
func (tp *TraceProfile) Folded() []FoldedLine {
	sums := map[string]int64{}
	for _, s := range tp.Services {
		for _, l := range s.Folded() {
			sums[s.Service+";"+l.Stack] += l.Count
		}
	}
	return sortedLines(sums)
}

// Hotspot is a function where a trace's samples were taken (the leaf, self
// time), with the caller it was most often called from.
type Hotspot struct {
	Function string        `json:"function"`
	Caller   string        `json:"caller,omitempty"` // most frequent direct caller, "" for a root
	Samples  int64         `json:"samples"`
	CPU      time.Duration `json:"-"`     // of those samples, at their own periods
	Share    float64       `json:"share"` // of the service's samples in the trace, 0..1
}

// Hotspots returns the n functions with the most self samples (all with
// n <= 0), ties by name.
func (p *Profile) Hotspots(n int) []Hotspot {
	type leaf struct {
		samples int64
		cpu     time.Duration
		callers map[string]int64
	}
	leaves := map[string]*leaf{}
	for _, s := range p.Stacks {
		frames := p.DisplayFrames(s)
		if len(frames) == 0 {
			continue
		}
		name := frames[len(frames)-1]
		l := leaves[name]
		if l == nil {
			l = &leaf{callers: map[string]int64{}}
			leaves[name] = l
		}
		l.samples += s.Count
		l.cpu += s.CPU
		if len(frames) > 1 {
			l.callers[frames[len(frames)-2]] += s.Count
		}
	}
	total := p.Total()
	out := make([]Hotspot, 0, len(leaves))
	for name, l := range leaves {
		h := Hotspot{Function: name, Samples: l.samples, CPU: l.cpu}
		if total > 0 {
			h.Share = float64(l.samples) / float64(total)
		}
		var best int64
		for c, k := range l.callers {
			if k > best || (k == best && c < h.Caller) {
				h.Caller, best = c, k
			}
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Samples != out[j].Samples {
			return out[i].Samples > out[j].Samples
		}
		return out[i].Function < out[j].Function
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// TraceHints tune the explanation LoadTrace gives for a trace without
// samples.
type TraceHints struct {
	// FrequencyHz is the sampling frequency of rows stored without a
	// period (0: DefaultFallbackHz), and the frequency named in "shorter
	// than one period" when the trace has no samples.
	FrequencyHz float64
}

// LoadTrace reads the samples tagged with traceID (as ParseTraceID returns
// it), per service; service "" means every service.
func LoadTrace(ctx context.Context, src Source, traceID, service string, hints TraceHints) (*TraceProfile, error) {
	if _, err := ParseTraceID(traceID); err != nil {
		return nil, err
	}
	tb := tablesOf(src)
	fallback := fallbackPeriod(hints.FrequencyHz)
	where := tb.traceWhere(traceID)
	if service != "" {
		where += " AND service_id = " + sqlquery.Quote(service)
	}
	stmt := tb.stacksSQL(tb.traces, "service_id, build_id", where, fallback)
	res, err := src.Query(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("read stacks of trace %s from %s: %w", traceID, src.Describe(), err)
	}
	if res.Truncated != "" {
		return nil, fmt.Errorf("read stacks of trace %s from %s: result truncated (%s)", traceID, src.Describe(), res.Truncated)
	}
	rows, info, err := readStacks(res, 2)
	if err != nil {
		return nil, fmt.Errorf("read stacks of trace %s: %w", traceID, err)
	}
	tp := &TraceProfile{TraceID: traceID, Tier: src.Tier()}
	if len(rows) == 0 {
		return tp, noTraceSamplesError(ctx, src, traceID, service, hints, tb)
	}
	byService := map[string]*ServiceProfile{}
	merged := map[stackKey]int{}
	for _, r := range rows {
		name := r.group[0]
		sp := byService[name]
		if sp == nil {
			sp = &ServiceProfile{Profile: &Profile{Service: name, Tier: src.Tier(), Binaries: map[string]string{}, Fallback: fallback}}
			byService[name] = sp
		}
		sp.addPeriod(r.period, r.samples)
		s := Stack{BuildID: r.group[1], Frames: r.frames, Count: r.samples, CPU: time.Duration(r.cpu)}
		key := r.key
		if i, ok := merged[key]; ok {
			sp.Stacks[i].Count += s.Count
			sp.Stacks[i].CPU += s.CPU
			continue
		}
		merged[key] = len(sp.Stacks)
		sp.Stacks = append(sp.Stacks, s)
	}

	// When and in how many spans each service ran the trace.
	mres, err := src.Query(ctx, fmt.Sprintf(`SELECT service_id, min(%[1]s), max(%[1]s), list(DISTINCT %[4]s ORDER BY %[4]s) FILTER (WHERE span_id IS NOT NULL)
FROM %[2]s WHERE %[3]s GROUP BY service_id`, tb.timeCol, tb.traces, where, tb.spanHex()))
	if err != nil {
		return nil, fmt.Errorf("read time range of trace %s from %s: %w", traceID, src.Describe(), err)
	}
	for _, r := range mres.Rows {
		sp := byService[asString(r[0])]
		if sp == nil {
			continue // only empty stacks: nothing to show
		}
		first, err1 := asTime(r[1])
		last, err2 := asTime(r[2])
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("read time range of trace %s: %w", traceID, err)
		}
		sp.Range = timerange.Range{Since: first, Until: last}
		sp.SpanIDs = asStrings(r[3])
		sp.Spans = len(sp.SpanIDs)
	}

	names := make([]string, 0, len(byService))
	for name := range byService {
		names = append(names, sqlquery.Quote(name))
	}
	sort.Strings(names)
	bres, err := src.Query(ctx, fmt.Sprintf("SELECT service_id, build_id, binary_path FROM %s WHERE service_id IN (%s)", tb.binaries, strings.Join(names, ", ")))
	if err != nil {
		return nil, fmt.Errorf("read binary metadata from %s: %w", src.Describe(), err)
	}
	for _, r := range bres.Rows {
		if sp := byService[asString(r[0])]; sp != nil {
			sp.Binaries[asString(r[1])] = asString(r[2])
		}
	}

	for _, sp := range byService {
		sortStacks(sp.Stacks)
		sp.setFrameInfo(info)
		tp.Services = append(tp.Services, *sp)
	}
	sort.Slice(tp.Services, func(i, j int) bool {
		a, b := tp.Services[i], tp.Services[j]
		if a.Total() != b.Total() {
			return a.Total() > b.Total()
		}
		return a.Service < b.Service
	})
	return tp, nil
}

// PeriodAt is the time one sample stands for at hz samples per second.
func PeriodAt(hz float64) time.Duration {
	if hz <= 0 {
		return 0
	}
	return time.Duration(float64(time.Second) / hz)
}

// noTraceSamplesError (wrapping ErrNoSamples) explains an empty trace: the likely reasons, and what
// the file does hold (the trace in other services, or how many traces at
// all), which tells a misspelt service from a node without trace context.
func noTraceSamplesError(ctx context.Context, src Source, traceID, service string, hints TraceHints, tb tables) error {
	msg := fmt.Sprintf("for trace %s", traceID)
	if service != "" {
		msg += fmt.Sprintf(" in service %q", service)
		res, err := src.Query(ctx, fmt.Sprintf(`SELECT service_id, sum(sample_count)::BIGINT FROM %s WHERE %s GROUP BY service_id ORDER BY 2 DESC, 1`, tb.traces, tb.traceWhere(traceID)))
		if err == nil && len(res.Rows) > 0 {
			var parts []string
			for _, r := range res.Rows {
				parts = append(parts, fmt.Sprintf("%s (%v samples)", asString(r[0]), r[1]))
			}
			return fmt.Errorf("%w %s on %s; the trace has samples in: %s", ErrNoSamples, msg, src.Describe(), strings.Join(parts, ", "))
		}
	}
	msg += " on " + src.Describe() + "."
	var reasons []string
	// The period the file's samples were mostly taken at; the hint for a
	// file that stored none.
	hz := hints.FrequencyHz
	if res, err := src.Query(ctx, fmt.Sprintf(`SELECT %[1]s FROM %[2]s WHERE %[1]s IS NOT NULL GROUP BY 1 ORDER BY sum(sample_count) DESC, 1 LIMIT 1`, tb.period, tb.stacks)); err == nil && len(res.Rows) == 1 {
		if ns, _ := asInt64(res.Rows[0][0]); ns > 0 {
			hz = math.Round(float64(time.Second)/float64(ns)*100) / 100
		}
	}
	if p := PeriodAt(hz); p > 0 {
		reasons = append(reasons, fmt.Sprintf("the trace ran on CPU for less than one sampling period (%s at %g Hz) in each service, so no sample fell inside it", FormatCPUTime(p), hz))
	}
	reasons = append(reasons, "its services do not tag samples: the agent needs trace_context enabled (the default) and the application the SDK (sdk/go/tracectx, sdk/c/hotpath_tracectx.h) or OpenTelemetry eBPF Instrumentation writing the traces_ctx_v1 map")
	if src.Tier() == Summary {
		reasons = append(reasons, "it is older than retention (the gateway keeps trace-tagged summaries 7 days by default) or newer than the last written summary (about a minute after each minute ends; --local reads the agent's last hour)")
	} else {
		reasons = append(reasons, "it is older than retention (the agent's local tier keeps 1 hour by default; the gateway keeps trace-tagged summaries 7 days)")
	}
	msg += " Possible reasons:"
	for i, r := range reasons {
		msg += fmt.Sprintf("\n  %d. %s", i+1, r)
	}
	res, err := src.Query(ctx, fmt.Sprintf(`SELECT count(DISTINCT trace_id)::BIGINT, coalesce(sum(sample_count), 0)::BIGINT FROM %s WHERE trace_id IS NOT NULL`, tb.traces))
	if err == nil && len(res.Rows) == 1 {
		traces, _ := asInt64(res.Rows[0][0])
		samples, _ := asInt64(res.Rows[0][1])
		if traces == 0 {
			msg += "\nThe database holds no trace-tagged samples at all: trace context is not reaching it (reason 2)."
		} else {
			msg += fmt.Sprintf("\nThe database holds %d trace-tagged samples of %d traces (`hotpath sql \"SELECT trace_id, sum(sample_count) FROM %s WHERE trace_id IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 10\"` lists the busiest).", samples, traces, rfdStacks(src.Tier()))
		}
	}
	return fmt.Errorf("%w %s", ErrNoSamples, msg)
}

// FormatCPUTime renders an estimated CPU time the way people read it:
// "52.6ms", "1.05s", "4m12s".
func FormatCPUTime(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return d.Round(time.Second).String()
}

// asTime reads a TIMESTAMP from an endpoint (a string) or the driver.
func asTime(v any) (time.Time, error) {
	switch x := v.(type) {
	case time.Time:
		return x.UTC(), nil
	case string:
		for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
			if t, err := time.Parse(layout, x); err == nil {
				return t.UTC(), nil
			}
		}
		return time.Time{}, fmt.Errorf("unexpected time %q", x)
	case nil:
		return time.Time{}, nil
	}
	return time.Time{}, fmt.Errorf("unexpected %T %v for a time", v, v)
}
