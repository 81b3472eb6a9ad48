// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// CPU sampler for hotpath: a perf_event program (PERF_COUNT_SW_CPU_CLOCK,
// one event per online CPU) counts samples in the kernel, keyed by process,
// thread and stack IDs, and two tracing programs report process lifecycle
// events so user space can read /proc/PID/maps while a process still lives.
//
// Maps come in two sets (counts + stacks + stats). The program writes the set
// named by active_set; user space flips it, waits for an RCU grace period
// (every running program has finished) and then reads and clears the other
// set. Nothing is double-counted and nothing arriving during a drain is lost.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "trace_ctx.h"

#define MAX_STACK_DEPTH 127
#define EEXIST 17
#define E2BIG 7

// trace_id/span_id: the trace context active on the sampled thread or
// goroutine (see trace_ctx.h), zero when there is none.
struct sample_key {
	__u32 pid;
	__u32 tid;
	__s32 user_stack_id;
	__s32 kernel_stack_id;
	__u8 trace_id[16];
	__u8 span_id[8];
};

// One stats record per map set (index = set). Every sample that is not idle
// ends up either counted in that set's counts map or in lost_map_full, so
// user space can check sum(counts) == samples - idle - lost_map_full.
struct sample_stats {
	__u64 samples;
	__u64 idle;
	__u64 lost_map_full;
	__u64 user_stack_collision;
	__u64 user_stack_missing;
	__u64 kernel_stack_collision;
	__u64 kernel_stack_missing;
	__u64 events_lost;
	__u64 traced; // samples that found a trace context
};

enum event_kind {
	EVENT_SEEN = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
};

struct lifecycle_event {
	__u32 kind;
	__u32 pid;
};

// Sizes below are placeholders: the loader sets max_entries from the config
// before loading.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct sample_key);
	__type(value, __u64);
} counts_0 SEC(".maps"), counts_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stacks_0 SEC(".maps"), stacks_1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sample_stats);
} stats SEC(".maps");

// Processes already announced with EVENT_SEEN. LRU: a forgotten pid only
// costs a second EVENT_SEEN, which user space ignores.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} seen_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

// Which map set the programs write to (0 or 1). Written by user space through
// the mmapped .bss.
volatile __u32 active_set;

// Set by the loader when trace context maps are wired in; with 0 the
// sampler skips the lookups (and their cost) entirely.
volatile const __u32 trace_lookup = 0;

// Make the struct types visible to bpf2go (-type).
const struct sample_key *unused_sample_key __attribute__((unused));
const struct sample_stats *unused_sample_stats __attribute__((unused));
const struct lifecycle_event *unused_lifecycle_event __attribute__((unused));

static __always_inline struct sample_stats *stats_for(__u32 set)
{
	return bpf_map_lookup_elem(&stats, &set);
}

static __always_inline void emit(struct sample_stats *st, __u32 kind, __u32 pid)
{
	struct lifecycle_event ev = { .kind = kind, .pid = pid };

	// bpf_ringbuf_output never blocks; a full buffer is counted.
	if (bpf_ringbuf_output(&events, &ev, sizeof(ev), 0) != 0)
		__sync_fetch_and_add(&st->events_lost, 1);
}

static __always_inline void count_stack_error(__u64 *collision, __u64 *missing, long id)
{
	if (id == -EEXIST)
		__sync_fetch_and_add(collision, 1);
	else
		__sync_fetch_and_add(missing, 1);
}

// lookup_trace copies the trace context of what is running into key: the
// goroutine's (Go SDK) first, else the thread's (C SDK, OBI, anything that
// writes traces_ctx_v1).
static __always_inline void lookup_trace(struct sample_stats *st, struct sample_key *key, __u64 pid_tgid)
{
	struct go_trace_key gk = {};
	struct trace_ctx *tc = 0;

	gk.tgid = pid_tgid >> 32;
	gk.g = current_g();
	if (gk.g)
		tc = bpf_map_lookup_elem(&go_traces, &gk);
	if (!tc)
		tc = bpf_map_lookup_elem(&traces_ctx_v1, &pid_tgid);
	if (!tc)
		return;
	__builtin_memcpy(key->trace_id, tc->trace_id, sizeof(key->trace_id));
	__builtin_memcpy(key->span_id, tc->span_id, sizeof(key->span_id));
	__sync_fetch_and_add(&st->traced, 1);
}

static __always_inline void count_sample(struct sample_stats *st, void *counts, struct sample_key *key)
{
	__u64 one = 1, *val;
	long err;

	val = bpf_map_lookup_elem(counts, key);
	if (val) {
		__sync_fetch_and_add(val, 1);
		return;
	}
	err = bpf_map_update_elem(counts, key, &one, BPF_NOEXIST);
	if (err == 0)
		return;
	if (err == -EEXIST) {
		// Another CPU inserted the same key between our lookup and update.
		val = bpf_map_lookup_elem(counts, key);
		if (val) {
			__sync_fetch_and_add(val, 1);
			return;
		}
	}
	// -E2BIG: the map holds MaxUniqueStacks keys already.
	__sync_fetch_and_add(&st->lost_map_full, 1);
}

SEC("perf_event")
int cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	__u32 set = active_set & 1;
	struct sample_key key;
	struct sample_stats *st;
	__u8 one = 1;

	st = stats_for(set);
	if (!st)
		return 0; // cannot happen (array of 2), but the verifier needs it
	__sync_fetch_and_add(&st->samples, 1);
	if (pid == 0) {
		__sync_fetch_and_add(&st->idle, 1);
		return 0;
	}

	__builtin_memset(&key, 0, sizeof(key));
	key.pid = pid;
	key.tid = (__u32)pid_tgid;
	if (trace_lookup)
		lookup_trace(st, &key, pid_tgid);

	// bpf_get_stackid needs a map pointer known at verification time, so
	// each set gets its own branch instead of a pointer chosen at run time.
	if (set == 0) {
		key.user_stack_id = bpf_get_stackid(ctx, &stacks_0, BPF_F_USER_STACK);
		key.kernel_stack_id = bpf_get_stackid(ctx, &stacks_0, 0);
	} else {
		key.user_stack_id = bpf_get_stackid(ctx, &stacks_1, BPF_F_USER_STACK);
		key.kernel_stack_id = bpf_get_stackid(ctx, &stacks_1, 0);
	}
	if (key.user_stack_id < 0)
		count_stack_error(&st->user_stack_collision, &st->user_stack_missing, key.user_stack_id);
	if (key.kernel_stack_id < 0)
		count_stack_error(&st->kernel_stack_collision, &st->kernel_stack_missing, key.kernel_stack_id);

	if (set == 0)
		count_sample(st, &counts_0, &key);
	else
		count_sample(st, &counts_1, &key);

	// Look up first: an LRU update takes a free node (maybe evicting) even
	// when the key exists. BPF_NOEXIST: only the CPU that inserts the pid
	// announces it.
	if (!bpf_map_lookup_elem(&seen_pids, &pid) &&
	    bpf_map_update_elem(&seen_pids, &pid, &one, BPF_NOEXIST) == 0)
		emit(st, EVENT_SEEN, pid);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p)
{
	struct sample_stats *st = stats_for(active_set & 1);

	if (!st)
		return 0;
	emit(st, EVENT_EXEC, p->tgid);
	return 0;
}

// Only the first argument is used: kernels before 6.16 have no group_dead.
SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *p)
{
	__u32 pid = p->tgid;
	struct sample_stats *st;

	if (trace_lookup) {
		// A thread's context dies with it: drop it now rather than wait
		// for LRU eviction (a new thread may reuse the id).
		__u64 pid_tgid = ((__u64)p->tgid << 32) | (__u32)p->pid;

		bpf_map_delete_elem(&traces_ctx_v1, &pid_tgid);
	}
	if (p->pid != p->tgid)
		return 0; // a thread, not the thread-group leader
	st = stats_for(active_set & 1);
	if (!st)
		return 0;
	bpf_map_delete_elem(&seen_pids, &pid);
	emit(st, EVENT_EXIT, pid);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
