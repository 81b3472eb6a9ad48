package stackaggregatorprocessor

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// randomInput is one receiver interval of nprocs random processes: stacks
// drawn from frames, some trace links, some timestamped samples.
func randomInput(rng *rand.Rand, frames []string, start time.Time, interval time.Duration, nprocs int) pprofile.Profiles {
	var procs []procSpec
	for p := 0; p < nprocs; p++ {
		ps := procSpec{
			service: []string{"api", "db"}[rng.IntN(2)],
			host:    []string{"h1", "h2"}[rng.IntN(2)],
			buildID: []string{"b1", "b2"}[rng.IntN(2)],
			pid:     int64(100 + rng.IntN(4)),
		}
		for s := 0; s < 1+rng.IntN(12); s++ {
			var stack []string
			for d := 0; d < 1+rng.IntN(6); d++ {
				stack = append(stack, frames[rng.IntN(len(frames))])
			}
			smp := sampleSpec{stack: stack, n: int64(1 + rng.IntN(10))}
			if rng.IntN(5) == 0 {
				smp.trace = byte(1 + rng.IntN(2))
			}
			if rng.IntN(4) == 0 {
				for k := 0; k < 1+rng.IntN(3); k++ {
					smp.ts = append(smp.ts, uint64(start.Add(time.Duration(rng.Int64N(int64(interval)))).UnixNano()))
				}
			}
			ps.samples = append(ps.samples, smp)
		}
		procs = append(procs, ps)
	}
	return input(start, interval, rng, frames, procs...)
}

var propFrames = []string{"main", "serve", "handle", "parse", "alloc", "gc", "read", "write", "lock", "hash"}

// minuteOfBatches is a minute of receiver output: four 15 s intervals with a
// few batches each (several agents).
func minuteOfBatches(rng *rand.Rand, start time.Time) []pprofile.Profiles {
	var out []pprofile.Profiles
	for i := 0; i < 4; i++ {
		for b := 0; b < 1+rng.IntN(3); b++ {
			out = append(out, randomInput(rng, propFrames, start.Add(time.Duration(i)*15*time.Second), 15*time.Second, 1+rng.IntN(3)))
		}
	}
	return out
}

func aggregate(cfg *Config, batches []pprofile.Profiles) []pprofile.Profiles {
	a := newAggregator(cfg)
	for _, b := range batches {
		a.Add(b, t0, nil)
	}
	return emitAll(a, cfg.Window)
}

func TestPropertyMergeIsOrderIndependent(t *testing.T) {
	for seed := uint64(0); seed < 25; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		batches := minuteOfBatches(rng, t0)
		want := canonical(t, aggregate(testConfig(15*time.Second), batches)...)
		if len(want) < 10 {
			t.Fatalf("seed %d: only %d merged samples: the generator is broken", seed, len(want))
		}
		shuffled := append([]pprofile.Profiles(nil), batches...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := canonical(t, aggregate(testConfig(15*time.Second), shuffled)...); !maps.Equal(got, want) {
			t.Fatalf("seed %d: result depends on input order:\n in order %v\n shuffled %v", seed, want, got)
		}
	}
}

func TestPropertyTotalsAreConserved(t *testing.T) {
	for seed := uint64(0); seed < 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		batches := minuteOfBatches(rng, t0)
		cfg := testConfig([]time.Duration{15 * time.Second, 60 * time.Second}[rng.IntN(2)])
		cfg.MaxUniqueStacks = 1 + rng.IntN(20)
		if rng.IntN(2) == 0 {
			cfg.TopN = rng.IntN(5)
		}
		if rng.IntN(2) == 0 {
			cfg.MinShare = rng.Float64() / 4
		}
		if got, want := totals(aggregate(cfg, batches)...), totals(batches...); !maps.Equal(got, want) {
			t.Fatalf("seed %d (%+v): totals %v, want %v", seed, cfg, got, want)
		}
	}
}

func TestPropertyFour15sWindowsRollUpToOne60sWindow(t *testing.T) {
	for seed := uint64(0); seed < 25; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		batches := minuteOfBatches(rng, t0)
		agent := aggregate(testConfig(15*time.Second), batches)
		if len(agent) != 4 {
			t.Fatalf("seed %d: agent emitted %d windows, want 4", seed, len(agent))
		}
		rolled := canonical(t, aggregate(testConfig(60*time.Second), agent)...)
		direct := canonical(t, aggregate(testConfig(60*time.Second), batches)...)
		if len(direct) < 10 {
			t.Fatalf("seed %d: only %d merged samples: the generator is broken", seed, len(direct))
		}
		if !maps.Equal(rolled, direct) {
			t.Fatalf("seed %d: rolled up %s\n direct %s", seed, fmt.Sprint(rolled), fmt.Sprint(direct))
		}
	}
}
