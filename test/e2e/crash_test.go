//go:build privileged

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/selfmetrics"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// crashPlan is one run of the kill -9 scenario of issue 15: a CPU-bound
// program profiled by the shipped agent and gateway, while both are killed.
type crashPlan struct {
	workload     time.Duration // how long the profiled program runs
	gatewayKills int           // kill -9 of the gateway, restarted after 1-4 s
	outage       time.Duration // one of the gateway kills stays down this long, and the agent is killed during it
	agentKills   int           // kill -9 of the agent, restarted after 1-3 s
}

// crashReport is what a run measured.
type crashReport struct {
	gatewayKills, killsNearWrites, agentKills, replays int
	agent, gateway, lost, doubled                      int64
	minutes                                            int
}

func (r crashReport) String() string {
	return fmt.Sprintf("gateway kill -9: %d (%d timed at an agent send or a minute commit), agent kill -9: %d, gateway restarts that replayed its log: %d; "+
		"samples in the agent's local table: %d, in the gateway's summaries: %d, over %d minutes; lost %d, doubled %d",
		r.gatewayKills, r.killsNearWrites, r.agentKills, r.replays, r.agent, r.gateway, r.minutes, r.lost, r.doubled)
}

// shippedCollector runs bin/otelcol-hotpath with a config from
// distributions/ unchanged, as the README starts it; env changes only ports
// and directories, through the variables the config documents.
type shippedCollector struct {
	t    *testing.T
	role string
	env  []string
	cur  *collector
	logs []*syncBuffer // every run's output, for the failure report
}

func (s *shippedCollector) start() {
	s.t.Helper()
	for _, e := range s.env {
		if dir, ok := strings.CutPrefix(e, "HOTPATH_STATE_DIR="); ok {
			if err := os.MkdirAll(dir, 0o755); err != nil { // as scripts/run.sh does
				s.t.Fatal(err)
			}
		}
	}
	c := &collector{out: &syncBuffer{}}
	c.cmd = exec.Command(collectorBinary(s.t), "--config", filepath.Join("..", "..", "distributions", s.role, "config.yaml"))
	c.cmd.Env = append(os.Environ(), s.env...)
	c.cmd.Stdout, c.cmd.Stderr = c.out, c.out
	if err := c.cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.cur = c
	s.logs = append(s.logs, c.out)
	exited := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(exited) }()
	c.exited = exited
	waitFor(s.t, "the "+s.role+" to start", 90*time.Second, func() bool {
		select {
		case <-exited:
			s.t.Fatalf("the %s exited while starting:\n%s", s.role, c.out.String())
		default:
		}
		return strings.Contains(c.out.String(), "Everything is ready")
	})
}

func (s *shippedCollector) kill() {
	_ = s.cur.cmd.Process.Kill() // SIGKILL: no shutdown, no flush
	<-s.cur.exited
}

// stop is SIGTERM: the collector shuts down and flushes what it holds.
func (s *shippedCollector) stop() {
	s.t.Helper()
	_ = s.cur.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.cur.exited:
	case <-time.After(60 * time.Second):
		s.t.Fatalf("the %s did not stop within 60 s", s.role)
	}
}

func (s *shippedCollector) output() string {
	var b strings.Builder
	for i, l := range s.logs {
		fmt.Fprintf(&b, "--- %s run %d ---\n%s", s.role, i+1, l.String())
	}
	return b.String()
}

// nextAgentSend is when the agent next hands a window to its exporters: its
// 15 s windows close on the wall clock's quarter minutes, plus max_delay 5 s.
func nextAgentSend(now time.Time) time.Time {
	next := now.Truncate(15 * time.Second).Add(20 * time.Second)
	if next.Sub(now) > 15*time.Second {
		next = next.Add(-15 * time.Second)
	}
	return next
}

// nextMinuteCommit is when the gateway next writes a closed minute: 60 s
// window plus max_delay 30 s.
func nextMinuteCommit(now time.Time) time.Time {
	next := now.Truncate(time.Minute).Add(30 * time.Second)
	if !next.After(now) {
		next = next.Add(time.Minute)
	}
	return next
}

func runCrashScenario(t *testing.T, plan crashPlan) crashReport {
	service := fmt.Sprintf("e2e-crash-%d", time.Now().UnixNano()%1_000_000)
	pair := newShippedPair(t)
	gateway, agent, dir := pair.gateway, pair.agent, pair.dir
	gateway.start()
	agent.start()
	waitFor(t, "the agent to start sampling", 60*time.Second, func() bool {
		return strings.Contains(agent.cur.out.String(), "sampling every CPU")
	})

	workload := testworkload.Start(t, testworkload.BuildC(t), strconv.Itoa(int(plan.workload.Seconds())), "OTEL_SERVICE_NAME="+service)
	workloadDone := make(chan struct{})
	go func() { _ = workload.Wait(); close(workloadDone) }()

	// The kills, spread over the run: about half timed into the moment the
	// gateway writes (an agent batch arriving, a minute being committed).
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var rep crashReport
	type event struct {
		agent bool
		long  bool
	}
	var events []event
	for i := range plan.gatewayKills {
		events = append(events, event{long: plan.outage > 0 && i == plan.gatewayKills/2})
	}
	for range plan.agentKills {
		events = append(events, event{agent: true})
	}
	rng.Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	start := time.Now()
	spacing := plan.workload / time.Duration(len(events)+1)
	for i, ev := range events {
		at := start.Add(time.Duration(i+1) * spacing)
		if !ev.agent && rng.IntN(2) == 0 {
			// Into a write: just after an agent send, or a minute commit.
			if rng.IntN(2) == 0 {
				at = nextAgentSend(at).Add(time.Duration(rng.IntN(400)) * time.Millisecond)
			} else {
				at = nextMinuteCommit(at).Add(time.Duration(rng.IntN(1200)) * time.Millisecond)
			}
			rep.killsNearWrites++
		} else {
			at = at.Add(time.Duration(rng.IntN(int(spacing/2/time.Millisecond)+1)) * time.Millisecond)
		}
		time.Sleep(time.Until(at)) // the schedule of the kills is the test's input, not a wait for a condition
		if ev.agent {
			agent.kill()
			rep.agentKills++
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
			agent.start()
			continue
		}
		gateway.kill()
		rep.gatewayKills++
		if !ev.long {
			time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
			gateway.start()
			continue
		}
		// A long outage, and the agent killed in the middle of it: what it
		// queued for the absent gateway must survive its own crash too.
		time.Sleep(plan.outage / 3)
		agent.kill()
		rep.agentKills++
		time.Sleep(2 * time.Second)
		agent.start()
		time.Sleep(time.Until(at.Add(plan.outage)))
		gateway.start()
	}
	<-workloadDone

	// Everything of the program is in the agent's table once its total
	// stops moving for longer than a window plus its delay; everything the
	// agent queued is at the gateway once the queue is empty.
	agentEndpoint := pair.agentQuery
	where := fmt.Sprintf("service_id = '%s'", service)
	var last int64 = -1
	since := time.Now()
	waitFor(t, "the agent to store the program's last window", 3*time.Minute, func() bool {
		n := storedSamples(agentEndpoint, "cpu_profile_samples_local", where)
		if n != last {
			last, since = n, time.Now()
		}
		return n > 0 && time.Since(since) > 25*time.Second
	})
	waitFor(t, "the agent's send queue to empty", 10*time.Minute, func() bool {
		return queueSize(pair.agentMetrics) == 0
	})
	agentMinutes := perMinute(t, func(q string) (*sqlquery.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return sqlquery.Client{Endpoint: agentEndpoint}.Query(ctx, q)
	}, fmt.Sprintf("SELECT date_trunc('minute', timestamp)::VARCHAR, sum(sample_count) FROM cpu_profile_samples_local WHERE %s GROUP BY 1", where))
	// A clean stop writes the gateway's open minutes; then its file is read
	// directly.
	gateway.stop()
	db, closeDB, err := sqlquery.OpenReadOnly(filepath.Join(dir, "gateway", "gateway.duckdb"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = closeDB() }()
	gatewayMinutes := perMinute(t, func(q string) (*sqlquery.Result, error) {
		return sqlquery.Run(context.Background(), db, q, sqlquery.Limits{Timeout: 30 * time.Second, MaxRows: 100_000, MaxBytes: 10 << 20})
	}, fmt.Sprintf("SELECT bucket_time::VARCHAR, sum(sample_count) FROM cpu_profile_summaries WHERE %s GROUP BY 1", where))
	agent.stop()

	for _, l := range gateway.logs {
		if strings.Contains(l.String(), `"batches_replayed": `) && !strings.Contains(l.String(), `"batches_replayed": 0`) {
			rep.replays++
		}
	}
	keys := map[string]bool{}
	for m := range agentMinutes {
		keys[m] = true
	}
	for m := range gatewayMinutes {
		keys[m] = true
	}
	var sorted []string
	for m := range keys {
		sorted = append(sorted, m)
	}
	sort.Strings(sorted)
	for _, m := range sorted {
		a, g := agentMinutes[m], gatewayMinutes[m]
		rep.agent += a
		rep.gateway += g
		if g < a {
			rep.lost += a - g
		} else {
			rep.doubled += g - a
		}
		if a != g {
			t.Errorf("minute %s: gateway %d samples, agent %d", m, g, a)
		}
	}
	rep.minutes = len(sorted)
	if rep.agent == 0 {
		t.Fatal("the agent stored no sample of the program")
	}
	if min := int64(0.25 * testworkload.ExpectedSamples(workload, 19)); rep.agent < min {
		t.Errorf("the agent stored %d samples of a program whose CPU time calls for %d at 19 Hz (a quarter of it is the floor)", rep.agent, min)
	}
	t.Logf("crash figures: %s", rep)
	if path := os.Getenv("HOTPATH_CRASH_REPORT"); path != "" {
		_ = os.WriteFile(path, []byte(rep.String()+"\n"), 0o644)
	}
	return rep
}

func perMinute(t *testing.T, query func(string) (*sqlquery.Result, error), q string) map[string]int64 {
	t.Helper()
	res, err := query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out := map[string]int64{}
	for _, row := range res.Rows {
		n, err := strconv.ParseInt(fmt.Sprint(row[1]), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out[fmt.Sprint(row[0])] = n
	}
	return out
}

// queueSize is the agent's otlp_grpc/gateway send-queue length from its
// self-metrics; -1 when it cannot be read.
func queueSize(metricsPort int) int64 {
	m, err := selfmetrics.Scrape(fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
	if err != nil {
		return -1
	}
	v, ok := m.Sum("otelcol_exporter_queue_size", `exporter="otlp_grpc/gateway"`)
	if !ok {
		return -1
	}
	return int64(v)
}

// The short crash test of `make test`: the shipped agent and gateway, a
// CPU-bound program for 100 s; the gateway is killed with kill -9 four times
// (some timed into its writes, once followed by a 20 s outage) and the agent
// twice (once during that outage). Per minute, the gateway holds exactly
// what the agent stored. `make soak` runs the long version (crash_soak_test.go).
func TestKillDashNineLosesAndDoublesNothing(t *testing.T) {
	rep := runCrashScenario(t, crashPlan{workload: 100 * time.Second, gatewayKills: 4, outage: 20 * time.Second, agentKills: 1})
	if rep.replays == 0 {
		t.Error("no gateway restart replayed its write-ahead log: the kills did not exercise recovery")
	}
}
