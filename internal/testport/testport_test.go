package testport

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeGivesDistinctBindablePortsBelowTheEphemeralRange: each port can
// be bound, none is handed out twice, and all lie below the range the
// kernel picks outgoing connections' ports from.
func TestFreeGivesDistinctBindablePortsBelowTheEphemeralRange(t *testing.T) {
	lo := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		p := Free(t)
		if p < first || p >= lo {
			t.Fatalf("port %d outside [%d, %d)", p, first, lo)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
	addr := Addr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("bind %s: %v", addr, err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(addr)
	if n, _ := strconv.Atoi(port); seen[n] {
		t.Fatalf("Addr gave %s, which Free handed out before", addr)
	}
}
