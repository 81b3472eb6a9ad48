// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Trace context maps shared by the CPU sampler (reader) and the marker uprobes
// (writers). Both objects declare them; user space creates them once and hands
// the same maps to both (MapReplacements), so they are one map in the kernel.

#ifndef HOTPATH_TRACE_CTX_H
#define HOTPATH_TRACE_CTX_H

#ifndef LIBBPF_PIN_BY_NAME
#define LIBBPF_PIN_BY_NAME 1
#endif

// The value layout of OpenTelemetry eBPF Instrumentation's shared map
// (devdoc trace-profile-correlation.md): do not change it, other tools
// write and read it.
struct trace_ctx {
	__u8 trace_id[16];
	__u8 span_id[8];
};

// traces_ctx_v1: key = bpf_get_current_pid_tgid() of the thread running the
// request. Pinned at $BPFFS/otel/traces_ctx_v1; whoever starts first creates
// it. LRU: entries of threads that never cleared are evicted, never pile up.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct trace_ctx);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} traces_ctx_v1 SEC(".maps");

// Go programs: one OS thread runs many goroutines and a goroutine moves
// between threads, so the Go SDK's context is keyed by goroutine: the g
// pointer of the running goroutine, read from the runtime's TLS slot.
struct go_trace_key {
	__u32 tgid;
	__u32 pad;
	__u64 g;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct go_trace_key);
	__type(value, struct trace_ctx);
} go_traces SEC(".maps");

// current_g returns the running goroutine's g pointer, or 0. On linux/amd64
// the Go runtime keeps g in the TLS slot just below the thread pointer
// (fsbase - 8). In a non-Go thread this reads an unrelated TLS word: the
// lookup keyed by it simply misses (only the Go SDK writes go_traces).
static __always_inline __u64 current_g(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 fsbase = task->thread.fsbase;
	__u64 g = 0;

	if (fsbase < 8)
		return 0;
	if (bpf_probe_read_user(&g, sizeof(g), (void *)(fsbase - 8)) != 0)
		return 0;
	return g;
}

#endif
