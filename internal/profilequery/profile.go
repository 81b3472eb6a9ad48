package profilequery

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/timerange"
)

// Stack is one distinct call stack of one build with its sample count.
type Stack struct {
	BuildID string   `json:"build_id"`
	Frames  []string `json:"frames"` // root first, leaf last, as stored
	Count   int64    `json:"samples"`
	// CPU is the CPU time the samples stand for: each stored row's count
	// times its own sampling period (rows without one: Profile.Fallback).
	CPU time.Duration `json:"cpu_ns"`
	// folded is Frames joined by ';' when sortStacks joined them, else "":
	// the folded output takes it rather than joining every stack again.
	folded string
}

// Profile is the stacks of one selection, summed over its time range.
type Profile struct {
	Service  string
	Range    timerange.Range
	Tier     Tier
	Stacks   []Stack
	Binaries map[string]string // build ID → binary path, when recorded
	// Periods is the samples per stored sampling period (0: rows stored
	// without one, counted at Fallback).
	Periods map[time.Duration]int64
	// Fallback is the period assumed for rows stored without one.
	Fallback time.Duration
	// FrameInfo is what the file says about the frames of Stacks, by
	// stored name (files before schema version 6: nothing; Frame derives
	// what the name says).
	FrameInfo map[string]FrameInfo
}

// FrameInfo is what a frame is and where its code lives; zero values are
// unknown.
type FrameInfo struct {
	Type string `json:"type,omitempty"` // python, jit, native, kernel, go
	File string `json:"file,omitempty"`
	Line int64  `json:"line,omitempty"`
}

// Frame is what is known of the frame stored as name: what the file
// recorded, else the type its name's suffix says (kernel, jit).
func (p *Profile) Frame(name string) FrameInfo {
	fi := p.FrameInfo[name]
	if fi.Type == "" {
		fi.Type = profileschema.TypeFromName(name)
	}
	return fi
}

// FrameTypes is the type of each frame by its shown name (DisplayFrames,
// as in Folded), for colouring flame graphs; "" when unknown.
func (p *Profile) FrameTypes() func(name string) string {
	types := map[string]string{}
	for _, s := range p.Stacks {
		for i, name := range p.DisplayFrames(s) {
			if t := p.Frame(s.Frames[i]).Type; t != "" {
				types[name] = t
			}
		}
	}
	return func(name string) string { return types[name] }
}

// setFrameInfo keeps what the file knows (info, by name, as readStacks
// returns it: nothing before schema version 6) of the frames of the
// profile's stacks.
func (p *Profile) setFrameInfo(info map[string]FrameInfo) {
	p.FrameInfo = map[string]FrameInfo{}
	for _, s := range p.Stacks {
		for _, f := range s.Frames {
			if fi, ok := info[f]; ok {
				p.FrameInfo[f] = fi
			}
		}
	}
}

// DefaultFallbackHz is the frequency assumed for samples stored without a
// period (files before schema version 3, senders other than hotpath's
// receiver): the receiver's default frequency_hz.
const DefaultFallbackHz = 19

// fallbackPeriod is the period for rows without one at hz (default
// DefaultFallbackHz).
func fallbackPeriod(hz float64) time.Duration {
	if hz <= 0 {
		hz = DefaultFallbackHz
	}
	return PeriodAt(hz)
}

// cpuSQL sums CPU nanoseconds over rows: each row's count times its own
// period (DOUBLE: a hostile count × period must not overflow the sum).
func cpuSQL(tb tables, fallback time.Duration) string {
	return fmt.Sprintf("sum(sample_count * coalesce(%s, %d)::DOUBLE)", tb.period, fallback.Nanoseconds())
}

// addPeriod records n samples at the period a query returned (NULL: 0).
func (p *Profile) addPeriod(v any, n int64) {
	ns, _ := asInt64(v)
	if p.Periods == nil {
		p.Periods = map[time.Duration]int64{}
	}
	p.Periods[time.Duration(ns)] += n
}

// CPU is the profile's CPU time.
func (p *Profile) CPU() time.Duration {
	var d time.Duration
	for _, s := range p.Stacks {
		d += s.CPU
	}
	return d
}

// Frequencies lists the sampling frequencies of the profile's samples in
// Hz, most samples first; rows stored without a period count at Fallback.
func (p *Profile) Frequencies() []float64 {
	byHz := map[float64]int64{}
	for period, n := range p.Periods {
		if period == 0 {
			period = p.Fallback
		}
		if period > 0 {
			byHz[math.Round(float64(time.Second)/float64(period)*100)/100] += n
		}
	}
	out := make([]float64, 0, len(byHz))
	for hz := range byHz {
		out = append(out, hz)
	}
	sort.Slice(out, func(i, j int) bool {
		if byHz[out[i]] != byHz[out[j]] {
			return byHz[out[i]] > byHz[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}

// Selector picks the stacks of a profile.
type Selector struct {
	Service string
	// Pod is a pod's name (gateway tier) or UID (k8s.pod.uid, either
	// tier); "" = every pod.
	Pod string
	// Container is a container ID (container.id) or a unique prefix of it,
	// as `docker ps` and `crictl ps` print them; "" = every container.
	Container string
	BuildID   string // exact build ID or a prefix of it; "" = every build
	Range     timerange.Range
	// FallbackHz is the frequency of rows stored without a sampling
	// period (0: DefaultFallbackHz).
	FallbackHz float64
}

// Total is the number of samples in the profile.
func (p *Profile) Total() int64 {
	var n int64
	for _, s := range p.Stacks {
		n += s.Count
	}
	return n
}

// BuildIDs lists the distinct build IDs, sorted (” for unknown).
func (p *Profile) BuildIDs() []string {
	seen := map[string]bool{}
	var ids []string
	for _, s := range p.Stacks {
		if !seen[s.BuildID] {
			seen[s.BuildID] = true
			ids = append(ids, s.BuildID)
		}
	}
	sort.Strings(ids)
	return ids
}

func sqlTime(t time.Time) string {
	return "TIMESTAMP '" + t.UTC().Format("2006-01-02 15:04:05.999999") + "'"
}

// Load reads the selection's stacks, summed per build and stack.
func Load(ctx context.Context, src Source, sel Selector) (*Profile, error) {
	if sel.Service == "" {
		return nil, fmt.Errorf("no service given (--service)")
	}
	tb := tablesOf(src)
	fallback := fallbackPeriod(sel.FallbackHz)
	table := tb.stacks
	where := fmt.Sprintf("service_id = %s AND %s >= %s AND %s < %s",
		sqlquery.Quote(sel.Service), tb.timeCol, sqlTime(sel.Range.Since), tb.timeCol, sqlTime(sel.Range.Until))
	if tb.samplesIn {
		// The file's macro reads the coarsest tier that answers the
		// range exactly (the gateway's hourly and daily roll-ups).
		table = fmt.Sprintf("samples_in(%s, %s, %s)", sqlquery.Quote(sel.Service), sqlTime(sel.Range.Since), sqlTime(sel.Range.Until))
		where = "true"
	}
	if sel.Pod != "" || sel.Container != "" {
		w, err := tb.workloadWhere(src, sel)
		if err != nil {
			return nil, err
		}
		where += w
	}
	if sel.BuildID != "" {
		where += " AND starts_with(build_id, " + sqlquery.Quote(sel.BuildID) + ")"
	}
	// Rows of different sampling periods stay apart (one stack may come
	// from nodes at 19 and 99 Hz) and merge in Go.
	stmt := tb.stacksSQL(table, "build_id", where, fallback)
	res, err := src.Query(ctx, stmt)
	if err != nil {
		return nil, fmt.Errorf("read stacks from %s: %w", src.Describe(), err)
	}
	if res.Truncated != "" {
		return nil, fmt.Errorf("read stacks from %s: result truncated (%s): narrow the time range", src.Describe(), res.Truncated)
	}
	rows, info, err := readStacks(res, 1)
	if err != nil {
		return nil, err
	}
	p := &Profile{Service: sel.Service, Range: sel.Range, Tier: src.Tier(), Binaries: map[string]string{}, Fallback: fallback}
	merged := map[stackKey]int{}
	for _, r := range rows {
		p.addPeriod(r.period, r.samples)
		s := Stack{BuildID: r.group[0], Frames: r.frames, Count: r.samples, CPU: time.Duration(r.cpu)}
		key := r.key
		if i, ok := merged[key]; ok {
			p.Stacks[i].Count += s.Count
			p.Stacks[i].CPU += s.CPU
			continue
		}
		merged[key] = len(p.Stacks)
		p.Stacks = append(p.Stacks, s)
	}
	sortStacks(p.Stacks)
	p.setFrameInfo(info)
	if len(p.Stacks) == 0 {
		return p, noSamplesError(ctx, src, sel, tb)
	}
	bres, err := src.Query(ctx, fmt.Sprintf("SELECT build_id, binary_path FROM %s WHERE service_id = %s", tb.binaries, sqlquery.Quote(sel.Service)))
	if err != nil {
		return nil, fmt.Errorf("read binary metadata from %s: %w", src.Describe(), err)
	}
	for _, r := range bres.Rows {
		p.Binaries[asString(r[0])] = asString(r[1])
	}
	return p, nil
}

// sortStacks orders stacks by samples, most first; ties by build ID, then
// by folded line, so output is the same whatever order the rows came in.
func sortStacks(stacks []Stack) {
	// Each stack's line is joined once: joined in the comparison, a 1 h
	// profile of 9,165 stacks (most of one sample, so ties) joined 15
	// names about 240,000 times, 138 of the 365 ms it took to load.
	// The line is kept in the stack for the folded output (line).
	for i := range stacks {
		stacks[i].folded = strings.Join(stacks[i].Frames, ";")
	}
	slices.SortFunc(stacks, func(a, b Stack) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.BuildID, b.BuildID), strings.Compare(a.folded, b.folded))
	})
}

// ErrNoSamples is wrapped by Load's error for an empty selection.
var ErrNoSamples = fmt.Errorf("no samples")

// noSamplesError says what exists instead, which is what a user needs when a
// service name is misspelt or the range is wrong.
func noSamplesError(ctx context.Context, src Source, sel Selector, tb tables) error {
	msg := fmt.Sprintf(" for service %q in %s on %s", sel.Service, sel.Range, src.Describe())
	if sel.BuildID != "" {
		msg += fmt.Sprintf(" with build ID %q", sel.BuildID)
	}
	if sel.Pod != "" {
		msg += fmt.Sprintf(" in pod %q", sel.Pod)
	}
	if sel.Container != "" {
		msg += fmt.Sprintf(" in container %q", sel.Container)
	}
	res, err := src.Query(ctx, fmt.Sprintf(`SELECT service_id, sum(sample_count)::BIGINT FROM %s GROUP BY service_id ORDER BY 2 DESC, 1`, tb.stacks))
	if err == nil && len(res.Rows) > 0 {
		svcs := make([]ServiceSummary, 0, len(res.Rows))
		for _, r := range res.Rows {
			n, _ := asInt64(r[1])
			svcs = append(svcs, ServiceSummary{Service: asString(r[0]), Samples: n})
		}
		msg += "; stored services (any time): " + ListServices(svcs)
	} else if err == nil {
		msg += "; the file holds no samples yet"
	}
	if src.Tier() == Summary {
		msg += " (the gateway writes each minute's summary about a minute after it ends; --local reads the agent's last hour at 15 s)"
	}
	return fmt.Errorf("%w%s", ErrNoSamples, msg)
}

// ShortBuildID is the prefix of a build ID shown in stacks (like a short
// git hash); commands taking --build-id accept any prefix.
func ShortBuildID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// DisplayFrames returns a stack's frames as shown to people: a frame of the
// build's own binary that could not be symbolized ("app+0x1a2b", a file
// offset) reads "[build_id:abc123] 0x1a2b" (RFD 072), which names what
// `hotpath symbolize` needs. Other unresolved frames (shared libraries
// without a recorded build ID) keep "libfoo.so+0x..".
func (p *Profile) DisplayFrames(s Stack) []string {
	frames, _ := p.displayFrames(s)
	return frames
}

// displayFrames is DisplayFrames, and whether any frame reads otherwise
// than stored (when none does, frames is s.Frames itself).
func (p *Profile) displayFrames(s Stack) (frames []string, changed bool) {
	base := ""
	if path := p.Binaries[s.BuildID]; path != "" && s.BuildID != "" {
		base = profileschema.RawFramePrefix(path)
	}
	if base == "" || !slices.ContainsFunc(s.Frames, func(f string) bool { return strings.HasPrefix(f, base) }) {
		return s.Frames, false
	}
	out := make([]string, len(s.Frames))
	for i, f := range s.Frames {
		if off, ok := strings.CutPrefix(f, base); ok {
			out[i] = "[build_id:" + ShortBuildID(s.BuildID) + "] 0x" + off
		} else {
			out[i] = f
		}
	}
	return out, true
}

// Unsymbolized counts the samples whose stack has a frame of its own
// build's binary that could not be symbolized (shown as "[build_id:…] 0x…"),
// and lists those builds, sorted: what `hotpath symbolize` can name later.
func (p *Profile) Unsymbolized() (samples int64, builds []string) {
	seen := map[string]bool{}
	for _, s := range p.Stacks {
		if _, changed := p.displayFrames(s); changed {
			samples += s.Count
			if !seen[s.BuildID] {
				seen[s.BuildID] = true
				builds = append(builds, s.BuildID)
			}
		}
	}
	slices.Sort(builds)
	return samples, builds
}

// line is s's frames as shown (DisplayFrames), joined by ';'.
func (p *Profile) line(s Stack) string {
	frames, changed := p.displayFrames(s)
	if !changed && s.folded != "" {
		return s.folded
	}
	return strings.Join(frames, ";")
}

// Annotated reports whether stacks carry a build ID prefix: when the range
// spans several builds (RFD 072).
func (p *Profile) Annotated() bool { return len(p.BuildIDs()) > 1 }

// FoldedLine is one line of folded output.
type FoldedLine struct {
	Stack string
	Count int64
}

// Folded merges stacks into flamegraph.pl lines, "root;...;leaf count",
// prefixed "[build_id:abc123] " when the profile spans several builds;
// most samples first, ties by line.
func (p *Profile) Folded() []FoldedLine {
	annotate := p.Annotated()
	out := make([]FoldedLine, 0, len(p.Stacks))
	at := make(map[string]int, len(p.Stacks))
	for _, s := range p.Stacks {
		key := p.line(s)
		if annotate {
			id := ShortBuildID(s.BuildID)
			if id == "" {
				id = "unknown"
			}
			key = "[build_id:" + id + "] " + key
		}
		if i, ok := at[key]; ok {
			out[i].Count += s.Count
			continue
		}
		at[key] = len(out)
		out = append(out, FoldedLine{key, s.Count})
	}
	// Stacks come sorted (sortStacks) in the order of their lines unless
	// some merged, so this sort mostly finds the lines in order.
	sortLines(out)
	return out
}

func sortedLines(sums map[string]int64) []FoldedLine {
	out := make([]FoldedLine, 0, len(sums))
	for k, v := range sums {
		out = append(out, FoldedLine{k, v})
	}
	sortLines(out)
	return out
}

// sortLines orders lines by count, most first, then by line.
func sortLines(lines []FoldedLine) {
	slices.SortFunc(lines, func(a, b FoldedLine) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Stack, b.Stack))
	})
}

// WriteFolded writes the folded lines.
func (p *Profile) WriteFolded(w io.Writer) error {
	var tail []byte
	for _, l := range p.Folded() {
		if _, err := io.WriteString(w, l.Stack); err != nil {
			return err
		}
		tail = append(strconv.AppendInt(append(tail[:0], ' '), l.Count, 10), '\n')
		if _, err := w.Write(tail); err != nil {
			return err
		}
	}
	return nil
}

// WriteJSON writes the profile as one JSON document.
func (p *Profile) WriteJSON(w io.Writer) error {
	type stack struct {
		BuildID string   `json:"build_id"`
		Frames  []string `json:"frames"`
		// FrameInfo is what each of Frames is (same index).
		FrameInfo []FrameInfo `json:"frame_info"`
		Samples   int64       `json:"samples"`
	}
	doc := struct {
		Service  string            `json:"service"`
		Tier     Tier              `json:"tier"`
		Since    time.Time         `json:"since"`
		Until    time.Time         `json:"until"`
		Samples  int64             `json:"total_samples"`
		BuildIDs []string          `json:"build_ids"`
		Binaries map[string]string `json:"binaries"`
		Stacks   []stack           `json:"stacks"`
	}{p.Service, p.Tier, p.Range.Since, p.Range.Until, p.Total(), p.BuildIDs(), p.Binaries, nil}
	for _, s := range p.Stacks {
		info := make([]FrameInfo, len(s.Frames))
		for i, f := range s.Frames {
			info[i] = p.Frame(f)
		}
		doc.Stacks = append(doc.Stacks, stack{s.BuildID, p.DisplayFrames(s), info, s.Count})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// asInt64 reads a count from an endpoint (json.Number) or driver value.
func asInt64(v any) (int64, error) {
	switch x := v.(type) {
	case json.Number:
		return x.Int64()
	case int64:
		return x, nil
	case int32:
		return int64(x), nil
	case int:
		return int64(x), nil
	case float64:
		return int64(x), nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("unexpected %T %v for a count", v, v)
}

func asString(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	}
	return fmt.Sprint(v)
}

func asStrings(v any) []string {
	switch x := v.(type) {
	case []string:
		return x
	case []any:
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = asString(e)
		}
		return out
	}
	return nil
}

// ServiceSummary is a service's samples in a range.
type ServiceSummary struct {
	Service string
	Samples int64
	Builds  int64
}

// listedServices is how many services an error message names: a gateway
// serves hundreds, and a user looking for one needs the busiest and a count.
const listedServices = 10

// ListServices names svcs (busiest first) with their samples for an error
// message: the first ten, then how many more and their samples.
func ListServices(svcs []ServiceSummary) string {
	var parts []string
	var more, moreSamples int64
	for i, s := range svcs {
		if i < listedServices {
			parts = append(parts, fmt.Sprintf("%s (%d samples)", s.Service, s.Samples))
			continue
		}
		more++
		moreSamples += s.Samples
	}
	if more > 0 {
		parts = append(parts, fmt.Sprintf("and %d more with %d samples in all", more, moreSamples))
	}
	return strings.Join(parts, ", ")
}

// Services lists the services with samples in r, busiest first.
func Services(ctx context.Context, src Source, r timerange.Range) ([]ServiceSummary, error) {
	tb := tablesOf(src)
	res, err := src.Query(ctx, fmt.Sprintf(`SELECT service_id, sum(sample_count)::BIGINT, count(DISTINCT build_id)::BIGINT FROM %s
WHERE %s >= %s AND %s < %s GROUP BY service_id ORDER BY 2 DESC, 1`, tb.stacks, tb.timeCol, sqlTime(r.Since), tb.timeCol, sqlTime(r.Until)))
	if err != nil {
		return nil, fmt.Errorf("list services on %s: %w", src.Describe(), err)
	}
	out := make([]ServiceSummary, 0, len(res.Rows))
	for _, row := range res.Rows {
		n, _ := asInt64(row[1])
		b, _ := asInt64(row[2])
		out = append(out, ServiceSummary{asString(row[0]), n, b})
	}
	return out, nil
}

// workloadWhere selects sel's pod and container. Files before schema
// version 7 know pods by name on the gateway tier only, and no containers.
func (tb tables) workloadWhere(src Source, sel Selector) (string, error) {
	var where string
	if sel.Pod != "" {
		switch {
		case tb.workload && src.Tier() == Summary:
			where += " AND (pod_name = " + sqlquery.Quote(sel.Pod) + " OR k8s_pod_uid = " + sqlquery.Quote(sel.Pod) + ")"
		case tb.workload:
			where += " AND k8s_pod_uid = " + sqlquery.Quote(sel.Pod)
		case src.Tier() == Summary:
			where += " AND pod_name = " + sqlquery.Quote(sel.Pod)
		default:
			return "", fmt.Errorf("--pod: %s predates pod UIDs in storage (schema version 7) and its agent tier has no pod names; the collector upgrades it when it opens it", src.Describe())
		}
	}
	if sel.Container != "" {
		if !tb.workload {
			return "", fmt.Errorf("--container: %s predates containers in storage (schema version 7); the collector upgrades it when it opens it", src.Describe())
		}
		where += " AND starts_with(container_id, " + sqlquery.Quote(sel.Container) + ")"
	}
	return where, nil
}
