package stackaggregatorprocessor

import (
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// FuzzAdd feeds arbitrary OTLP bytes to the aggregator: whatever decodes
// must merge and emit without panicking.
// `go test` runs the seeds; `go test -fuzz FuzzAdd` explores.
func FuzzAdd(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 3))
	var m pprofile.ProtoMarshaler
	for i := 0; i < 4; i++ {
		b, err := m.MarshalProfiles(randomInput(rng, propFrames, t0, 15*time.Second, 2))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var u pprofile.ProtoUnmarshaler
		pd, err := u.UnmarshalProfiles(data)
		if err != nil {
			return
		}
		cfg := testConfig(15 * time.Second)
		cfg.MaxUniqueStacks = 8
		a := newAggregator(cfg)
		st := a.Add(pd, t0, nil)
		for _, w := range a.Flush(time.Time{}, true) {
			emit(w, cfg.Window)
		}
		if st.Malformed > st.Samples || st.Late > st.Samples {
			t.Fatalf("stats %+v", st)
		}
	})
}
