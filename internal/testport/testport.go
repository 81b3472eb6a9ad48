// Package testport gives tests, and the programs that test the product
// (the bench, the soak test), loopback ports for servers that must be told
// their port before they bind it: a collector process's configuration, a
// component's endpoint setting.
package testport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// given are the ports Pick has returned in this process.
var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// first is the lowest port Pick hands out: above the ports make run and
// common services use.
const first = 20000

// Free returns a loopback port that was free a moment ago and that no
// earlier call returned (Pick), failing t when there is none.
func Free(t testing.TB) int {
	t.Helper()
	port, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Pick returns a loopback port that was free a moment ago and that no
// earlier call in this process returned, for programs that are not tests
// (the bench, the soak test). The kernel can hand the same port to two
// binds in a row once the first is closed: the gateway's and the agent's
// SQL endpoints of one test once got the same one, and the agent could not
// start. The port is below the kernel's ephemeral range: a port from that
// range (what a listen on port 0 gives) can be taken by any outgoing
// connection before the server binds it, which once kept a gateway
// restarted during an outage from starting ("address already in use").
func Pick() (int, error) {
	mu.Lock()
	defer mu.Unlock()
	lo := ephemeralLow()
	span := lo - first
	if span <= 0 {
		return 0, fmt.Errorf("the ephemeral port range starts at %d: no room below it for test ports", lo)
	}
	start := rand.IntN(span)
	for i := range span {
		port := first + (start+i)%span
		if given[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // in use
		}
		l.Close()
		given[port] = true
		return port, nil
	}
	return 0, fmt.Errorf("no free loopback port in %d-%d", first, lo-1)
}

// Addr is Free's port as 127.0.0.1:PORT.
func Addr(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", Free(t))
}

// ephemeralLow is the first port of the kernel's range for outgoing
// connections (ip_local_port_range; Linux's default when unreadable).
func ephemeralLow() int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				lo = n
			}
		}
	}
	return lo
}
