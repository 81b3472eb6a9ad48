package stackaggregatorprocessor

import (
	"math"
	"sort"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/processor/stackaggregatorprocessor/internal/wal"
)

// Names of the synthetic stacks that keep totals exact when stacks are
// dropped: overflow of max_unique_stacks, and min_share/top_n pruning.
const (
	TruncatedFrame = "[truncated]"
	OtherFrame     = "[other]"
)

// seriesKey is what samples are merged by: processes of one service on one
// pod (or host) running one build in one container are one series.
type seriesKey struct {
	Service, Pod, BuildID string
	PodUID, ContainerID   string
}

// sampleKey is a merged sample inside a series: identical stacks with the
// same trace link and sample attributes (ids of the window's frameDict).
type sampleKey struct {
	stack, link, attrs int32
}

// slot is one sample type of a series (samples/count, cpu/nanoseconds, ...)
// at one sampling period. Each input profile is merged into the slot of its
// sample type and period.
type slot struct {
	sampleType, sampleUnit string
	periodType, periodUnit string
	period                 int64
}

type entry struct {
	key    sampleKey
	values []int64 // per slot
}

type series struct {
	key       seriesKey
	resource  pcommon.Map // attributes every merged resource agrees on
	schemaURL string
	scopeName string
	scopeVer  string
	slots     []slot
	entries   []entry
	index     map[sampleKey]int32
	truncated int32 // entry index of the [truncated] stack, -1 when none
	overflow  bool  // the window's OverflowService series
}

// slotIndex is the slot of s's sample type at s's period: samples taken at
// another frequency (a node moved from 19 to 49 Hz mid-window, a 99 Hz
// capture beside continuous profiling) stay apart, so each is emitted, and
// later turned into CPU time, at its own period.
func (sr *series) slotIndex(s slot) int {
	for i, have := range sr.slots {
		if have == s {
			return i
		}
	}
	sr.slots = append(sr.slots, s)
	return len(sr.slots) - 1
}

func (sr *series) addValue(e int32, slot int, v int64) {
	vals := sr.entries[e].values
	if slot >= len(vals) {
		grown := make([]int64, len(sr.slots))
		copy(grown, vals)
		vals = grown
		sr.entries[e].values = vals
	}
	// Saturate: merged counts from a hostile sender must not wrap negative.
	if vals[slot] > math.MaxInt64-v {
		vals[slot] = math.MaxInt64
		return
	}
	vals[slot] += v
}

func (sr *series) newEntry(k sampleKey) int32 {
	e := int32(len(sr.entries))
	sr.entries = append(sr.entries, entry{key: k, values: make([]int64, len(sr.slots))})
	sr.index[k] = e
	return e
}

// window is everything buffered for [start, start+length).
type window struct {
	start     int64  // unix nanoseconds, a multiple of the window length
	id        string // identity of this window's emission (hotpath.batch.id)
	dict      *frameDict
	series    []*series
	seriesIdx map[seriesKey]*series
	overflow  *series // series beyond max_series, merged; nil until needed
}

// OverflowService names the series that holds the samples of series beyond
// max_series in a window.
const OverflowService = "[overflow]"

func (w *window) overflowSeries(sp pprofile.ScopeProfiles) *series {
	if w.overflow == nil {
		w.overflow = &series{
			key:      seriesKey{Service: OverflowService},
			resource: pcommon.NewMap(), scopeName: sp.Scope().Name(), scopeVer: sp.Scope().Version(),
			index: map[sampleKey]int32{}, truncated: -1, overflow: true,
		}
		w.overflow.resource.PutStr(profileschema.AttrServiceName, OverflowService)
		// Emitted with the others; not in seriesIdx, so a real series
		// named "[overflow]" stays apart.
		w.series = append(w.series, w.overflow)
	}
	return w.overflow
}

// addStats counts what one Add did; the processor turns them into metrics.
type addStats struct {
	Samples   int64 // input sample records read
	Late      int64 // records whose window had already closed
	Truncated int64 // records folded into [truncated] by max_unique_stacks
	Malformed int64 // records skipped for out-of-range indices or negative/overflowing values
	// Overflow counts records of series beyond max_series, merged into the
	// OverflowService series.
	Overflow int64
	// OutOfRange counts values skipped for a time outside
	// profileschema.SampleTimeAccepted: a future window would stay open (in
	// memory) until that time, one per distinct forged timestamp.
	OutOfRange int64
}

// aggregator merges samples into wall-clock-aligned windows. It is not safe
// for concurrent use; the processor serializes calls.
type aggregator struct {
	window          time.Duration
	maxDelay        time.Duration
	maxUniqueStacks int
	maxSeries       int
	minShare        float64
	topN            int

	windows map[int64]*window
	// newWindowID names a window when it opens. The name goes with the
	// emitted batch, so a window written twice (after a crash) is stored once.
	newWindowID func() string
	// route, during Add, fixes the id of each window start the batch goes
	// to (from the write-ahead log); nil lets windows be named freshly.
	route map[int64]string
	// displaced holds windows a replayed batch shows were closed before it
	// arrived (its route names another window for their start); they are
	// due at the next Flush.
	displaced []*window
}

// newAggregator builds an aggregator from a validated Config.
func newAggregator(cfg *Config) *aggregator {
	return &aggregator{
		window:          cfg.Window,
		maxDelay:        cfg.MaxDelay,
		maxUniqueStacks: cfg.MaxUniqueStacks,
		maxSeries:       cfg.MaxSeries,
		minShare:        cfg.MinShare,
		topN:            cfg.TopN,
		windows:         map[int64]*window{},
		newWindowID:     newIDSource(),
	}
}

func (a *aggregator) windowStart(t int64) int64 {
	w := int64(a.window)
	s := t - t%w
	if t < 0 && t%w != 0 {
		s -= w
	}
	return s
}

// closed reports whether the window starting at start is due at now.
func (a *aggregator) closed(start int64, now time.Time) bool {
	return start+int64(a.window)+int64(a.maxDelay) <= now.UnixNano()
}

func (a *aggregator) getWindow(start int64) *window {
	w := a.windows[start]
	id, routed := a.route[start]
	if w != nil && routed && w.id != id {
		// Replay: when this batch arrived, the window it found open for
		// start was another one, so w had been closed by then.
		a.displaced = append(a.displaced, w)
		w = nil
	}
	if w == nil {
		if !routed {
			id = a.newWindowID()
		}
		w = &window{start: start, id: id, dict: newFrameDict(), seriesIdx: map[seriesKey]*series{}}
		a.windows[start] = w
	}
	return w
}

// unusedRoutes are the routed window ids that no window took (their
// samples were all malformed), so nothing will ever commit them.
func (a *aggregator) unusedRoutes(routes []wal.Route) []string {
	var ids []string
	for _, rt := range routes {
		if w := a.windows[rt.Start]; w == nil || w.id != rt.WindowID {
			ids = append(ids, rt.WindowID)
		}
	}
	return ids
}

// Routes says, for each window start pd's samples fall in, the id of the
// window they would go to now: the open window's, or a fresh one's. Add
// with the same routes then merges them exactly there; the routes are what
// the write-ahead log records so a replay rebuilds the same windows.
func (a *aggregator) Routes(pd pprofile.Profiles, now time.Time) []wal.Route {
	var routes []wal.Route
	seen := map[int64]bool{}
	rps := pd.ResourceProfiles()
	for r := 0; r < rps.Len(); r++ {
		sps := rps.At(r).ScopeProfiles()
		for s := 0; s < sps.Len(); s++ {
			profs := sps.At(s).Profiles()
			for p := 0; p < profs.Len(); p++ {
				prof := profs.At(p)
				samples := prof.Samples()
				for i := 0; i < samples.Len(); i++ {
					sampleValues(prof, samples.At(i), now, func(t, v int64) bool {
						if !profileschema.SampleTimeAccepted(uint64(t), now) {
							return true
						}
						if v < 0 {
							return false
						}
						if start := a.windowStart(t); !seen[start] {
							seen[start] = true
							id := a.newWindowID()
							if w := a.windows[start]; w != nil {
								id = w.id
							}
							routes = append(routes, wal.Route{Start: start, WindowID: id})
						}
						return true
					})
				}
			}
		}
	}
	return routes
}

// batchCache translates one input's stack and link indices into one window's
// ids, so each input stack is keyed once per batch, not once per sample.
type batchCache struct {
	w      *window
	stacks []int32 // input stack index → window stack id; 0 unknown, -1 malformed
	links  []int32 // input link index → window link id; 0 unknown
	frames []int32
	key    []byte
}

func (bc *batchCache) stack(in *inputDict, i int32, insert bool) (int32, bool) {
	if i < 0 || int(i) >= len(bc.stacks) {
		return 0, false
	}
	switch c := bc.stacks[i]; {
	case c > 0:
		return c, true
	case c < 0:
		return 0, false
	}
	li := in.stacks.At(int(i)).LocationIndices()
	bc.frames = bc.frames[:0]
	absent := false
	for j := 0; j < li.Len(); j++ {
		id, ok := bc.w.dict.frameID(in, li.At(j), insert)
		if !ok {
			bc.stacks[i] = -1
			return 0, false
		}
		if id == 0 {
			absent = true // keep checking the rest for malformed indices
		}
		bc.frames = append(bc.frames, id)
	}
	if absent {
		return 0, true
	}
	bc.key = appendStackKey(bc.key[:0], bc.frames)
	var id int32
	if insert {
		id = bc.w.dict.internStack(bc.key, bc.frames)
	} else {
		id = bc.w.dict.lookupStack(bc.key)
	}
	if id > 0 {
		bc.stacks[i] = id
	}
	return id, true
}

func (bc *batchCache) link(in *inputDict, i int32, insert bool) (int32, bool) {
	if i == 0 {
		return 0, true
	}
	if i < 0 || int(i) >= len(bc.links) {
		return 0, false
	}
	if c := bc.links[i]; c > 0 {
		return c, true
	}
	l := in.links.At(int(i))
	var k link
	tid, sid := l.TraceID(), l.SpanID()
	copy(k[:16], tid[:])
	copy(k[16:], sid[:])
	var id int32
	if insert {
		id = bc.w.dict.internLink(k)
	} else {
		id = bc.w.dict.linkIdx[k]
	}
	if id > 0 {
		bc.links[i] = id
	}
	return id, true
}

// resourceSeries remembers, for one input resource, the series it feeds in
// each window it touched (its attributes are merged once per window).
type resourceSeries struct {
	windows []*window
	series  []*series
}

// Add merges every sample of pd. now decides lateness and stands in for a
// missing Profile.Time. routes (from Routes, or a replayed log record) name
// the windows the samples go to; nil names new windows freshly.
func (a *aggregator) Add(pd pprofile.Profiles, now time.Time, routes []wal.Route) addStats {
	var st addStats
	if routes != nil {
		a.route = make(map[int64]string, len(routes))
		for _, rt := range routes {
			a.route[rt.Start] = rt.WindowID
		}
		defer func() { a.route = nil }()
	}
	in := newInputDict(pd.Dictionary())
	var caches []*batchCache
	cacheFor := func(w *window) *batchCache {
		for _, c := range caches {
			if c.w == w {
				return c
			}
		}
		c := &batchCache{w: w, stacks: make([]int32, in.stacks.Len()), links: make([]int32, in.links.Len())}
		caches = append(caches, c)
		return c
	}

	rps := pd.ResourceProfiles()
	for r := 0; r < rps.Len(); r++ {
		rp := rps.At(r)
		res := rp.Resource()
		key := seriesKey{
			Service: profileschema.ServiceName(res), Pod: profileschema.PodName(res), BuildID: profileschema.BuildID(res),
			PodUID: profileschema.PodUID(res), ContainerID: profileschema.ContainerID(res),
		}
		var rs resourceSeries
		seriesIn := func(w *window, sp pprofile.ScopeProfiles) *series {
			for i, have := range rs.windows {
				if have == w {
					return rs.series[i]
				}
			}
			sr := w.seriesIdx[key]
			if sr == nil && len(w.series) >= a.maxSeries {
				// One more series than the window may hold: merge it into
				// the overflow series (counted per sample in merge).
				sr = w.overflowSeries(sp)
			} else if sr == nil {
				sr = &series{
					key: key, resource: pcommon.NewMap(), schemaURL: rp.SchemaUrl(),
					scopeName: sp.Scope().Name(), scopeVer: sp.Scope().Version(),
					index: map[sampleKey]int32{}, truncated: -1,
				}
				res.Attributes().CopyTo(sr.resource)
				w.seriesIdx[key] = sr
				w.series = append(w.series, sr)
			} else {
				other := res.Attributes()
				sr.resource.RemoveIf(func(k string, v pcommon.Value) bool {
					ov, ok := other.Get(k)
					return !ok || !ov.Equal(v)
				})
			}
			rs.windows = append(rs.windows, w)
			rs.series = append(rs.series, sr)
			return sr
		}

		sps := rp.ScopeProfiles()
		for s := 0; s < sps.Len(); s++ {
			sp := sps.At(s)
			profs := sp.Profiles()
			for p := 0; p < profs.Len(); p++ {
				a.addProfile(&st, in, profs.At(p), sp, now, cacheFor, seriesIn)
			}
		}
	}
	return st
}

// cursor holds the lookups of the window the last sample landed in: the
// receiver's samples all fall in their profile's window, so the common case
// costs one comparison per sample.
type cursor struct {
	start int64
	bc    *batchCache
	sr    *series
	slot  int
}

func (a *aggregator) addProfile(st *addStats, in *inputDict, prof pprofile.Profile, sp pprofile.ScopeProfiles, now time.Time,
	cacheFor func(*window) *batchCache, seriesIn func(*window, pprofile.ScopeProfiles) *series,
) {
	samples := prof.Samples()
	st.Samples += int64(samples.Len())
	typ, ok1 := in.str(prof.SampleType().TypeStrindex())
	unit, ok2 := in.str(prof.SampleType().UnitStrindex())
	ptyp, ok3 := in.str(prof.PeriodType().TypeStrindex())
	punit, ok4 := in.str(prof.PeriodType().UnitStrindex())
	if !ok1 || !ok2 || !ok3 || !ok4 {
		st.Malformed += int64(samples.Len())
		return
	}
	sl := slot{sampleType: typ, sampleUnit: unit, periodType: ptyp, periodUnit: punit, period: prof.Period()}
	var cur cursor
	// add merges value v at time t; late reports whether t's window had closed.
	add := func(smp pprofile.Sample, t, v int64) (ok, late bool) {
		if !profileschema.SampleTimeAccepted(uint64(t), now) {
			st.OutOfRange++
			return true, false // the sample's other timestamps may be fine
		}
		if v < 0 {
			st.Malformed++
			return false, false
		}
		if start := a.windowStart(t); cur.bc == nil || start != cur.start {
			w := a.getWindow(start)
			cur.start, cur.bc, cur.sr = start, cacheFor(w), seriesIn(w, sp)
			cur.slot = cur.sr.slotIndex(sl)
		}
		return a.merge(st, in, cur.bc, cur.sr, cur.slot, smp, v), a.closed(cur.start, now)
	}

	for i := 0; i < samples.Len(); i++ {
		smp := samples.At(i)
		late := false
		if !sampleValues(prof, smp, now, func(t, v int64) bool {
			ok, l := add(smp, t, v)
			late = late || l
			return ok
		}) {
			st.Malformed++
			continue
		}
		if late {
			st.Late++
		}
	}
}

// sampleValues calls fn with each (time, value) a sample contributes: one
// per timestamp when it has them, else its summed count at the sample's (or
// its profile's, or now's) time. fn returns false to skip the sample's
// remaining values. sampleValues returns false, without calling fn, for a
// count that is negative or overflows.
func sampleValues(prof pprofile.Profile, smp pprofile.Sample, now time.Time, fn func(t, v int64) bool) bool {
	ts, vs := smp.TimestampsUnixNano(), smp.Values()
	if ts.Len() > 0 && (ts.Len() == vs.Len() || vs.Len() == 0) {
		// One value per timestamp (or a count of one each): every
		// timestamp lands in its own window.
		for j := 0; j < ts.Len(); j++ {
			v := int64(1)
			if vs.Len() > 0 {
				v = vs.At(j)
			}
			if !fn(int64(ts.At(j)), v) {
				break
			}
		}
		return true
	}
	t := int64(prof.Time())
	if t == 0 {
		t = now.UnixNano()
	}
	if ts.Len() > 0 {
		t = int64(profileschema.SampleTime(prof, smp))
	}
	v, ok := checkedCount(smp)
	if !ok {
		return false
	}
	fn(t, v)
	return true
}

// merge adds value v of one sample to series sr; false when the sample is
// malformed (and was counted so).
func (a *aggregator) merge(st *addStats, in *inputDict, bc *batchCache, sr *series, slIx int, smp pprofile.Sample, v int64) bool {
	full := len(sr.entries)-btoi(sr.truncated >= 0) >= a.maxUniqueStacks
	stack, ok := bc.stack(in, smp.StackIndex(), !full)
	if !ok {
		st.Malformed++
		return false
	}
	lnk, ok := bc.link(in, smp.LinkIndex(), !full)
	if !ok {
		st.Malformed++
		return false
	}
	attrs, ok := bc.w.dict.sampleAttrSet(in, smp.AttributeIndices(), !full)
	if !ok {
		st.Malformed++
		return false
	}
	if sr.overflow {
		st.Overflow++
	}
	k := sampleKey{stack: stack, link: lnk, attrs: attrs}
	e, found := sr.index[k]
	if !found {
		// When full, ids were only looked up: a zero id means the window
		// never saw that stack, link or attribute set, so k is new too.
		if full {
			if sr.truncated < 0 {
				sr.truncated = sr.newEntry(sampleKey{stack: bc.w.dict.syntheticStack(TruncatedFrame)})
			}
			e = sr.truncated
			st.Truncated++
		} else {
			e = sr.newEntry(k)
		}
	}
	sr.addValue(e, slIx, v)
	return true
}

// checkedCount sums a sample's values; false when one is negative or the
// sum overflows.
func checkedCount(smp pprofile.Sample) (int64, bool) {
	var n int64
	vs := smp.Values()
	for i := 0; i < vs.Len(); i++ {
		v := vs.At(i)
		if v < 0 || n > math.MaxInt64-v {
			return 0, false
		}
		n += v
	}
	return n, true
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Flush takes the windows due at now (all of them when all is set), oldest
// first, pruned by min_share/top_n and ready to emit.
func (a *aggregator) Flush(now time.Time, all bool) []*window {
	out := a.displaced
	a.displaced = nil
	for start, w := range a.windows {
		if all || a.closed(start, now) {
			out = append(out, w)
			delete(a.windows, start)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	for _, w := range out {
		for _, sr := range w.series {
			a.prune(w, sr)
		}
	}
	return out
}

// measureSlot is the slot pruning ranks by: sample counts when present.
func measureSlot(sr *series) int {
	for i, s := range sr.slots {
		if s.sampleType == profileschema.SampleTypeSamples && s.sampleUnit == profileschema.UnitCount {
			return i
		}
	}
	return 0
}

// prune folds the stacks below min_share or outside the top_n into one
// [other] stack. [truncated] is never pruned: it tells the reader that the
// memory bound, not the data, made it.
func (a *aggregator) prune(w *window, sr *series) {
	if a.topN <= 0 && a.minShare <= 0 {
		return
	}
	m := measureSlot(sr)
	val := func(e int) int64 {
		if v := sr.entries[e].values; m < len(v) {
			return v[m]
		}
		return 0
	}
	var total int64
	order := make([]int, 0, len(sr.entries))
	for e := range sr.entries {
		total += val(e)
		if int32(e) != sr.truncated {
			order = append(order, e)
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return val(order[i]) > val(order[j]) })
	drop := make([]bool, len(sr.entries))
	dropped := 0
	for rank, e := range order {
		if (a.topN > 0 && rank >= a.topN) || (a.minShare > 0 && float64(val(e)) < a.minShare*float64(total)) {
			drop[e] = true
			dropped++
		}
	}
	if dropped == 0 {
		return
	}
	other := entry{key: sampleKey{stack: w.dict.syntheticStack(OtherFrame)}, values: make([]int64, len(sr.slots))}
	kept := sr.entries[:0]
	truncated := int32(-1)
	for e, en := range sr.entries {
		if drop[e] {
			for s, v := range en.values {
				other.values[s] += v
			}
			continue
		}
		if int32(e) == sr.truncated {
			truncated = int32(len(kept))
		}
		kept = append(kept, en)
	}
	sr.entries = append(kept, other)
	sr.truncated = truncated
	sr.index = nil // no more merging into a pruned series
}
