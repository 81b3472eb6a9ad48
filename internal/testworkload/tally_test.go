package testworkload

import "testing"

// TestTallyLeafSkipsKernelFrames: time the kernel spent interrupting a hot
// function is the function's, whether the kernel frames were symbolized
// ("_[k]") or not (the agent without CAP_SYSLOG names them by the kernel's
// mapping). Counted as leaves, unsymbolized ones pushed the hot functions
// under 90 % of the samples on a loaded machine (e2e, without_syslog).
func TestTallyLeafSkipsKernelFrames(t *testing.T) {
	tally := Tally{Leaf: map[string]int64{}, Folded: map[string]int64{}}
	tally.Add("main;dispatch;hot_a", 5)
	tally.Add("main;dispatch;hot_a;[kernel.kallsyms]+0xffffffff81000e06;[kernel.kallsyms]+0xffffffff82260c33", 3)
	tally.Add("main;dispatch;hot_b;asm_sysvec_apic_timer_interrupt_[k]", 2)
	tally.Add("[kernel.kallsyms]+0xffffffff81000e06", 1) // kernel only: its own leaf
	want := map[string]int64{"hot_a": 8, "hot_b": 2, "[kernel.kallsyms]+0xffffffff81000e06": 1}
	if len(tally.Leaf) != len(want) {
		t.Fatalf("leaves %v, want %v", tally.Leaf, want)
	}
	for leaf, n := range want {
		if tally.Leaf[leaf] != n {
			t.Errorf("leaf %s: %d samples, want %d (leaves %v)", leaf, tally.Leaf[leaf], n, tally.Leaf)
		}
	}
	if tally.Total != 11 {
		t.Errorf("total %d, want 11", tally.Total)
	}
}
