package stackaggregatorprocessor

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// newIDSource returns a generator of window ids: a random prefix drawn once
// per processor, so ids of two runs (or two collectors) never meet, and a
// counter. The id travels as hotpath.batch.id.
func newIDSource() func() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail on Linux
	prefix := hex.EncodeToString(b[:]) + "-"
	var n atomic.Uint64
	return func() string { return prefix + strconv.FormatUint(n.Add(1), 10) }
}
