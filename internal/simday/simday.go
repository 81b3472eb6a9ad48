// Package simday simulates what a busy host's profiler produces, so storage
// and query costs can be measured on a whole day (or month) of data in a
// few minutes: an accelerated clock steps through 15 s intervals, and each
// interval's samples are drawn from per-service call graphs with realistic
// depth, stack diversity and trace tagging.
package simday

import (
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"
)

// Params describe the simulated host.
type Params struct {
	Services int           // services on the host, sharing its samples evenly
	Hz       int           // sampling frequency per CPU
	Cores    int           // busy CPUs
	Interval time.Duration // receiver interval (one OTLP batch)
	// MinDepth and MaxDepth bound stack depth (uniform).
	MinDepth, MaxDepth int
	// StackPool is how many distinct stacks a service can produce in a day;
	// HotStacks of them take HotShare of its samples, the rest are uniform.
	StackPool int
	HotStacks int
	HotShare  float64
	// TraceShare of samples fall inside a traced request; a request lasts
	// 1..MaxTraceSamples consecutive samples of its service.
	TraceShare      float64
	MaxTraceSamples int
	Seed            uint64
}

// Default is the brief's host: 10 services on a busy 2-core machine sampled
// at 19 Hz, 15-frame stacks on average, about 200 distinct stacks per
// service-minute, a third of the samples trace-tagged.
func Default() Params {
	return Params{
		Services: 10, Hz: 19, Cores: 2, Interval: 15 * time.Second,
		MinDepth: 10, MaxDepth: 20,
		StackPool: 20000, HotStacks: 10, HotShare: 0.10,
		TraceShare: 0.3, MaxTraceSamples: 6,
		Seed: 72,
	}
}

// Validate says what is wrong with p, if anything.
func (p Params) Validate() error {
	switch {
	case p.Services <= 0 || p.Hz <= 0 || p.Cores <= 0:
		return fmt.Errorf("services, hz and cores must be positive (got %d, %d, %d)", p.Services, p.Hz, p.Cores)
	case p.Interval < time.Second:
		return fmt.Errorf("interval must be at least 1s, got %s", p.Interval)
	case p.MinDepth < 1 || p.MaxDepth < p.MinDepth:
		return fmt.Errorf("depth range [%d, %d] is empty", p.MinDepth, p.MaxDepth)
	case p.StackPool <= 0 || p.HotStacks < 0 || p.HotStacks > p.StackPool:
		return fmt.Errorf("stack pool %d with %d hot stacks is impossible", p.StackPool, p.HotStacks)
	case p.HotShare < 0 || p.HotShare > 1 || p.TraceShare < 0 || p.TraceShare > 1:
		return fmt.Errorf("shares must be in [0, 1] (hot %v, trace %v)", p.HotShare, p.TraceShare)
	case p.MaxTraceSamples < 1:
		return fmt.Errorf("max_trace_samples must be at least 1, got %d", p.MaxTraceSamples)
	}
	return nil
}

// SamplesPerInterval is how many samples the whole host yields per interval.
func (p Params) SamplesPerInterval() int {
	return p.Hz * p.Cores * int(p.Interval/time.Second)
}

// Service is one simulated service: its identity and its stacks.
type Service struct {
	Name    string
	Pod     string
	BuildID string // 40 hex chars, like a GNU build ID
	ExePath string
	// Stacks are root first, as frame names.
	Stacks [][]string
}

// Sample is one sampled stack of a service, with its trace context.
type Sample struct {
	Stack   int    // index into Service.Stacks
	TraceID []byte // 16 bytes, nil outside traced requests
	SpanID  []byte // 8 bytes
}

// Interval is what the host sampled in one interval, per service.
type Interval struct {
	Start   time.Time
	Samples [][]Sample // by service index
}

// Host generates intervals. It is deterministic for a given Params.Seed.
type Host struct {
	P        Params
	Services []*Service
	rng      *rand.Rand
	traces   []traceState
}

type traceState struct {
	left          int
	trace, spanID []byte
}

// NewHost builds the services' call graphs and stack pools.
func NewHost(p Params) (*Host, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("simulated host: %w", err)
	}
	h := &Host{P: p, rng: rand.New(rand.NewPCG(p.Seed, 0x5eed)), traces: make([]traceState, p.Services)}
	for i := 0; i < p.Services; i++ {
		h.Services = append(h.Services, h.newService(i))
	}
	return h, nil
}

// roots are the frames every Go service's request stacks start with.
var roots = [][]string{
	{"runtime.goexit", "net/http.(*conn).serve", "net/http.serverHandler.ServeHTTP", "net/http.(*ServeMux).ServeHTTP"},
	{"runtime.goexit", "google.golang.org/grpc.(*Server).serveStreams.func2.1", "google.golang.org/grpc.(*Server).handleStream", "google.golang.org/grpc.(*Server).processUnaryRPC"},
	{"runtime.goexit", "runtime.main", "main.main", "main.(*worker).run"},
}

// layerWidth functions per call-graph layer, each calling fanOut functions
// of the next layer: deep, branching stacks sharing their root-side frames.
const (
	layerWidth = 40
	fanOut     = 4
)

var verbs = []string{"Handle", "Decode", "Encode", "Validate", "Lookup", "Store", "Render", "Marshal", "Compute", "Fetch", "Apply", "Scan"}
var pkgs = []string{"api", "store", "cache", "auth", "billing", "search", "render", "codec", "queue", "policy"}

func (h *Host) newService(i int) *Service {
	name := fmt.Sprintf("svc-%02d", i)
	build := make([]byte, 20)
	for j := range build {
		build[j] = byte(h.rng.Uint32())
	}
	s := &Service{
		Name: name, Pod: fmt.Sprintf("%s-7d9f6c-%c%c%c%c%c", name, 'a'+i, 'b', 'c'+i%3, 'x', 'z'),
		BuildID: hex.EncodeToString(build), ExePath: "/usr/local/bin/" + name,
	}
	layers := h.P.MaxDepth
	fn := make([][]string, layers)
	callees := make([][][]int, layers)
	for l := 0; l < layers; l++ {
		fn[l] = make([]string, layerWidth)
		callees[l] = make([][]int, layerWidth)
		for k := range fn[l] {
			fn[l][k] = fmt.Sprintf("github.com/acme/%s/internal/%s.(*%s%d).%s%d", name, pkgs[(l+k)%len(pkgs)], "Type", k%7, verbs[(l*7+k)%len(verbs)], l*layerWidth+k)
			for c := 0; c < fanOut; c++ {
				callees[l][k] = append(callees[l][k], h.rng.IntN(layerWidth))
			}
		}
	}
	seen := map[string]bool{}
	for len(s.Stacks) < h.P.StackPool {
		root := roots[h.rng.IntN(len(roots))]
		depth := h.P.MinDepth + h.rng.IntN(h.P.MaxDepth-h.P.MinDepth+1)
		st := append([]string(nil), root...)
		k := h.rng.IntN(layerWidth)
		for l := 0; len(st) < depth; l++ {
			st = append(st, fn[l][k])
			k = callees[l][k][h.rng.IntN(fanOut)]
		}
		st = st[:depth]
		key := fmt.Sprint(st)
		if seen[key] {
			continue
		}
		seen[key] = true
		s.Stacks = append(s.Stacks, st)
	}
	return s
}

// Next draws the samples of the interval starting at start.
func (h *Host) Next(start time.Time) Interval {
	iv := Interval{Start: start, Samples: make([][]Sample, len(h.Services))}
	for range h.P.SamplesPerInterval() {
		si := h.rng.IntN(len(h.Services))
		var st int
		if h.P.HotStacks > 0 && h.rng.Float64() < h.P.HotShare {
			st = h.rng.IntN(h.P.HotStacks)
		} else {
			st = h.rng.IntN(h.P.StackPool)
		}
		smp := Sample{Stack: st}
		if h.rng.Float64() < h.P.TraceShare {
			ts := &h.traces[si]
			if ts.left == 0 {
				ts.trace, ts.spanID = h.randBytes(16), h.randBytes(8)
				ts.left = 1 + h.rng.IntN(h.P.MaxTraceSamples)
			}
			ts.left--
			smp.TraceID, smp.SpanID = ts.trace, ts.spanID
		}
		iv.Samples[si] = append(iv.Samples[si], smp)
	}
	return iv
}

func (h *Host) randBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(h.rng.Uint32())
	}
	b[0] |= 1 // never the all-zero (invalid) ID
	return b
}
