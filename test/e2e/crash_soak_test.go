//go:build privileged && soak

package e2e

import (
	"testing"
	"time"
)

// The long crash run of `make soak` (build tags soak and privileged): 12 minutes of a
// profiled program, the gateway killed with kill -9 twelve times (about half
// timed into its writes, one followed by a 60 s outage during which the agent
// is killed too) and the agent three more times.
func TestCrashSoak(t *testing.T) {
	rep := runCrashScenario(t, crashPlan{workload: 12 * time.Minute, gatewayKills: 12, outage: 60 * time.Second, agentKills: 3})
	if rep.replays < 3 {
		t.Errorf("only %d gateway restarts replayed their write-ahead log", rep.replays)
	}
}
