package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Two pods of one service, each one container, beside a process in no
// container, written through the real exporter on both tiers.
const (
	podA       = "0f3c2b1a-4d5e-4f60-8a9b-0c1d2e3f4a5b"
	podB       = "7e6d5c4b-3a29-4180-9f8e-7d6c5b4a3928"
	containerA = "3b9f1c2d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9"
	containerB = "c0ffee00112233445566778899aabbccddeeff00112233445566778899aabbcc"
)

func workloadFixture(now time.Time) []batch {
	at := now.Add(-10 * time.Minute)
	return []batch{
		{at: at, service: "api", pod: "api-7d9f-a", podUID: podA, container: containerA, hz: 19, stacks: map[string]int64{"main;serve;parse": 30, "main;serve;write": 10}},
		{at: at, service: "api", pod: "api-7d9f-b", podUID: podB, container: containerB, hz: 19, stacks: map[string]int64{"main;serve;parse": 5, "main;gc": 7}},
		{at: at, service: "api", hz: 19, stacks: map[string]int64{"main;serve;parse": 3}},
	}
}

// folded runs `hotpath profile` and sums its folded lines by stack (the
// build annotation, when there is one, stripped).
func folded(t *testing.T, args ...string) (map[string]int64, string, int) {
	t.Helper()
	out, stderr, code := runCLI(t, append([]string{"profile"}, args...)...)
	got := map[string]int64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			continue
		}
		n, err := strconv.ParseInt(l[i+1:], 10, 64)
		if err != nil {
			t.Fatalf("folded line %q: %v", l, err)
		}
		got[l[:i]] += n
	}
	return got, stderr, code
}

// TestPodAndContainerSelect selects one pod by UID (either tier) or name
// (gateway), and one container by its ID's prefix: each gets exactly its
// samples, and the whole service is still their sum plus the process in
// no container.
func TestPodAndContainerSelect(t *testing.T) {
	for _, tier := range []string{"local", "summary"} {
		t.Run(tier, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), tier+".duckdb")
			writeDB(t, tier, db, "", workloadFixture(time.Now()))
			base := []string{"--db", db, "--service", "api", "--since", "1h"}
			if tier == "local" {
				base = append(base, "--local")
			}
			cases := []struct {
				name string
				args []string
				want map[string]int64
			}{
				{"whole service", nil, map[string]int64{"main;serve;parse": 38, "main;serve;write": 10, "main;gc": 7}},
				{"pod A by UID", []string{"--pod", podA}, map[string]int64{"main;serve;parse": 30, "main;serve;write": 10}},
				{"container B by prefix", []string{"--container", containerB[:12]}, map[string]int64{"main;serve;parse": 5, "main;gc": 7}},
				{"pod and container together", []string{"--pod", podB, "--container", containerB}, map[string]int64{"main;serve;parse": 5, "main;gc": 7}},
			}
			if tier == "summary" {
				cases = append(cases, struct {
					name string
					args []string
					want map[string]int64
				}{"pod B by name", []string{"--pod", "api-7d9f-b"}, map[string]int64{"main;serve;parse": 5, "main;gc": 7}})
			}
			for _, c := range cases {
				got, stderr, code := folded(t, append(append([]string{}, base...), c.args...)...)
				if code != 0 {
					t.Fatalf("%s: exit %d: %s", c.name, code, stderr)
				}
				if len(got) != len(c.want) {
					t.Errorf("%s: %v, want %v", c.name, got, c.want)
					continue
				}
				for k, v := range c.want {
					if got[k] != v {
						t.Errorf("%s: %s = %d, want %d (all: %v)", c.name, k, got[k], v, got)
					}
				}
			}
			// A container of another pod: nothing, and the error says what
			// was asked for.
			_, stderr, code := folded(t, append(append([]string{}, base...), "--pod", podA, "--container", containerB[:12])...)
			if code != 1 || !strings.Contains(stderr, `in pod "`+podA+`"`) || !strings.Contains(stderr, `in container "`+containerB[:12]+`"`) {
				t.Errorf("pod A with container B: exit %d: %s", code, stderr)
			}
		})
	}
}
