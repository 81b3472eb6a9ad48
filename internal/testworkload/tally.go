package testworkload

import (
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"

	"github.com/hotpath-dev/hotpath/internal/profileschema"
)

// Tally sums one process's samples (samples/count profiles only) by leaf
// function (the innermost user-space frame) and by folded stack (root first,
// ";"-joined). The zero Tally is empty and ready for Add.
type Tally struct {
	Total   int64
	Leaf    map[string]int64
	Folded  map[string]int64
	Service string
	Exe     string
	// BuildIDs counts samples by their resource's canonical build ID (""
	// for none).
	BuildIDs map[string]int64
	// BeforeExec counts the samples of pid taken before it exec'd its
	// program, while it was still a fork of this test binary: the receiver
	// keeps them under the image they ran in (this binary, its build ID
	// and service), so they are not the workload's and are in no other
	// field. A workload that is this test binary itself would be counted
	// here in whole; none of the tests tallies one.
	BeforeExec int64
}

// testBinary is this test binary's path as /proc/self/exe gives it, the
// path the receiver reports for its forks ("" if unknown: no image of it
// is told apart). Read once: tests tally batch by batch.
var testBinary = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
})

// TallyProcess tallies the samples of pid across all batches.
func TallyProcess(all []pprofile.Profiles, pid int) Tally {
	return TallyProcessSince(all, pid, time.Time{})
}

// TallyProcessSince tallies the samples of pid taken at or after since (by
// profileschema.SampleTime: the receiver's samples carry no timestamp and
// belong to their interval's start). The receiver drains an interval after
// it ended, so an interval that began at or after since holds no sample
// taken before it: a test that gates its workload counts only what came
// after the gate.
func TallyProcessSince(all []pprofile.Profiles, pid int, since time.Time) Tally {
	t := Tally{BuildIDs: map[string]int64{}}
	self := testBinary()
	for _, pd := range all {
		dict := pd.Dictionary()
		profileschema.ForEachSample(pd, func(res pcommon.Resource, p pprofile.Profile, s pprofile.Sample) {
			if v, _ := res.Attributes().Get(profileschema.AttrProcessPID); v.Int() != int64(pid) {
				return
			}
			if profileschema.SampleTime(p, s).AsTime().Before(since) {
				return
			}
			if exe, _ := res.Attributes().Get(profileschema.AttrProcessExePath); self != "" && exe.Str() == self {
				t.BeforeExec += profileschema.SampleCount(s)
				return
			}
			t.Service = profileschema.ServiceName(res)
			if v, ok := res.Attributes().Get(profileschema.AttrProcessExeName); ok {
				t.Exe = v.Str()
			}
			build, _ := res.Attributes().Get(profileschema.AttrBuildID)
			t.BuildIDs[build.Str()] += profileschema.SampleCount(s)
			t.Add(profileschema.FoldedStack(dict, s), profileschema.SampleCount(s))
		})
	}
	return t
}

// Add counts n samples of a folded stack.
func (t *Tally) Add(stack string, n int64) {
	if t.Leaf == nil {
		t.Leaf = map[string]int64{}
	}
	if t.Folded == nil {
		t.Folded = map[string]int64{}
	}
	t.Total += n
	if leaf := userLeaf(strings.Split(stack, ";")); leaf != "" {
		t.Leaf[leaf] += n
	}
	t.Folded[stack] += n
}

// Renamed is the tally with the frames names maps renamed (a stripped
// binary's frames resolved with FunctionFrames, as `hotpath symbolize` would
// resolve them later); other frames keep their names.
func (t Tally) Renamed(names map[string]string) Tally {
	r := Tally{Service: t.Service, Exe: t.Exe, BuildIDs: t.BuildIDs}
	for stack, n := range t.Folded {
		frames := strings.Split(stack, ";")
		for i, f := range frames {
			if name, ok := names[f]; ok {
				frames[i] = name
			}
		}
		r.Add(strings.Join(frames, ";"), n)
	}
	return r
}

// isKernelFrame says whether a frame name is the kernel's: one with the
// kernel suffix, or one named by the kernel's mapping when the agent could
// not symbolize it (no CAP_SYSLOG).
func isKernelFrame(name string) bool {
	return strings.HasSuffix(name, profileschema.KernelSuffix) || strings.HasPrefix(name, profileschema.RawFramePrefix(profileschema.KernelMappingFile))
}

// UserFrames is a folded stack (root first, ";"-joined) up to its innermost
// user-space frame: the kernel frames of an interrupt or a system call taken
// while that frame ran are cut off. A kernel-only stack gives none.
func UserFrames(folded string) []string {
	return userFrames(strings.Split(folded, ";"))
}

func userFrames(names []string) []string {
	for i := len(names) - 1; i >= 0; i-- {
		if !isKernelFrame(names[i]) {
			return names[:i+1]
		}
	}
	return nil
}

// UserLeaf is the innermost user-space frame of a folded stack (root first,
// ";"-joined): the function that was running, even when the sample caught
// the kernel handling an interrupt there. A kernel-only stack gives its
// kernel leaf.
func UserLeaf(folded string) string { return userLeaf(strings.Split(folded, ";")) }

// userLeaf is the innermost user-space frame of a root-first stack: time the
// kernel spent in an interrupt while that function ran is the function's
// (interrupts are frequent on a loaded machine and would blur shares). A
// kernel-only stack gives its kernel leaf.
func userLeaf(names []string) string {
	if u := userFrames(names); len(u) > 0 {
		return u[len(u)-1]
	}
	if len(names) > 0 {
		return names[len(names)-1]
	}
	return ""
}

// CheckShares checks the workload's known profile: the hot functions a and b
// hold nearly all samples, split ShareA:ShareB, with caller directly above
// them in at least minCallerShare of their samples. The share may differ
// from ShareA by 4 binomial standard deviations (a loaded machine gives fewer
// samples), but never by less than 4 percentage points.
func (t Tally) CheckShares(a, b, caller string, minSamples int64, minCallerShare float64) error {
	if t.Total < minSamples {
		return fmt.Errorf("only %d samples (want ≥ %d); leaves: %v", t.Total, minSamples, t.Leaf)
	}
	hot := t.Leaf[a] + t.Leaf[b]
	if float64(hot) < 0.9*float64(t.Total) {
		return fmt.Errorf("%s and %s hold %d of %d samples; top stacks:%s", a, b, hot, t.Total, t.Top(5))
	}
	tolerance := math.Max(0.04, 4*math.Sqrt(ShareA*(1-ShareA)/float64(hot)))
	if share := float64(t.Leaf[a]) / float64(hot); math.Abs(share-ShareA) > tolerance {
		return fmt.Errorf("%s share = %.3f, want %.2f ± %.2f (leaves %v)", a, share, ShareA, tolerance, t.Leaf)
	}
	// The caller is checked above the same frame the leaf is counted for:
	// a hot function interrupted in the kernel still has its caller above it.
	var withCaller int64
	for stack, n := range t.Folded {
		u := UserFrames(stack)
		if len(u) >= 2 && u[len(u)-2] == caller && (u[len(u)-1] == a || u[len(u)-1] == b) {
			withCaller += n
		}
	}
	if float64(withCaller) < minCallerShare*float64(hot) {
		return fmt.Errorf("only %d of %d hot samples show %s as the caller; top stacks:%s", withCaller, hot, caller, t.Top(5))
	}
	return nil
}

// UnmappedSamples counts samples with a user frame in no known mapping
// (profileschema.UnknownFrame): the process's mappings were read too early
// or not at all.
func (t Tally) UnmappedSamples() int64 {
	var n int64
	for stack, c := range t.Folded {
		if slices.Contains(strings.Split(stack, ";"), profileschema.UnknownFrame) {
			n += c
		}
	}
	return n
}

// Top lists the n heaviest folded stacks, for failure messages.
func (t Tally) Top(n int) string {
	stacks := make([]string, 0, len(t.Folded))
	for s := range t.Folded {
		stacks = append(stacks, s)
	}
	sort.Slice(stacks, func(i, j int) bool { return t.Folded[stacks[i]] > t.Folded[stacks[j]] })
	var b strings.Builder
	for i := 0; i < len(stacks) && i < n; i++ {
		fmt.Fprintf(&b, "\n  %d %s", t.Folded[stacks[i]], stacks[i])
	}
	return b.String()
}
