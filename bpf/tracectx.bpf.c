// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// Uprobes on the hotpath trace context SDK's marker functions. An
// application calls set(&ctx) when a request's span becomes current and
// clear() when it ends; these programs copy the context into the shared maps
// the CPU sampler reads. The application needs no privileges: the agent
// instruments it from outside.
//
// Markers receive a pointer to a 24-byte struct trace_ctx (read with
// bpf_probe_read_user) rather than the IDs in registers: one layout for every
// language, whatever its calling convention does with 16-byte values.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "trace_ctx.h"

// Counters for diagnosis (index: enum marker_stat), per CPU.
enum marker_stat {
	STAT_SET = 0,
	STAT_CLEAR = 1,
	STAT_READ_FAILED = 2, // the context pointer could not be read
	STAT_NO_G = 3,        // Go marker hit, but no goroutine found in TLS
	STAT_MAX = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} marker_stats SEC(".maps");

static __always_inline void count(__u32 which)
{
	__u64 *v = bpf_map_lookup_elem(&marker_stats, &which);

	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int read_ctx(struct trace_ctx *tc, const void *src)
{
	if (!src || bpf_probe_read_user(tc, sizeof(*tc), src) != 0) {
		count(STAT_READ_FAILED);
		return -1;
	}
	return 0;
}

static __always_inline int go_key(struct go_trace_key *k)
{
	k->tgid = bpf_get_current_pid_tgid() >> 32;
	k->pad = 0;
	k->g = current_g();
	if (!k->g) {
		count(STAT_NO_G);
		return -1;
	}
	return 0;
}

// Go: func hotpathTraceSet(c *wireContext), an assembly function (ABI0):
// the argument is on the stack just above the return address.
SEC("uprobe")
int go_set(struct pt_regs *ctx)
{
	struct go_trace_key k;
	struct trace_ctx tc;
	__u64 arg = 0;

	if (go_key(&k))
		return 0;
	if (bpf_probe_read_user(&arg, sizeof(arg), (void *)(ctx->sp + 8)) != 0)
		arg = 0;
	if (read_ctx(&tc, (const void *)arg))
		return 0;
	bpf_map_update_elem(&go_traces, &k, &tc, BPF_ANY);
	count(STAT_SET);
	return 0;
}

// Go: func hotpathTraceClear().
SEC("uprobe")
int go_clear(struct pt_regs *ctx)
{
	struct go_trace_key k;

	if (go_key(&k))
		return 0;
	bpf_map_delete_elem(&go_traces, &k);
	count(STAT_CLEAR);
	return 0;
}

// C: void hotpath_tracectx_set(const struct hotpath_trace_ctx *c), System V
// ABI: first argument in RDI.
SEC("uprobe")
int native_set(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct trace_ctx tc;

	if (read_ctx(&tc, (const void *)ctx->di))
		return 0;
	bpf_map_update_elem(&traces_ctx_v1, &pid_tgid, &tc, BPF_ANY);
	count(STAT_SET);
	return 0;
}

// C: void hotpath_tracectx_clear(void).
SEC("uprobe")
int native_clear(struct pt_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	bpf_map_delete_elem(&traces_ctx_v1, &pid_tgid);
	count(STAT_CLEAR);
	return 0;
}

// Make the types visible to bpf2go (-type).
const struct trace_ctx *unused_trace_ctx __attribute__((unused));
const struct go_trace_key *unused_go_trace_key __attribute__((unused));

char LICENSE[] SEC("license") = "Dual MIT/GPL";
