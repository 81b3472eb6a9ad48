// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// CPython frames for the CPU sampler (included by cpu_profile.bpf.c).
//
// For a process whose interpreter user space recognised (py_procs has an
// entry: the address of _PyRuntime and the structure offsets of that
// CPython version), the sampled thread's interpreter frames are appended
// to its user stack, after the native frames:
//
//   ips[0..n)       native frames, leaf first (as without Python)
//   ips[n]          PY_MARKER (never a user-space address)
//   ips[n+1+2k]     code object of Python frame k (leaf first); bit 0 set
//                   when the frame is the entry frame of its
//                   _PyEval_EvalFrameDefault call (3.11: the first Python
//                   frame of the next native eval frame follows it; 3.10
//                   and older: every frame); bit 1 set for the shim frame
//                   (3.12 on) between two eval calls
//   ips[n+2+2k]     the frame's last executed instruction (prev_instr; 3.13
//                   on: instr_ptr; 3.10 and older: the word whose low half
//                   is the int f_lasti)
//
// User space resolves code objects (name, file, line) and splices each
// run of Python frames in at the matching _PyEval_EvalFrameDefault native
// frame. Nothing is resolved here: the walk reads a handful of pointers.
// Names are read from the process's memory, which is gone once it exits,
// and samples reach user space only at the interval's drain: a script that
// runs a few seconds and exits would lose every Python frame. So the first
// time a code object is on a process's stack, the walk reports it
// (EVENT_PY_CODE) and user space reads it within milliseconds.
//
// Which thread state: CPython keeps one PyThreadState per thread in a list
// per interpreter; its thread_id is pthread_self(), which on x86-64 glibc
// is the thread's fsbase. The walk looks the sampled thread's up in that
// list (rather than taking the GIL holder, which may be another thread),
// so a thread running C code without the GIL still shows its Python
// callers.

#define PY_MARKER 0xfffffffffffffffeULL
#define PY_MAX_THREADS 64 // threads searched for the sampled one
#define PY_MAX_FRAMES 48  // Python frames recorded per sample

// Offsets into CPython's structures, per version (user space fills them;
// internal/python holds the table). All are byte offsets.
struct py_proc {
	__u64 runtime;              // address of _PyRuntime in the process
	__u16 runtime_interp_head;  // _PyRuntimeState.interpreters.head
	__u16 interp_threads_head;  // PyInterpreterState.threads.head (3.10 and older: .tstate_head)
	__u16 tstate_next;          // PyThreadState.next
	__u16 tstate_thread_id;     // PyThreadState.thread_id
	__u16 tstate_cframe;        // PyThreadState.cframe (3.13: .current_frame; 3.10 and older: .frame)
	__u16 cframe_current_frame; // _PyCFrame.current_frame, or PY_NO_FIELD (3.13 has no _PyCFrame; 3.10 and older not used)
	__u16 frame_code;           // _PyInterpreterFrame.f_code (3.10 and older: PyFrameObject.f_code)
	__u16 frame_previous;       // _PyInterpreterFrame.previous (PyFrameObject.f_back)
	__u16 frame_prev_instr;     // _PyInterpreterFrame.prev_instr (PyFrameObject.f_lasti)
	__u16 frame_is_entry;       // _PyInterpreterFrame.is_entry (a bool; 3.11), PY_EVERY_FRAME or PY_NO_FIELD
	__u16 frame_owner;          // _PyInterpreterFrame.owner (a char), or PY_NO_FIELD (3.10 and older)
	__u16 frame_base;           // where the bytes read of a frame start (the lowest field above)
	__u16 frame_window;         // how many bytes of a frame are read from frame_base: covers the fields above
};

#define PY_NO_FIELD 0xffff
// frame_is_entry of CPython 3.10 and older: each Python frame (a
// PyFrameObject, f_back its caller, f_lasti its last instruction) has a
// _PyEval_EvalFrameDefault call of its own, so every frame is an entry.
#define PY_EVERY_FRAME 0xfffe
// _PyInterpreterFrame.owner of the shim frame CPython 3.12 pushes at each
// _PyEval_EvalFrameDefault entry (FRAME_OWNED_BY_CSTACK in 3.12 and 3.13,
// FRAME_OWNED_BY_INTERPRETER from 3.14 on, both 3); 3.11 has no such owner
// value and marks the entry frame itself (is_entry). An owner above it
// (3.14's FRAME_OWNED_BY_CSTACK) is no Python function either.
#define PY_OWNED_BY_SHIM 3

// PY_TAG_BITS: from 3.14 on f_executable is a _PyStackRef, a pointer whose
// low bits tag how it is counted (Py_TAG_BITS, 3 in a build with the GIL);
// before, a plain pointer. An object is aligned to at least 8 bytes, so
// the bits are never part of the address.
#define PY_TAG_BITS 3ULL

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); // tgid
	__type(value, struct py_proc);
} py_procs SEC(".maps");

// Set by the loader with unwinding: auto (it needs bpf_loop, as the DWARF
// unwinder does); with 0 py_procs is never looked up.
volatile const __u32 python_walk = 0;

const struct py_proc *unused_py_proc __attribute__((unused));

// Code objects already reported with EVENT_PY_CODE (report_once). 4,096
// entries are about 360 KB of kernel memory, charged to the agent's cgroup.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct reported_key);
	__type(value, __u64);
} py_codes_reported SEC(".maps");

// report_py_code sends code to user space unless it was sent for this
// process before.
static __always_inline void report_py_code(__u64 code)
{
	report_once(&py_codes_reported, EVENT_PY_CODE, code, 0);
}

struct py_walk {
	struct stack_trace *t;
	struct py_proc *pp;
	__u64 frame;  // the _PyInterpreterFrame to record next
	__u32 base;   // slot of the first frame's code object
	__u32 frames; // frames recorded
};

// PY_FRAME_WINDOW: at most this many bytes of an interpreter frame are
// read at once, from frame_base on (py_proc.frame_window: user space checks
// the fields it needs lie in it). One read per frame instead of four: each
// bpf_probe_read_user costs more than the rest of the step. 3.10 and older
// need the most: f_back at 24 to the word of f_lasti at 104.
#define PY_FRAME_WINDOW 88

// py_frame_step records one interpreter frame and moves to its caller.
static long py_frame_step(__u64 i, void *ctx)
{
	struct py_walk *w = ctx;
	struct stack_trace *t = w->t;
	struct py_proc *pp = w->pp;
	// One word more than is read: the verifier bounds a computed index by
	// its maximum (79 for a byte index), not by the word it rounds to.
	__u64 win[PY_FRAME_WINDOW / 8 + 1] = {};
	__u32 prev_at, instr_at, at;
	__u64 size; // 64-bit: a 32-bit one is checked on a zero-extended copy
	__u64 flags = 0, code;
	__u32 code_at;
	// The slot comes from the loop index, never from a count kept in w:
	// a value stored there is tracked exactly and the verifier would
	// re-check this callback for every frame (see unwind_step).
	__u64 n = w->base + 2 * i;

	if (!t || !pp || !w->frame)
		return 1;
	asm volatile("" : "+r"(n)); // one register for check and stores (see python_stack)
	if (n >= MAX_STACK_DEPTH - 1)
		return 1;
	// One comparison on the register passed as the size: a two-sided
	// range check becomes a subtraction on a copy the verifier cannot
	// relate to it.
	size = pp->frame_window;
	asm volatile("" : "+r"(size));
	if (size > PY_FRAME_WINDOW)
		return 1;
	if (bpf_probe_read_user(win, size, (void *)(w->frame + pp->frame_base)) != 0)
		return 1;
	// Word and byte indices into the window (user space guarantees they
	// are in it; the checks are for the verifier).
	code_at = (__u32)(pp->frame_code - pp->frame_base) / 8;
	prev_at = (__u32)(pp->frame_previous - pp->frame_base) / 8;
	instr_at = (__u32)(pp->frame_prev_instr - pp->frame_base) / 8;
	if (code_at >= PY_FRAME_WINDOW / 8 || prev_at >= PY_FRAME_WINDOW / 8 || instr_at >= PY_FRAME_WINDOW / 8)
		return 1;
	if (pp->frame_is_entry == PY_EVERY_FRAME) {
		flags |= 1;
	} else if (pp->frame_is_entry != PY_NO_FIELD) {
		at = (__u32)(pp->frame_is_entry - pp->frame_base);
		if (at >= PY_FRAME_WINDOW)
			return 1;
		if ((win[at / 8] >> (8 * (at % 8))) & 0xff)
			flags |= 1;
	}
	if (pp->frame_owner != PY_NO_FIELD) {
		at = (__u32)(pp->frame_owner - pp->frame_base);
		if (at >= PY_FRAME_WINDOW)
			return 1;
		if (((win[at / 8] >> (8 * (at % 8))) & 0xff) >= PY_OWNED_BY_SHIM)
			flags |= 2;
	}
	code = win[code_at] & ~PY_TAG_BITS; // f_code (f_executable)
	t->ips[n] = code | flags;
	t->ips[n + 1] = win[instr_at];
	if (!(flags & 2)) // a shim frame is never shown
		report_py_code(code);
	w->frames = i + 1;
	w->frame = win[prev_at];
	return 0;
}

struct py_thread_search {
	struct py_proc *pp;
	__u64 tstate;  // the thread state to look at next
	__u64 fsbase;  // the sampled thread's pthread_self()
	__u64 found;   // its thread state, 0 until found
};

static long py_thread_step(__u64 i, void *ctx)
{
	struct py_thread_search *s = ctx;
	__u64 tid = 0, next = 0;

	if (!s->pp || !s->tstate)
		return 1;
	if (read_word(s->tstate + s->pp->tstate_thread_id, &tid) != 0)
		return 1;
	if (tid == s->fsbase) {
		s->found = s->tstate;
		return 1;
	}
	if (read_word(s->tstate + s->pp->tstate_next, &next) != 0)
		return 1;
	s->tstate = next;
	return 0;
}

// python_stack appends the sampled thread's Python frames to the per-CPU
// scratch stack holding n native frames, and returns the new length (n
// when the process is not a known CPython or the thread has no frames).
// A global function: verified once for all call sites.
__attribute__((noinline)) int python_stack(__u32 pid, __u32 n)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct py_thread_search s = {};
	struct py_walk w = {};
	struct stack_trace *t;
	__u64 interp = 0, cframe = 0, frame = 0, slot;
	__u32 zero = 0;

	t = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!t || !task)
		return n;
	s.pp = bpf_map_lookup_elem(&py_procs, &pid);
	if (!s.pp)
		return n;
	s.fsbase = task->thread.fsbase;
	if (read_word(s.pp->runtime + s.pp->runtime_interp_head, &interp) != 0 || !interp)
		return n;
	if (read_word(interp + s.pp->interp_threads_head, &s.tstate) != 0)
		return n;
	bpf_loop(PY_MAX_THREADS, py_thread_step, &s, 0);
	if (!s.found)
		return n;
	if (read_word(s.found + s.pp->tstate_cframe, &cframe) != 0 || !cframe)
		return n;
	if (s.pp->cframe_current_frame == PY_NO_FIELD)
		frame = cframe; // 3.13: the thread state points at the frame itself
	else if (read_word(cframe + s.pp->cframe_current_frame, &frame) != 0 || !frame)
		return n;
	// The empty asm pins slot to one register for both the check and the
	// store: otherwise clang checks one copy of n and indexes with another,
	// whose bound the verifier does not know.
	slot = n;
	asm volatile("" : "+r"(slot));
	if (slot >= MAX_STACK_DEPTH - 2)
		return n;
	t->ips[slot] = PY_MARKER;
	w.t = t;
	w.pp = s.pp;
	w.frame = frame;
	w.base = slot + 1;
	bpf_loop(PY_MAX_FRAMES, py_frame_step, &w, 0);
	if (!w.frames || w.frames > PY_MAX_FRAMES)
		return n; // not one frame readable: no marker either
	return n + 1 + 2 * w.frames;
}
