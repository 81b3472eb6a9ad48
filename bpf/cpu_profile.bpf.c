// SPDX-License-Identifier: (MIT OR GPL-2.0)
//
// CPU sampler for hotpath: a perf_event program (PERF_COUNT_SW_CPU_CLOCK,
// one event per online CPU) counts samples in the kernel, keyed by process,
// thread and stack hashes, and two tracing programs report process lifecycle
// events so user space can read /proc/PID/maps while a process still lives.
//
// Stacks are stored in hash maps keyed by a 64-bit hash of their frames
// rather than in BPF_MAP_TYPE_STACK_TRACE: that map hashes a stack to one
// bucket and refuses (EEXIST) a second stack in it, which lost 5-10% of the
// stacks of a busy interval at any affordable size. A real hash table holds
// every stack until it is full.
//
// User stacks are unwound with frame pointers (bpf_get_stack) unless the
// process has unwind tables (unwinding: auto, and one of its binaries was
// built without frame pointers): then the DWARF unwinder below walks the
// stack with rows computed in user space from .eh_frame, falling back to the
// frame pointer for code without rows (Go, JIT).
//
// Maps come in two sets (counts + stacks + stats). The program writes the set
// named by active_set; user space flips it, waits for an RCU grace period
// (every running program has finished) and then reads and clears the other
// set. Nothing is double-counted and nothing arriving during a drain is lost.

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "trace_ctx.h"

#define MAX_STACK_DEPTH 127
#define EEXIST 17
#define PF_KTHREAD 0x00200000
#define PF_EXITING 0x00000004 // include/linux/sched.h

// trace_id/span_id: the trace context active on the sampled thread or
// goroutine (see trace_ctx.h), zero when there is none.
// user_stack/kernel_stack: hashes of the stacks in the set's stacks map; 0
// when there is none.
struct sample_key {
	__u32 pid;
	__u32 tid;
	__u64 user_stack;
	__u64 kernel_stack;
	__u8 trace_id[16];
	__u8 span_id[8];
};

// stack_trace.flags
#define STACK_DWARF 1    // unwound with the process's own proc_unwind (not FOUND_ONLY_KEY's)
#define STACK_LEAF_CFI 2 // frame 0's caller came from unwind rows: no leaf-caller recovery

// stack_trace.end: why a DWARF-unwound stack ended. Frame-pointer stacks
// only know truncation.
enum stack_end {
	END_OK = 0,         // reached the outermost frame
	END_TRUNCATED = 1,  // MAX_STACK_DEPTH frames
	END_UNREADABLE = 2, // a stack word could not be read
	END_INVALID = 3,    // no usable rule and no frame pointer, or no progress
};

// A stack, leaf first; only the first len frames are meaningful.
// leaf_ret (user stacks only, else 0) is the word at the user stack pointer
// when the sample was taken: while the PC is in a frameless leaf or before
// its function has pushed a frame, that word is the return address into the
// caller the frame-pointer chain skips. User space decides from the
// binary's unwind info whether it is one (leaf-caller recovery); it is part
// of the stack's identity so samples with different callers never merge.
struct stack_trace {
	__u32 len;
	__u8 flags;
	__u8 end;
	__u16 _pad;
	__u64 leaf_ret;
	__u64 ips[MAX_STACK_DEPTH];
};

// One stats record per map set (index = set). Every sample that is not idle
// ends up either counted in that set's counts map or in lost_map_full, so
// user space can check sum(counts) == samples - idle - lost_map_full.
struct sample_stats {
	__u64 samples;
	__u64 idle;
	__u64 lost_map_full;
	__u64 user_stack_lost;    // stacks map full: counted without its user stack
	__u64 user_stack_missing; // no user stack (kernel thread) or unreadable
	__u64 kernel_stack_lost;
	__u64 kernel_stack_missing; // no kernel stack (sampled in user mode)
	__u64 events_lost;
	__u64 traced; // samples that found a trace context
	__u64 dwarf;  // user stacks unwound with the process's own proc_unwind
	// Frames outside the mappings user space gave a process, looked up
	// in its memory map (find_vma_row), and how many of those found a
	// loaded table.
	__u64 vma_lookups;
	__u64 vma_tables;
	// Frames outside them found in the process's own list of the files
	// it mapped (mapped_files) instead.
	__u64 mapped_lookups;
};

// Unwind rows, computed in user space from .eh_frame (internal/unwindtable):
// the rule from pc up to the next row's pc, pc being an ELF virtual address.
// kind: cfa_kind, plus RBP_LOST when the caller's rbp cannot be recovered,
// plus where the caller's rbx is in bits 4-6 (0: unchanged; 1-6: saved at
// CFA - 8*(k+1); RBX_LOST: not followed).
// rbp_off8: 0 when rbp is unchanged, else it was saved at CFA + 8*rbp_off8.
// cfa_off: the CFA's offset from its register (for CFA_PLT: the threshold).
enum cfa_kind {
	CFA_NONE = 0, // no rule here: use the frame pointer
	CFA_RSP = 1,
	CFA_RBP = 2,
	CFA_PLT = 3, // rsp + 8 + ((rip & 15) >= cfa_off ? 8 : 0)
	CFA_END = 4, // the outermost frame: no caller
	// A signal trampoline (glibc's __restore_rt, its CIE augmented 'S'):
	// the handler returned into it, and rsp points at the ucontext the
	// kernel saved the interrupted code's registers in.
	CFA_SIGNAL = 5,
	// CFA = rbx + cfa_off: glibc's lazy-binding trampoline in ld.so
	// (_dl_runtime_resolve_xsavec), which realigns the stack.
	CFA_RBX = 6,
};

// Where the kernel saves the interrupted registers on x86-64: struct
// ucontext at the trampoline's rsp (the signal frame's return address
// popped), its uc_mcontext at +40, gregs in the order of REG_R8..REG_RIP.
#define UC_RBP 120
#define UC_RBX 128
#define UC_RSP 160
#define UC_RIP 168
#define CFA_KIND_MASK 0x0f
#define RBX_SHIFT 4
#define RBX_LOST 7
#define RBP_LOST 0x80

struct unwind_row {
	__u32 pc;
	__u8 kind;
	__s8 rbp_off8;
	__u16 cfa_off;
};

#define MAX_UNWIND_MAPPINGS 64
#define UNWIND_ROW_SEARCH 24    // tables hold fewer than 2^24 rows

// A process's executable mappings that have unwind tables, sorted by start.
// The ELF address of pc is pc - bias.
struct unwind_mapping {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u32 table;
	__u32 rows;
};

// Mappings the kernel found itself (find_vma_row): a frame outside every
// mapping user space gave is looked up in the process's memory map, and
// the answer is kept here. Room for a few: past that each such frame is
// looked up again.
#define MAX_FOUND_MAPPINGS 16

// A mapping the kernel found. Walks on several CPUs may write one slot at
// once (a process's threads, sampled together): check, a hash of the other
// fields, tells a whole entry from one that mixes two writes or is being
// written, which is ignored.
struct found_mapping {
	__u64 start;
	__u64 end;
	__u64 bias;
	__u32 table;
	__u32 rows; // 0: no table (anonymous memory, a file built with frame pointers or not analysed): frame pointers there
	__u32 check;
	__u32 _pad;
};

struct proc_unwind {
	__u32 n;
	// How many found[] slots are taken. User space writes 0: a new set of
	// mappings starts with nothing found.
	__u32 found_n;
	// A found-only entry (FOUND_ONLY_KEY): the process whose mappings
	// found[] holds, by thread group id and exec time. User space writes
	// 0 (its entries are a process's own, keyed by it).
	__u32 found_pid;
	// The process's mapped_files maps when found[] was started: a file
	// mapped since may be where a found mapping was (a library unloaded
	// and another loaded in its place), and found[] starts afresh.
	// User space writes 0.
	__u32 found_maps;
	__u64 found_exec_ns;
	struct unwind_mapping m[MAX_UNWIND_MAPPINGS];
	struct found_mapping found[MAX_FOUND_MAPPINGS];
};

enum event_kind {
	EVENT_SEEN = 1,
	EVENT_EXEC = 2,
	EVENT_EXIT = 3,
	EVENT_MAPS_CHANGED = 4,
	// A code object on a walked CPython process's stack for the first
	// time (python_walk.h): user space reads it while the process lives.
	EVENT_PY_CODE = 5,
	// A JVM's compiled or interpreted frame on a walked stack for the
	// first time (report_jvm_frame): user space names it while the JVM
	// lives.
	EVENT_JAVA_FRAME = 6,
	// A Node.js (V8) function on a walked stack for the first time
	// (v8_function): user space names it while the process lives.
	EVENT_V8_FUNCTION = 7,
};

struct lifecycle_event {
	__u32 kind;
	__u32 pid;
	// When the process started, in ns after boot (the thread-group
	// leader's start_boottime, which /proc/PID/stat gives in clock ticks):
	// with the pid it names one process, so user space need not read
	// /proc/PID/stat to tell a reused pid apart.
	__u64 start_ns;
	// The process's command name (its thread-group leader's comm), so a
	// process that exits before user space reads /proc still gets a name.
	char comm[16];
	// EVENT_PY_CODE: the code object's address; EVENT_JAVA_FRAME: the
	// frame as the stack holds it (an interpreted frame's entry) or its
	// code address (a caller's: its call's, one before the return
	// address); EVENT_V8_FUNCTION: the SharedFunctionInfo (tagged); 0 for
	// the other kinds.
	__u64 code;
	// The process's cgroup on the cgroup v2 hierarchy at the event (the
	// kernfs id: the inode number of its directory; the root's on a host
	// with cgroup v1 alone), so user space can tell the container of a
	// process that is gone before its /proc/PID/cgroup is read: at an exec,
	// the one the new image runs in.
	__u64 cgroup_id;
	// The process's parent (its real parent's tgid) at the event. A forked
	// child runs its parent's image until it execs, and is often first
	// read after the exec (a shell's child execs within microseconds):
	// its samples from before are named against the parent's image.
	__u32 ppid;
	__u32 _pad;
	// When the event was sent (bpf_ktime_get_ns, CLOCK_MONOTONIC): at an
	// exec, user space tells by it whether a read of the process found the
	// new image, also once the process is gone (exec_times forgets it at
	// the exit).
	__u64 at_ns;
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
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct stack_trace);
} stacks_0 SEC(".maps"), stacks_1 SEC(".maps");

// Where the walk keeps the rbx of the frame it is at (struct rbx_state):
// per CPU, as the scratch stack is, and out of the verifier's sight. Kept
// in the walk's own state, its every form (the sampled register, a saved
// slot's address, unknown) made the verifier check the loop's callback
// once more: four times the instructions.
struct rbx_state {
	// at: 0 while the frame's rbx is still the sampled register's (bx);
	// else the address a frame below saved it at; odd when a frame below
	// put it somewhere the walk does not follow, or had no rule.
	__u64 bx;
	__u64 at;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rbx_state);
} rbx_scratch SEC(".maps");

// Where a stack is taken before it is hashed: too large for the BPF stack.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_trace);
} stack_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct sample_stats);
} stats SEC(".maps");

// On-demand capture (RFD 070): while a capture runs, a second set of per-CPU
// perf events at a higher rate feeds capture_sample, which records only the
// target processes, into maps of its own. Continuous data keeps its rate and
// meaning. The loader sizes these maps per capture (they are tiny otherwise).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u32); // tgid
	__type(value, __u8);
} capture_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct sample_key);
	__type(value, __u64);
} capture_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, __u64);
	__type(value, struct stack_trace);
} capture_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sample_stats);
} capture_stats SEC(".maps");

// Unwind tables by id: one array of rows per binary, sized to it
// (BPF_F_INNER_MAP lets each have its own length). BPF_F_MMAPABLE: the
// agent writes a table by copying its rows into the map's memory, not with
// a system call's work per row.
struct unwind_rows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct unwind_row);
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__array(values, struct unwind_rows);
} unwind_tables SEC(".maps");

// Processes unwound with tables; no entry: frame pointers.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); // tgid
	__type(value, struct proc_unwind);
} proc_unwinds SEC(".maps");

// Binaries whose unwind table user space has loaded, by file (the kernel's
// device number, inode and modification time: an inode number is reused once
// a deleted binary's file is gone, the time tells the new file apart): a
// process that execs one gets the table for its own code at exec, and its
// frames in a library whose table is loaded find it through the process's
// memory map (find_vma_row), so its stacks are whole from its first sample
// on, before user space has read the process.
struct exe_key {
	__u64 dev;
	__u64 ino;
	__s64 mtime_ns;
};

struct exe_unwind {
	__u64 text_vaddr; // lowest ELF address of the executable segments
	// The file offset at text_vaddr: a mapping of the file at offset o
	// holds ELF address o - text_off + text_vaddr. NO_TEXT_OFF when the
	// executable segments do not share one (such a file is found only at
	// exec, from start_code).
	__u64 text_off;
	__u32 table;
	__u32 rows;
};
#define NO_TEXT_OFF (~0ULL)

// file_key is the exe_unwinds key of the file whose inode this is.
static __always_inline void file_key(struct inode *inode, struct exe_key *key)
{
	key->dev = inode->i_sb->s_dev;
	key->ino = inode->i_ino;
	key->mtime_ns = inode->i_mtime_sec * 1000000000LL + inode->i_mtime_nsec;
}

#define OVERLAYFS_SUPER_MAGIC 0x794c7630
// FMODE_BACKING (include/linux/fs.h) is bit 25 from 6.6 and bit 24 from
// 6.14, where bit 25 became FMODE_NONOTIFY: either bit is only a hint, the
// overlay's superblock decides.
#define FMODE_BACKING_BITS ((1U << 24) | (1U << 25))

// mapped_file_key is the exe_unwinds key of the file a mapping holds, as
// user space keys it. A mapping of a file on an overlay mount (a
// container's image) holds the layer's file, whose device is the layer's
// file system; /proc/PID/maps, stat and the exec'd program's mm->exe_file
// show the overlay mount's device, with the layer file's inode number and
// mtime. Since 6.6 the layer's file is a backing_file that keeps the
// overlay's path beside it; before, its f_path was the overlay's.
static __always_inline void mapped_file_key(struct file *f, struct exe_key *key)
{
	struct dentry *user = NULL;
	struct super_block *sb;

	file_key(f->f_inode, key);
	if (bpf_core_type_exists(struct backing_file)) {
		if (!(f->f_mode & FMODE_BACKING_BITS))
			return;
		// struct file is backing_file's first member.
		user = BPF_CORE_READ((struct backing_file *)f, user_path.dentry);
	} else {
		user = f->f_path.dentry;
	}
	if (!user)
		return;
	sb = BPF_CORE_READ(user, d_sb);
	if (sb && BPF_CORE_READ(sb, s_magic) == OVERLAYFS_SUPER_MAGIC)
		key->dev = BPF_CORE_READ(sb, s_dev);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct exe_key);
	__type(value, struct exe_unwind);
} exe_unwinds SEC(".maps");

// When each process last exec'd (bpf_ktime_get_ns, CLOCK_MONOTONIC), for
// processes that exec'd while DWARF unwinding was on; dropped at exit. User
// space learns of an exec from the ring buffer, later than it happens: a
// read of /proc that began after this time saw the new image, one that
// began before may have seen the image the process left, whose mappings must
// not replace the table the exec gave the new one.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32); // tgid
	__type(value, __u64);
} exec_times SEC(".maps");

// The executable file mappings a process made (the program and ld.so at
// its exec, each library as ld.so maps it, at start or at a dlopen), kept
// by proc_vma_store as they are made, in process context. A walk of a
// process that user space has not read (find_vma_row) takes its libraries
// from here, as many a sample as it meets. The process's memory map can give it only one:
// in the timer's interrupt a second bpf_find_vma finds the first's mmap
// unlock still queued and fails, so a process sampled once or twice on a
// CPU (a compiler, a linker, a shell's tools) had its stacks cut at the
// second library the walk met.
#define MAX_MAPPED_FILES 16

struct mapped_file {
	__u64 start;
	__u64 end;
	__u64 pgoff; // the file offset of start, in pages
	struct exe_key key;
	__u32 check; // mapped_check of the rest: 0 while being written
	__u32 _pad;
};

struct mapped_files {
	// The address space these are of: an exec gives the process a new
	// one, and the first mapping made in it starts the list afresh.
	__u64 mm;
	__u32 n; // slots taken (more than MAX_MAPPED_FILES when some were not kept)
	// Executable file mappings stored in this address space, kept or
	// not: a walk drops what it found before the last one (found_maps).
	__u32 maps;
	struct mapped_file f[MAX_MAPPED_FILES];
};

// By thread group id; LRU, dropped at exit (a sampled process's by user space,
// at its exit event). User space sizes it.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mapped_files);
} mapped_files SEC(".maps");

// A new process's list, all zero (never written).
static struct mapped_files no_mapped_files;

static __always_inline __u32 mapped_check(struct mapped_file *f)
{
	__u64 h = (f->start ^ (f->end << 7) ^ (f->pgoff << 13) ^ (f->key.ino << 29) ^ f->key.dev ^ f->key.mtime_ns) *
		  0x9e3779b97f4a7c15ULL;

	return (__u32)(h >> 32) | 1;
}

// Room to build a proc_unwind (too large for the BPF stack).
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct proc_unwind);
} proc_unwind_scratch SEC(".maps");

// A HotSpot JVM's code cache, as the JVM describes its own structures
// (gHotSpotVMStructs, read by user space: internal/hotspot). HotSpot's
// compiled code (C2's, and C1's and the runtime stubs') keeps no frame
// pointer unless the JVM runs with -XX:+PreserveFramePointer, and has no
// unwind tables: each CodeBlob records its frame's size instead, which is
// how HotSpot walks its own stacks. A frame in one of the heaps is
// unwound with it (hotspot_frame); without it the walk skipped the
// compiled frames between the leaf and the interpreter.
#define MAX_JVM_HEAPS 4
#define HOTSPOT_SEGMAP_HOPS 16 // each hop goes back up to 254 segments
#define HOTSPOT_MAX_FRAME_WORDS (1 << 16)

struct jvm_heap {
	__u64 low;    // reserved code memory [low, high)
	__u64 high;
	__u64 segmap; // one byte per segment: 0 starts a block, else how far back
	__u32 shift;  // log2 of the segment size
	__u32 _pad;
};

struct jvm_unwind {
	struct jvm_heap heap[MAX_JVM_HEAPS];
	__u32 n;
	__u32 block_header;     // sizeof(HeapBlock): the CodeBlob follows it
	__u32 off_size;         // CodeBlob::_size (int, bytes)
	__u32 off_frame_size;   // CodeBlob::_frame_size (int, words)
	__u32 off_frame_complete; // CodeBlob::_frame_complete_offset: int (JDK 9-22) or int16 (23+), read as int16
	__u32 off_code;         // CodeBlob::_code_begin (an address) or _code_offset (an int, from the blob)
	__u32 code_is_offset;
	__u32 const_method;      // Method::_constMethod
	__u64 interp_lo;         // the template interpreter's code [interp_lo, interp_hi)
	__u64 interp_hi;
	__u32 const_method_size; // sizeof(ConstMethod): the bytecodes follow it
	__u32 _pad;
};

// An interpreted Java frame's entry in a user stack, in place of its pc:
// JAVA_INTERPRETED, the bytecode index (JAVA_NO_BCI when unknown) at bit
// 47, and the Method* (a user address, below 2^47). No code address has
// bit 63 set; user space names the method and its line.
#define JAVA_INTERPRETED (1ULL << 63)
#define JAVA_BCI_SHIFT 47
#define JAVA_NO_BCI 0xffffULL
#define JAVA_METHOD_MASK ((1ULL << JAVA_BCI_SHIFT) - 1)

// The interpreter's frame (x86-64, JDK 9+: frame_x86.hpp), in words from
// rbp: the sender's stack pointer at -1, the Method* at -3, the bytecode
// pointer at -8 (saved at calls; r13 while the frame runs).
#define INTERP_SENDER_SP 1
#define INTERP_METHOD 3
#define INTERP_BCP 8

// Written by user space once a JVM's code cache is read; deleted at the
// process's exec and exit. Past 256 JVMs on a node, the others' compiled
// frames are walked by frame pointer.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, struct jvm_unwind);
} jvm_unwinds SEC(".maps");

// A Node.js process's V8 layout (internal/nodev8, from the v8dbg_
// constants V8 exports for postmortem debuggers). V8's generated code
// (the interpreter's builtins, Sparkplug's, Maglev's and TurboFan's code)
// keeps a frame pointer, and a JavaScript frame holds its context and its
// JSFunction at fixed offsets from it; a typed frame (entry, exit, stub)
// holds a Smi marker where the context would be. The walk puts a
// JavaScript frame's SharedFunctionInfo, the function as its source
// defines it (shared by its closures and by every tier of its code), in
// place of the frame's pc (V8_FUNCTION): interpreted frames are otherwise
// all InterpreterEntryTrampoline, and compiled ones code no file names.
struct v8_proc {
	__s32 fp_context;  // bytes from rbp: a JS frame's context (a heap object), a typed frame's Smi marker
	__s32 fp_function; // a JS frame's JSFunction
	__u32 off_map;     // HeapObject::map
	__u32 off_type;    // Map::instance_type (u16)
	__u32 off_shared;  // JSFunction::shared
	__u16 function_first; // instance types of JSFunction objects
	__u16 function_last;
};

// Written by user space once it has read a Node.js process's layout;
// deleted at the process's exec and exit.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct v8_proc);
} v8_procs SEC(".maps");

// A JavaScript frame's entry in a user stack: V8_FUNCTION and its
// SharedFunctionInfo, a tagged pointer (bit 0 set) below 2^47. No code
// address has bit 62 set, and a Java entry has bit 63.
#define V8_FUNCTION (1ULL << 62)
#define V8_TAG_MASK 3ULL
#define V8_HEAP_OBJECT 1ULL

// proc_unwinds' key of the found-only entries: the proc_unwind a sampled
// process that has none is walked with, holding no mappings from
// user space, only what the walk finds in the process's memory map. A
// process gets a proc_unwind of its own when user space attaches its tables
// or when it execs a program whose table is loaded; one that execs a
// program built with frame pointers (or not analysed yet) has none until it
// is read, and a short-lived one never is. Walked by frame pointer alone,
// its stacks are cut at the first frame in a library built without them
// (Debian's ld.so and libc: a dlopen's, a qsort callback's callers), though
// the library's table is loaded for other processes. An entry of the same
// map, not a map of its own: the walk's callback is verified once per map
// its proc_unwind pointer may come from (55 k instructions against 32 k,
// measured before the row look-up became a global function).
// Thread group ids are below 2^22; user space sizes the map for these too.
#define FOUND_ONLY_KEY 0x80000000U
// Each CPU has this many found-only entries, a process taking the one of
// its thread group id modulo the count (key FOUND_ONLY_KEY | cpu *
// found_only_slots + slot): processes that take turns on a CPU (a build's
// compilers, a shell loop) keep what their walks found. User space sizes
// proc_unwinds with it.
volatile const __u32 found_only_slots = 8;
// Only for this long after the process's exec (exec_times): by then the
// receiver has read it and attached tables when it needs them (a process
// deferred under load: the next interval, 15 s by default). One that still
// has none needs none (Go, frame pointers throughout) and keeps
// bpf_get_stack, which takes a Go program's samples in about half the time
// (4.8 against 8.8 us a sample, receiver README).
#define FOUND_ONLY_NS (15ULL * 1000000000ULL)

// Processes already announced with EVENT_SEEN. LRU: a forgotten pid only
// costs a second EVENT_SEEN, which user space ignores. Only processes in
// this map cause exec, exit and mmap events: a process that is never
// sampled (a /bin/true in a shell loop) costs user space nothing.
// The value is the process's executable memory (mm->exec_vm, in pages) when
// last sampled: when it changes, the process mapped or unmapped code (the
// dynamic loader after start, dlopen) and user space reads its mappings
// again — found by the samples themselves, so it costs nothing between them.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} seen_pids SEC(".maps");

// Non-zero while proc_exec runs on this CPU. The sampling interrupt can run
// cpu_sample in the middle of it (a tp_btf program does not hold off
// perf_event programs), for the exec'ing task itself. Announced between proc_exec's
// delete from seen_pids and its EXEC record, the new image would reach
// user space before the exec (SEEN, then EXEC), and user space would drop
// a process the kernel goes on treating as announced: its next exec or
// maps change would report a process user space does not know.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} in_exec SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	// 1,820 events of 64 bytes (and a header of 8 each).
	__uint(max_entries, 128 * 1024);
} events SEC(".maps");

// Which map set the programs write to (0 or 1). Written by user space through
// the mmapped .bss.
volatile __u32 active_set;

// Set by the loader when trace context maps are wired in; with 0 the
// sampler skips the lookups (and their cost) entirely.
volatile const __u32 trace_lookup = 0;

// Set by the loader for unwinding: auto; with 0 every user stack is taken
// with frame pointers and proc_unwinds is never looked up.
volatile const __u32 dwarf_unwind = 0;

// Make the struct types visible to bpf2go (-type).
const struct sample_key *unused_sample_key __attribute__((unused));
const struct sample_stats *unused_sample_stats __attribute__((unused));
const struct stack_trace *unused_stack_trace __attribute__((unused));
const struct lifecycle_event *unused_lifecycle_event __attribute__((unused));
const struct unwind_row *unused_unwind_row __attribute__((unused));
const struct unwind_mapping *unused_unwind_mapping __attribute__((unused));
const struct proc_unwind *unused_proc_unwind __attribute__((unused));
const struct exe_key *unused_exe_key __attribute__((unused));
const struct exe_unwind *unused_exe_unwind __attribute__((unused));
const struct jvm_unwind *unused_jvm_unwind __attribute__((unused));
const struct v8_proc *unused_v8_proc __attribute__((unused));

static __always_inline struct sample_stats *stats_for(__u32 set)
{
	return bpf_map_lookup_elem(&stats, &set);
}

// reserve_event takes a record in the events ring, or counts the event lost.
static __always_inline struct lifecycle_event *reserve_event(struct sample_stats *st)
{
	struct lifecycle_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

	// bpf_ringbuf_reserve never blocks; a full buffer is counted.
	if (!ev)
		__sync_fetch_and_add(&st->events_lost, 1);
	return ev;
}

static __always_inline void submit_event(struct lifecycle_event *ev, __u32 kind, struct task_struct *task, __u64 code)
{
	ev->kind = kind;
	ev->code = code;
	ev->pid = task->tgid;
	ev->start_ns = task->group_leader->start_boottime;
	ev->cgroup_id = task->cgroups->dfl_cgrp->kn->id;
	ev->ppid = task->real_parent->tgid;
	ev->_pad = 0;
	ev->at_ns = bpf_ktime_get_ns();
	__builtin_memset(ev->comm, 0, sizeof(ev->comm));
	bpf_probe_read_kernel_str(ev->comm, sizeof(ev->comm), task->group_leader->comm);
	bpf_ringbuf_submit(ev, 0);
}

// A key of the maps of what was reported to user space once per process
// (py_codes_reported, jvm_frames_reported): the process and the code
// object or frame.
struct reported_key {
	__u32 tgid;
	__u32 _pad;
	__u64 code;
};

// report_once sends code to user space as an event of kind for the current
// process, unless reported (an LRU map of reported_key to the process's
// start time: a reused pid is another process) has it for this process. A
// forgotten key is reported again, which user space answers from its
// cache. The entry is made only once the record is taken: with the ring
// full the next sample tries again. half_full: only while the events ring
// is at most half full, so that reports that come in hundreds a second
// never take the room of an exec's or an exit's event.
static __always_inline void report_once(void *reported, __u32 kind, __u64 code, __u32 half_full)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct reported_key k = {};
	struct lifecycle_event *ev;
	struct sample_stats *st;
	__u64 start, *at;

	if (!task)
		return;
	k.tgid = task->tgid;
	k.code = code;
	start = task->group_leader->start_boottime;
	at = bpf_map_lookup_elem(reported, &k);
	if (at && *at == start)
		return;
	if (half_full && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2)
		return;
	st = stats_for(active_set & 1);
	if (!st)
		return;
	ev = reserve_event(st);
	if (!ev)
		return;
	submit_event(ev, kind, task, code);
	bpf_map_update_elem(reported, &k, &start, BPF_ANY);
}

// A JVM's frames already reported with EVENT_JAVA_FRAME. The samples of a
// JVM are named at the interval's drain, from its memory, which is gone
// once it exits: a build's javac, a test run's JVM, the last interval of
// any JVM. 8,192 entries are about 700 KB of kernel memory, charged to the
// agent's cgroup.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct reported_key);
	__type(value, __u64);
} jvm_frames_reported SEC(".maps");

// report_jvm_frame sends frame, a frame of the current process (a JVM the
// sampler walks with its code cache), to user space once per process, while
// the events ring is at most half full: a JVM's warm-up finds hundreds of
// new frames a second. A global function: verified once.
__noinline int report_jvm_frame(__u64 frame)
{
	report_once(&jvm_frames_reported, EVENT_JAVA_FRAME, frame, 1);
	return 0;
}

// A Node.js process's functions already reported with EVENT_V8_FUNCTION
// (v8_function), so that a script or test run that exits before the
// interval's drain keeps its names. 4,096 entries, about 350 KB.
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct reported_key);
	__type(value, __u64);
} v8_functions_reported SEC(".maps");

static __always_inline void emit(struct sample_stats *st, __u32 kind, struct task_struct *task)
{
	struct lifecycle_event *ev = reserve_event(st);

	if (ev)
		submit_event(ev, kind, task, 0);
}

// stack_hash mixes a stack's frames into 64 bits (FNV-1a over words, then a
// murmur3 finalizer). 0 is reserved for "no stack".
static __always_inline __u64 stack_hash(struct stack_trace *t)
{
	__u64 h = (0xcbf29ce484222325ULL ^ t->len ^ ((__u64)t->flags << 32) ^ ((__u64)t->end << 40) ^ t->leaf_ret) * 0x100000001b3ULL;

	for (__u32 i = 0; i < MAX_STACK_DEPTH; i++) {
		if (i >= t->len)
			break;
		h = (h ^ t->ips[i]) * 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h ? h : 1;
}

// user_sp_word reads the word at the user stack pointer of the current task,
// 0 when unreadable. The user registers come from the task (saved at kernel
// entry), not from the perf context: when the sample hit kernel mode those
// are kernel registers.
static __always_inline __u64 user_sp_word(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs;
	__u64 word = 0;

	if (!task)
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	if (bpf_probe_read_user(&word, sizeof(word), (void *)regs->sp) != 0)
		return 0;
	return word;
}

// user_unwind is the register state of the frame being unwound, shared
// with the bpf_loop callback, and what the walk fills and reads (looked up
// once per stack, not per frame).
struct user_unwind {
	struct stack_trace *t;   // the per-CPU scratch stack being filled
	struct proc_unwind *pu;  // the process's mappings
	struct jvm_unwind *jvm;  // its code cache when it is a HotSpot JVM, else NULL
	struct v8_proc *v8;      // its V8 layout when it is a Node.js process, else NULL
	__u64 pc;
	__u64 sp;
	__u64 bp;
	__u64 r13; // the sampled frame's: a running interpreter's bytecode pointer
	struct rbx_state *rbx;   // where the frame's rbx is (per-CPU scratch)
	__u32 n;
	__u8 end;
	__u8 leaf_cfi;
	__u8 bp_lost; // a frame's rule said its caller's rbp is not recoverable
	// pc is where a signal interrupted the code, not a return address:
	// its own row is looked up, not the one before it.
	__u8 interrupted;
};

#define VM_EXEC 0x00000004
#define PAGE_SHIFT 12

// mapping_table gives m, a mapping of the file key at file page pgoff, the
// file's table when one is loaded (exe_unwinds holds every loaded table's
// files, libraries too), and leaves it without one otherwise.
static __always_inline void mapping_table(struct unwind_mapping *m, struct exe_key *key, __u64 pgoff)
{
	struct exe_unwind *eu = bpf_map_lookup_elem(&exe_unwinds, key);

	if (!eu || eu->text_off == NO_TEXT_OFF)
		return;
	// The ELF address at the mapping's start is its file offset's.
	m->bias = m->start - ((pgoff << PAGE_SHIFT) - eu->text_off + eu->text_vaddr);
	m->table = eu->table;
	m->rows = eu->rows;
}

// vma_found fills m with pc's mapping: its bounds always, its table when
// its file has one loaded (mapping_table).
static long vma_found(struct task_struct *task, struct vm_area_struct *vma, struct unwind_mapping *m)
{
	struct exe_key key;

	m->start = vma->vm_start;
	m->end = vma->vm_end;
	if (!(vma->vm_flags & VM_EXEC) || !vma->vm_file)
		return 0;
	mapped_file_key(vma->vm_file, &key);
	mapping_table(m, &key, vma->vm_pgoff);
	return 0;
}

static __always_inline __u32 found_check(__u64 start, __u64 end, __u64 bias, __u32 table, __u32 rows)
{
	__u64 h = (start ^ (end << 7) ^ (bias << 13) ^ ((__u64)table << 29) ^ rows) * 0x9e3779b97f4a7c15ULL;

	return (__u32)(h >> 32) | 1; // never 0, an empty slot's
}

// mapped_file_row fills m with pc's mapping from the process's mapped_files
// and returns 1, its table when its file has one loaded, or returns 0 when
// none of them holds pc.
static __always_inline int mapped_file_row(struct task_struct *task, __u64 pc, struct unwind_mapping *m)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct mapped_files *mf = bpf_map_lookup_elem(&mapped_files, &pid);
	__u32 n;

	if (!mf || !task || mf->mm != (__u64)task->mm)
		return 0;
	n = mf->n;
	for (int k = 0; k < MAX_MAPPED_FILES; k++) {
		struct mapped_file f;

		if (k >= n)
			break;
		f = mf->f[k];
		if (pc < f.start || pc >= f.end || f.check != mapped_check(&f))
			continue;
		m->start = f.start;
		m->end = f.end;
		mapping_table(m, &f.key, f.pgoff);
		return 1;
	}
	return 0;
}

// find_vma_row finds the mapping of pc, outside every mapping user space
// gave the process, in the list of files the process mapped
// (mapped_file_row) or else in its memory map, and keeps it in pu's found
// mappings. A library the process mapped since user space last read
// it (a short-lived program's, all of them: it exits before it is read)
// then unwinds with its table whenever another process loaded it. Returns
// 0 when pc is not mapped or the map is busy (nothing kept). The lookups
// are counted in the sampler's stats (a capture's too).
static __always_inline int find_vma_row(struct proc_unwind *pu, __u64 pc, struct unwind_mapping *out)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct sample_stats *st = stats_for(active_set & 1);
	struct unwind_mapping m = {};
	__u32 slot;

	// The program's own text is not looked up. Its table, when it had
	// one at the exec or user space has read the process, is in the
	// entry's mappings; a pc in it that gets here has none (or one
	// loaded since the exec, which the receiver's read attaches). A
	// sample gets one bpf_find_vma (in the timer's interrupt the second
	// finds the first's mmap unlock still queued and fails with EBUSY),
	// which the next library the walk meets needs.
	if (task && task->mm && pc >= task->mm->start_code && pc < task->mm->end_code)
		return 0;
	if (mapped_file_row(task, pc, &m)) {
		if (st)
			__sync_fetch_and_add(&st->mapped_lookups, 1);
	} else {
		if (st)
			__sync_fetch_and_add(&st->vma_lookups, 1);
		if (bpf_find_vma(task, pc, vma_found, &m, 0) != 0 || !m.end)
			return 0;
		if (m.rows && st)
			__sync_fetch_and_add(&st->vma_tables, 1);
	}
	*out = m;
	slot = pu->found_n;
	if (slot < MAX_FOUND_MAPPINGS) {
		pu->found_n = slot + 1;
		pu->found[slot].check = 0;
		pu->found[slot].start = m.start;
		pu->found[slot].end = m.end;
		pu->found[slot].bias = m.bias;
		pu->found[slot].table = m.table;
		pu->found[slot].rows = m.rows;
		pu->found[slot].check = found_check(m.start, m.end, m.bias, m.table, m.rows);
	}
	return 1;
}

// find_row returns the unwind row for the ELF address of pc in pu's
// mappings, or NULL when none of them has one.
static __always_inline struct unwind_row *find_row(struct proc_unwind *pu, __u64 pc)
{
	__u32 lo, hi, mid, idx, table = 0, nrows = 0, n = pu->n, found = 0;
	__u64 bias = 0, va;
	struct unwind_mapping vm;
	void *rows;

	// A linear scan: the verifier knows k exactly in each iteration. A
	// binary search indexes the array with a computed value, which it must
	// track precisely through every path: 40x the verification work, 0.4 s
	// more at load. A few compares per frame (mappings are sorted, so the
	// scan stops at the first one above pc) cost less than that is worth.
	for (int k = 0; k < MAX_UNWIND_MAPPINGS; k++) {
		if (k >= n || pc < pu->m[k].start)
			break; // sorted by start: no later mapping holds pc
		if (pc < pu->m[k].end) {
			table = pu->m[k].table;
			nrows = pu->m[k].rows;
			bias = pu->m[k].bias;
			found = 1;
			break;
		}
	}
	if (!found) {
		n = pu->found_n;
		for (int k = 0; k < MAX_FOUND_MAPPINGS; k++) {
			if (k >= n)
				break;
			struct found_mapping fm = pu->found[k];

			if (pc >= fm.start && pc < fm.end &&
			    fm.check == found_check(fm.start, fm.end, fm.bias, fm.table, fm.rows)) {
				table = fm.table;
				nrows = fm.rows;
				bias = fm.bias;
				found = 1;
				break;
			}
		}
	}
	if (!found && find_vma_row(pu, pc, &vm)) {
		table = vm.table;
		nrows = vm.rows;
		bias = vm.bias;
	}
	if (!nrows)
		return 0;
	rows = bpf_map_lookup_elem(&unwind_tables, &table);
	if (!rows)
		return 0;
	va = pc - bias;
	// The last row with row.pc <= va.
	lo = 0;
	hi = nrows;
	for (int k = 0; k < UNWIND_ROW_SEARCH && lo < hi; k++) {
		struct unwind_row *r;
		__u32 right;

		mid = (lo + hi) / 2;
		r = bpf_map_lookup_elem(rows, &mid);
		if (!r)
			return 0;
		// Branch-free (lo = mid + 1 or hi = mid): one verifier path per
		// step instead of two.
		right = r->pc <= va;
		lo += right * (mid + 1 - lo);
		hi -= (1 - right) * (hi - mid);
	}
	if (lo == 0)
		return 0;
	idx = lo - 1;
	return bpf_map_lookup_elem(rows, &idx);
}

static __always_inline int read_word(__u64 addr, __u64 *out)
{
	return bpf_probe_read_user(out, sizeof(*out), (void *)addr);
}

// row_of copies the unwind row of pc (find_row) into out and returns 1, or
// returns 0 when there is none. A global function: the verifier checks it
// once, however many places of the walk look a row up.
__noinline int row_of(struct proc_unwind *pu, __u64 pc, struct unwind_row *out)
{
	struct unwind_row *r;

	if (!pu || !out)
		return 0;
	r = find_row(pu, pc);
	if (!r)
		return 0;
	*out = *r;
	return 1;
}

// after_call says whether ra follows a call instruction: E8 rel32, or FF /2
// (an indirect call through a register or memory, with or without a REX
// prefix, 2 to 7 bytes long). Code pointers that a frame keeps on its
// stack (a callback, a saved register) rarely do.
static __always_inline int after_call(__u64 ra)
{
	__u64 w;

	if (ra < 8 || read_word(ra - 8, &w) != 0)
		return 0;
	// Byte i of w is the one at ra - 8 + i.
#define CODE_BYTE(i) ((w >> (8 * (i))) & 0xff)
#define CALL_FF(k) (CODE_BYTE(8 - (k)) == 0xff && ((CODE_BYTE(9 - (k)) >> 3) & 7) == 2)
	return CODE_BYTE(3) == 0xe8 || CALL_FF(2) || CALL_FF(3) || CALL_FF(4) || CALL_FF(6) || CALL_FF(7);
#undef CALL_FF
#undef CODE_BYTE
}

// hotspot_epilogue says where the caller's frame is when a JVM's leaf pc
// (its frame complete) is in an epilogue, where the frame is being taken
// down and its size no longer holds: 1 with *cfa_off and *rbp_saved set,
// else 0. HotSpot's x86-64 epilogues are "add rsp, N; pop rbp; [safepoint
// poll]; ret"; the patterns are the ones the OpenTelemetry eBPF profiler
// checks, and the poll of JDK 17+ ("cmp rsp, [r15+X]; ja stub; ret").
static __always_inline int hotspot_epilogue(__u64 pc, __u32 *cfa_off, __u32 *rbp_saved)
{
	__u8 c[16]; // c[1] is the byte at pc
	int ret = 0;

	if (bpf_probe_read_user(c, sizeof(c), (void *)(pc - 1)) != 0)
		return 0;
	if (c[1] == 0xc3)
		goto pc_only; // ret: the return address at rsp
	for (int i = 2; i < (int)sizeof(c); i++)
		ret |= c[i] == 0xc3;
	if (!ret)
		return 0; // no ret ahead: not an epilogue
	if (c[1] == 0x5d) {
		*cfa_off = 16; // pop rbp: rbp, then the return address
		*rbp_saved = 1;
		return 1;
	}
	if ((c[1] == 0x41 && c[2] == 0x85 && c[3] == 0x02 && c[4] == 0xc3) || // test [r10], eax; ret
	    (c[1] == 0x0f && (c[2] == 0x85 || c[2] == 0x87) && c[7] == 0xc3) || // jne/ja (the poll's stub); ret
	    c[0] == 0x5d || c[0] == 0xc9) // just after pop rbp or leave
		goto pc_only;
	return 0;
pc_only:
	*cfa_off = 8;
	*rbp_saved = 0;
	return 1;
}

// hotspot_frame looks pc up in the JVM's code cache and, when its CodeBlob
// has a frame size (compiled methods, runtime stubs), sets *cfa_off (the
// caller's stack pointer is sp + *cfa_off, the return address below it)
// and *rbp_saved (the caller's rbp is saved at cfa - 16) and returns 1.
// Returns 0 for code outside the code cache and for blobs without a frame
// size (the interpreter, adapters, StubRoutines), which keep rbp as a
// frame pointer. leaf: pc was sampled (frame 0), not a return address.
// Code found in a blob, with a frame size or not, is reported
// (report_jvm_frame) from here, not from the walk's callback, where the call
// was 22 k more instructions to verify. A global function: verified once.
__noinline int hotspot_frame(struct jvm_unwind *j, __u64 pc, __u32 leaf, __u32 *cfa_off, __u32 *rbp_saved)
{
	__u64 low = 0, segmap = 0, seg, blob, code = 0, at;
	__u32 shift = 0, size = 0, off, found = 0, code32 = 0;
	__s32 words = 0;
	__s16 complete = 0;
	__u8 tag = 0;

	if (!j || !cfa_off || !rbp_saved)
		return 0;
	for (int k = 0; k < MAX_JVM_HEAPS; k++) {
		if (k >= j->n)
			break;
		if (pc >= j->heap[k].low && pc < j->heap[k].high) {
			low = j->heap[k].low;
			segmap = j->heap[k].segmap;
			shift = j->heap[k].shift & 31;
			found = 1;
			break;
		}
	}
	if (!found)
		return 0;
	// A return address may be just past its call's blob.
	at = leaf ? pc : pc - 1;
	seg = (at - low) >> shift;
	found = 0;
	for (int k = 0; k < HOTSPOT_SEGMAP_HOPS; k++) {
		if (bpf_probe_read_user(&tag, 1, (void *)(segmap + seg)) != 0)
			return 0;
		if (tag == 0) {
			found = 1;
			break;
		}
		if (tag == 0xff || tag > seg)
			return 0; // a free block, or a corrupt map
		seg -= tag;
	}
	if (!found)
		return 0;
	blob = low + (seg << shift) + j->block_header;
	if (bpf_probe_read_user(&size, sizeof(size), (void *)(blob + j->off_size)) != 0 || at < blob || at - blob >= size)
		return 0;
	report_jvm_frame(at);
	if (bpf_probe_read_user(&words, sizeof(words), (void *)(blob + j->off_frame_size)) != 0 || words <= 0 ||
	    words > HOTSPOT_MAX_FRAME_WORDS)
		return 0;
	*rbp_saved = 1;
	*cfa_off = (__u32)words * 8;
	if (!leaf)
		return 1; // a call site: the frame is whole
	if (bpf_probe_read_user(&complete, sizeof(complete), (void *)(blob + j->off_frame_complete)) != 0)
		return 0;
	off = j->off_code;
	if (j->code_is_offset) {
		if (bpf_probe_read_user(&code32, sizeof(code32), (void *)(blob + off)) != 0)
			return 0;
		code = blob + code32;
	} else if (bpf_probe_read_user(&code, sizeof(code), (void *)(blob + off)) != 0) {
		return 0;
	}
	if (complete >= 0 && pc >= code && pc < code + complete) {
		// In the prologue (stack bang, push rbp, sub rsp): the frame is
		// not built yet. Its last instruction allocates the frame, so
		// near its end rbp is pushed already.
		if (pc + 4 >= code + complete) {
			*cfa_off = 16;
		} else {
			*cfa_off = 8;
			*rbp_saved = 0;
		}
		return 1;
	}
	hotspot_epilogue(pc, cfa_off, rbp_saved);
	return 1;
}

// interp_step is where hotspot_interpreted found an interpreted frame's
// caller, and the frame's entry for the stack.
struct interp_step {
	__u64 frame; // JAVA_INTERPRETED | bci | Method*
	__u64 pc;
	__u64 sp;
	__u64 bp;
};

// hotspot_interpreted walks an interpreted Java frame (pc in the JVM's
// template interpreter, rbp its frame pointer): its caller's pc, rbp and
// stack pointer (the interpreter keeps the sender's, which a compiled
// caller's frame size is counted from: rbp + 16 is short of it by the
// callee's locals), and the frame's entry for the stack. bcp: the leaf's
// bytecode pointer (r13), 0 for a caller's (read from the frame). Returns
// 0 when rbp does not look like the frame's (at the method's entry, before
// the frame is built): the frame pointer is followed then. A global
// function: verified once.
__noinline int hotspot_interpreted(struct jvm_unwind *j, __u64 sp, __u64 bp, __u64 bcp, struct interp_step *out)
{
	__u64 w[INTERP_BCP + 2]; // rbp - 8*INTERP_BCP .. rbp + 8
	__u64 method, sender, cm = 0, bci = JAVA_NO_BCI;

	if (!j || !out)
		return 0;
	if (bp < sp || bp >= sp + 0x10000)
		return 0;
	if (bpf_probe_read_user(w, sizeof(w), (void *)(bp - 8 * INTERP_BCP)) != 0)
		return 0;
	// w[INTERP_BCP - k] is the word at rbp - 8k.
	method = w[INTERP_BCP - INTERP_METHOD];
	sender = w[INTERP_BCP - INTERP_SENDER_SP];
	if (!bcp)
		bcp = w[0];
	if (sender <= bp || method == 0 || method > JAVA_METHOD_MASK)
		return 0;
	if (bpf_probe_read_user(&cm, sizeof(cm), (void *)(method + j->const_method)) == 0 && cm &&
	    bcp >= cm + j->const_method_size && bcp - (cm + j->const_method_size) < JAVA_NO_BCI)
		bci = bcp - (cm + j->const_method_size);
	out->frame = JAVA_INTERPRETED | bci << JAVA_BCI_SHIFT | method;
	out->sp = sender;
	out->pc = w[INTERP_BCP + 1];
	out->bp = w[INTERP_BCP];
	return 1;
}

// unwind_step records the current frame and moves the state to its caller.
// v8_function returns the SharedFunctionInfo of the JavaScript frame
// whose frame pointer is bp, tagged as the frame holds it, or 0 for any
// other frame: a typed frame (a Smi marker where a JS frame's context is),
// a word that is no heap object, a function slot whose object's map is
// not a JSFunction's. A function is reported the first time it is on one
// of the process's stacks, while the events ring is at most half full.
// A global function: verified once.
__noinline __u64 v8_function(struct v8_proc *v, __u64 bp)
{
	__u64 context = 0, function = 0, map = 0, shared = 0;
	__u16 type = 0;

	if (!v || !bp)
		return 0;
	if (bpf_probe_read_user(&context, sizeof(context), (void *)(bp + (__s64)v->fp_context)) != 0 ||
	    (context & V8_TAG_MASK) != V8_HEAP_OBJECT)
		return 0;
	if (bpf_probe_read_user(&function, sizeof(function), (void *)(bp + (__s64)v->fp_function)) != 0 ||
	    (function & V8_TAG_MASK) != V8_HEAP_OBJECT)
		return 0;
	function &= ~V8_TAG_MASK;
	if (bpf_probe_read_user(&map, sizeof(map), (void *)(function + v->off_map)) != 0 ||
	    (map & V8_TAG_MASK) != V8_HEAP_OBJECT)
		return 0;
	if (bpf_probe_read_user(&type, sizeof(type), (void *)((map & ~V8_TAG_MASK) + v->off_type)) != 0 ||
	    type < v->function_first || type > v->function_last)
		return 0;
	if (bpf_probe_read_user(&shared, sizeof(shared), (void *)(function + v->off_shared)) != 0 ||
	    (shared & V8_TAG_MASK) != V8_HEAP_OBJECT || shared >= V8_FUNCTION)
		return 0;
	report_once(&v8_functions_reported, EVENT_V8_FUNCTION, shared, 1);
	return shared;
}

// Returns 1 (stop) at the end of the stack.
static long unwind_step(__u64 i, void *ctx)
{
	struct user_unwind *s = ctx;
	// One frame per iteration, so the frame index is the loop index. It
	// must not come from s: a value stored there is tracked exactly, and
	// the verifier then re-checks this callback for every depth (127x).
	__u32 n = i;
	struct stack_trace *t = s->t;
	struct proc_unwind *pu = s->pu;
	struct rbx_state *rs = s->rbx;
	struct unwind_row row = {};
	__u64 cfa, ra = 0, bp = s->bp, shared, rbx;
	__u8 kind = CFA_NONE;

	if (!t || !pu || !rs) {
		s->end = END_INVALID;
		return 1;
	}
	if (n >= MAX_STACK_DEPTH) {
		s->end = END_TRUNCATED;
		return 1;
	}
	// User space looks a caller's frame up one byte before its address (a
	// return address points after its call). Where a signal came, the
	// address is the interrupted instruction itself: it is recorded one
	// past, so that the look-up lands on it.
	t->ips[n] = s->pc + s->interrupted;
	s->n = n + 1;

	// Return addresses point after the call: look up the call itself.
	if (row_of(pu, n == 0 || s->interrupted ? s->pc : s->pc - 1, &row))
		kind = row.kind & CFA_KIND_MASK;
	s->interrupted = 0;
	switch (kind) {
	case CFA_END:
		return 1;
	case CFA_SIGNAL:
		// The interrupted code goes on where it was: its pc, rsp and rbp
		// from the ucontext (its rbp may be a frame pointer again, or
		// whatever the code kept there: its own rule says).
		if (read_word(s->sp + UC_RIP, &ra) != 0 || read_word(s->sp + UC_RSP, &cfa) != 0 ||
		    read_word(s->sp + UC_RBP, &bp) != 0) {
			s->end = END_UNREADABLE;
			return 1;
		}
		if (!ra)
			return 1;
		// The handler "returned" to the trampoline's first instruction,
		// not after a call: recorded one past, as the interrupted pc.
		if (n > 0)
			t->ips[n] = s->pc + 1;
		rs->at = s->sp + UC_RBX;
		s->pc = ra;
		s->sp = cfa;
		s->bp = bp;
		s->bp_lost = 0;
		s->interrupted = 1;
		return 0;
	case CFA_RSP:
		cfa = s->sp + row.cfa_off;
		break;
	case CFA_RBP:
		if (!s->bp || s->bp_lost) {
			s->end = END_INVALID;
			return 1;
		}
		cfa = s->bp + row.cfa_off;
		break;
	case CFA_PLT:
		cfa = s->sp + 8 + ((s->pc & 15) >= row.cfa_off ? 8 : 0);
		break;
	case CFA_RBX:
		// Read only here, where a row needs it: frames that save rbx
		// are most frames, and CFA_RBX rows are ld.so's trampolines.
		if (rs->at & 1) {
			s->end = END_INVALID;
			return 1;
		}
		cfa = rs->bx;
		if (rs->at && read_word(rs->at, &cfa) != 0) {
			s->end = END_UNREADABLE;
			return 1;
		}
		cfa += row.cfa_off;
		break;
	default:
		// A JVM's interpreted frame: its method in place of its pc, and
		// its caller from the frame's own records.
		if (s->jvm && s->pc >= s->jvm->interp_lo && s->pc < s->jvm->interp_hi) {
			struct interp_step is = {};

			if (hotspot_interpreted(s->jvm, s->sp, s->bp, n == 0 ? s->r13 : 0, &is)) {
				t->ips[n] = is.frame;
				report_jvm_frame(is.frame);
				if (n == 0)
					s->leaf_cfi = 1; // its caller is known: no leaf-caller recovery
				s->bp_lost = 0;
				rs->at = 1;
				if (!is.pc)
					return 1;
				s->pc = is.pc;
				s->sp = is.sp;
				s->bp = is.bp;
				return 0;
			}
		}
		// A JVM's compiled code: its frame size, as a row would give it.
		if (s->jvm) {
			__u32 off = 0, saved = 0;

			if (hotspot_frame(s->jvm, s->pc, n == 0, &off, &saved)) {
				kind = CFA_RSP;
				// Compiled Java code saves no register for its
				// caller but rbp.
				row.kind = CFA_RSP | (RBX_LOST << RBX_SHIFT);
				row.rbp_off8 = saved ? -2 : 0;
				cfa = s->sp + off;
				break;
			}
		}
		// No rule: the frame pointer. rbp 0 is where frame-pointer code
		// ends (_start, thread entry, Go's goexit) — unless a frame below
		// lost it.
		if (s->bp_lost) {
			s->end = END_INVALID;
			return 1;
		}
		// V8's code (no rows): a JavaScript frame is its function.
		shared = v8_function(s->v8, s->bp);
		if (shared)
			t->ips[n] = V8_FUNCTION | shared;
		// A leaf without rows whose caller has them: a function built
		// with frame pointers that GCC gave no frame (a comparator or a
		// callback that calls nothing), called from a library without
		// frame pointers (glibc's qsort). rbp is then the library's, and
		// a frame-pointer step would end the stack or skip to a frame
		// far above. The word at the stack pointer is its return address
		// when it points just after a call into code with rows; the
		// walk goes on there with the caller's rows.
		if (n == 0 && read_word(s->sp, &ra) == 0 && after_call(ra) && row_of(pu, ra - 1, &row)) {
			cfa = s->sp + 8;
			s->leaf_cfi = 1;
			break;
		}
		if (!s->bp)
			return 1;
		// No "must move up" check here: like the kernel's own
		// frame-pointer walk, follow rbp to another stack (Go's
		// systemstack switches to g0 and back). The depth bounds a loop.
		// Where this frame saved rbx, if it did, no rule says.
		rs->at = 1;
		cfa = s->bp + 16;
		if (read_word(s->bp, &bp) != 0) {
			s->end = END_UNREADABLE;
			return 1;
		}
		break;
	}
	if (kind != CFA_NONE && cfa <= s->sp) {
		s->end = END_INVALID; // no progress: a corrupt rule or stack
		return 1;
	}
	if (read_word(cfa - 8, &ra) != 0) {
		s->end = END_UNREADABLE;
		return 1;
	}
	if (kind != CFA_NONE) {
		if (n == 0)
			s->leaf_cfi = 1;
		rbx = (row.kind >> RBX_SHIFT) & 7;
		if (rbx)
			rs->at = rbx == RBX_LOST ? 1 : cfa - 8 * (rbx + 1);
		if (row.kind & RBP_LOST) {
			bp = 0;
			s->bp_lost = 1;
		} else if (row.rbp_off8 != 0) {
			if (read_word(cfa + (__s64)row.rbp_off8 * 8, &bp) != 0) {
				s->end = END_UNREADABLE;
				return 1;
			}
			s->bp_lost = 0; // the caller's rbp, saved by this frame
		}
	}
	if (!ra)
		return 1;
	s->pc = ra;
	s->sp = cfa;
	s->bp = bp;
	return 0;
}

// forked_from returns the entry of task's parent when task runs its
// parent's image as the fork left it: the same program file, at the same
// address, with libraries placed from the same base (an exec picks both
// afresh). A pre-fork server's workers, a shell's subshells and a
// multiprocessing pool's children get no entry of their own until user
// space reads them; without this their stacks were taken by frame pointer
// and cut at the first library without them, though the parent's tables
// were loaded. The parent's entry holds its tables while it lives; it is
// only read here.
static __always_inline struct proc_unwind *forked_from(struct task_struct *task)
{
	struct task_struct *parent = task->real_parent;
	struct mm_struct *mm = task->mm, *pmm;
	__u32 ppid;

	if (!parent || !mm)
		return 0;
	pmm = parent->mm;
	if (!pmm || pmm == mm || pmm->exe_file != mm->exe_file || pmm->start_code != mm->start_code ||
	    pmm->mmap_base != mm->mmap_base)
		return 0;
	ppid = parent->tgid;
	return bpf_map_lookup_elem(&proc_unwinds, &ppid);
}

// dwarf_stack unwinds the current task's user stack into the per-CPU
// scratch stack with the process's unwind tables, or, when it has none,
// with the tables of what the walk finds in its memory map (FOUND_ONLY_KEY).
// Returns the number of frames, 0 when there is no user stack, -1 when it
// did not walk (the caller takes the stack by frame pointer). A global
// function: the verifier checks it once, not once per call site (the
// map-set branches), which halves the load time of the program.
__attribute__((noinline)) int dwarf_stack(__u32 pid)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct user_unwind s = {};
	struct mapped_files *mf;
	struct pt_regs *regs;
	struct stack_trace *t;
	__u32 zero = 0, maps;

	t = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!t || !task || (task->flags & PF_KTHREAD))
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	s.t = t;
	s.jvm = bpf_map_lookup_elem(&jvm_unwinds, &pid);
	s.v8 = bpf_map_lookup_elem(&v8_procs, &pid);
	s.pu = bpf_map_lookup_elem(&proc_unwinds, &pid);
	if (!s.pu) {
		__u32 key = FOUND_ONLY_KEY | (bpf_get_smp_processor_id() * found_only_slots + pid % found_only_slots);
		__u64 *exec_at = bpf_map_lookup_elem(&exec_times, &pid);
		struct proc_unwind *parent = 0;
		__u64 image_at;

		if (exec_at) {
			// A JVM's compiled frames need the walk, tables or not.
			if (bpf_ktime_get_ns() - *exec_at > FOUND_ONLY_NS && !s.jvm && !s.v8)
				return -1;
			image_at = *exec_at;
		} else {
			// Not exec'd since the sampler started: a child forked
			// without an exec is walked with its parent's mappings.
			parent = forked_from(task);
			if (!parent && !s.jvm && !s.v8)
				return -1;
			image_at = task->start_time; // tells it from a later pid's
		}
		s.pu = bpf_map_lookup_elem(&proc_unwinds, &key);
		if (!s.pu) {
			// The first in this slot. Any proc_unwind will do as the
			// value: n and found_n are reset below (found_pid 0 is
			// no sampled process's), and they bound what is read.
			struct proc_unwind *any = bpf_map_lookup_elem(&proc_unwind_scratch, &zero);

			if (!any)
				return -1;
			bpf_map_update_elem(&proc_unwinds, &key, any, BPF_NOEXIST);
			s.pu = bpf_map_lookup_elem(&proc_unwinds, &key);
			if (!s.pu)
				return -1; // the map is full: frame pointers
		}
		// Found mappings are kept while the entry's samples are the
		// same process's (the same program image: its exec time): a
		// walk gets one bpf_find_vma (find_vma_row), so a stack through
		// two libraries not found yet, and not in the list of files the
		// process mapped, is whole from the second sample on. Another
		// process's sample starts the entry afresh. Samples on
		// one CPU do not nest (perf_event programs do not), so nothing
		// else writes this entry meanwhile.
		s.pu->n = 0;
		if (s.pu->found_pid != pid || s.pu->found_exec_ns != image_at) {
			s.pu->found_n = 0;
			s.pu->found_pid = pid;
			s.pu->found_exec_ns = image_at;
		}
		if (parent) {
			__u32 n = parent->n;

			// All of it (2 KB) in one helper call: a loop over n is
			// verified once per mapping (3,000 instructions more).
			if (bpf_probe_read_kernel(s.pu->m, sizeof(s.pu->m), parent->m) != 0)
				n = 0;
			s.pu->n = n < MAX_UNWIND_MAPPINGS ? n : MAX_UNWIND_MAPPINGS;
		}
	}
	// Found mappings are dropped when the process has mapped an
	// executable file since they were found: a library unloaded and
	// another loaded at its address would otherwise be walked with the
	// old one's table (or none) until the entry is rewritten.
	mf = bpf_map_lookup_elem(&mapped_files, &pid);
	maps = mf && mf->mm == (__u64)task->mm ? mf->maps : 0;
	if (s.pu->found_maps != maps) {
		s.pu->found_n = 0;
		s.pu->found_maps = maps;
	}
	s.pc = regs->ip;
	s.sp = regs->sp;
	s.bp = regs->bp;
	s.rbx = bpf_map_lookup_elem(&rbx_scratch, &zero);
	if (!s.rbx)
		return -1;
	s.rbx->bx = regs->bx;
	s.rbx->at = 0;
	s.r13 = regs->r13;
	if (!s.pc)
		return 0;
	bpf_loop(MAX_STACK_DEPTH + 1, unwind_step, &s, 0);
	t->len = s.n;
	// Looked up again rather than remembered: a flag set before the walk
	// makes the verifier check the walk's callback once for each value.
	t->flags = (bpf_map_lookup_elem(&proc_unwinds, &pid) ? STACK_DWARF : 0) | (s.leaf_cfi ? STACK_LEAF_CFI : 0);
	t->end = s.end;
	return s.n;
}

#include "python_walk.h"

// take_stack stores the current user (BPF_F_USER_STACK) or kernel stack in
// stacks and returns its hash, or 0 (counted) when there is none or no room.
// A user stack of a process with unwind tables is unwound with them.
static __always_inline __u64 take_stack(void *ctx, void *stacks, __u64 flags, __u64 *lost, __u64 *missing, __u64 *dwarf)
{
	__u32 zero = 0;
	struct stack_trace *t = bpf_map_lookup_elem(&stack_scratch, &zero);
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	long n, err;
	__u64 h;

	if (!t)
		return 0;
	t->flags = 0;
	t->end = END_OK;
	t->_pad = 0;
	if ((flags & BPF_F_USER_STACK) && dwarf_unwind && (n = dwarf_stack(pid)) >= 0) {
		n *= sizeof(__u64);
		if (n > 0 && (t->flags & STACK_DWARF))
			__sync_fetch_and_add(dwarf, 1);
	} else {
		n = bpf_get_stack(ctx, t->ips, sizeof(t->ips), flags);
		if (n == sizeof(t->ips))
			t->end = END_TRUNCATED;
	}
	if (n <= 0) {
		__sync_fetch_and_add(missing, 1);
		return 0;
	}
	t->len = n / sizeof(__u64);
	if ((flags & BPF_F_USER_STACK) && python_walk)
		t->len = python_stack(pid, t->len);
	t->leaf_ret = 0;
	// Leaf-caller recovery needs the word at SP, unless the unwinder
	// already found frame 0's caller from its table row (keeping it would
	// only split identical stacks).
	if ((flags & BPF_F_USER_STACK) && !(t->flags & STACK_LEAF_CFI))
		t->leaf_ret = user_sp_word();
	h = stack_hash(t);
	if (bpf_map_lookup_elem(stacks, &h))
		return h;
	// Frames past len hold an older stack of this CPU; readers stop at len.
	err = bpf_map_update_elem(stacks, &h, t, BPF_NOEXIST);
	if (err == 0 || err == -EEXIST)
		return h;
	__sync_fetch_and_add(lost, 1);
	return 0;
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
	struct task_struct *task;
	struct lifecycle_event *ev;
	__u32 zero = 0, *busy;
	__u64 exec_vm, *known_vm;

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

	// Map helpers need a map pointer known at verification time, so each
	// set gets its own branch instead of a pointer chosen at run time.
	if (set == 0) {
		key.user_stack = take_stack(ctx, &stacks_0, BPF_F_USER_STACK, &st->user_stack_lost, &st->user_stack_missing, &st->dwarf);
		key.kernel_stack = take_stack(ctx, &stacks_0, 0, &st->kernel_stack_lost, &st->kernel_stack_missing, &st->dwarf);
	} else {
		key.user_stack = take_stack(ctx, &stacks_1, BPF_F_USER_STACK, &st->user_stack_lost, &st->user_stack_missing, &st->dwarf);
		key.kernel_stack = take_stack(ctx, &stacks_1, 0, &st->kernel_stack_lost, &st->kernel_stack_missing, &st->dwarf);
	}

	if (set == 0)
		count_sample(st, &counts_0, &key);
	else
		count_sample(st, &counts_1, &key);

	// The sample interrupted proc_exec (in_exec): the task's next sample
	// announces it.
	busy = bpf_map_lookup_elem(&in_exec, &zero);
	if (busy && *busy)
		return 0;

	// A process past its exit event (tearing down its memory and files)
	// is still sampled, and counted above, but not remembered: its exit
	// removed it from seen_pids, and would not remove it again. It is
	// announced while it is not there. User space keeps what it read of a
	// process it knows (same start time) rather than read a zombie; one
	// never announced (sampled only on its way out, like a short-lived
	// compiler freeing its heap) is then named by the event's comm rather
	// than as an unknown service. A thread that is not exiting can be
	// remembered safely: the exit is its process's last thread's (see
	// proc_exit), and an exec waits until every other thread is gone, so
	// neither removes the pid while this thread runs.
	task = bpf_get_current_task_btf();
	if (task->flags & PF_EXITING) {
		if (!bpf_map_lookup_elem(&seen_pids, &pid))
			emit(st, EVENT_SEEN, task);
		return 0;
	}
	// Look up first: an LRU update takes a free node (maybe evicting) even
	// when the key exists.
	exec_vm = task->mm->exec_vm;
	known_vm = bpf_map_lookup_elem(&seen_pids, &pid);
	if (!known_vm) {
		// The record is taken before the pid is remembered: with no room
		// for it the process is not remembered either, and a later sample
		// announces it.
		ev = reserve_event(st);
		if (!ev)
			return 0;
		// BPF_NOEXIST: only the CPU that inserts the pid announces it.
		// A discarded record may wake the reader (flags 0): one waiting
		// at it and not woken would not be woken by the records after it
		// either.
		if (bpf_map_update_elem(&seen_pids, &pid, &exec_vm, BPF_NOEXIST) != 0) {
			bpf_ringbuf_discard(ev, 0);
			return 0;
		}
		submit_event(ev, EVENT_SEEN, task, 0);
	} else if (*known_vm != exec_vm &&
		   __sync_lock_test_and_set(known_vm, exec_vm) != exec_vm) {
		// Only the CPU that stores the new size reports it.
		emit(st, EVENT_MAPS_CHANGED, task);
	}
	return 0;
}

SEC("perf_event")
int capture_sample(struct bpf_perf_event_data *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 pid = pid_tgid >> 32;
	__u32 zero = 0;
	struct sample_key key;
	struct sample_stats *st;

	if (!bpf_map_lookup_elem(&capture_pids, &pid))
		return 0;
	st = bpf_map_lookup_elem(&capture_stats, &zero);
	if (!st)
		return 0;
	__sync_fetch_and_add(&st->samples, 1);
	__builtin_memset(&key, 0, sizeof(key));
	key.pid = pid;
	key.tid = (__u32)pid_tgid;
	if (trace_lookup)
		lookup_trace(st, &key, pid_tgid);
	key.user_stack = take_stack(ctx, &capture_stacks, BPF_F_USER_STACK, &st->user_stack_lost, &st->user_stack_missing, &st->dwarf);
	key.kernel_stack = take_stack(ctx, &capture_stacks, 0, &st->kernel_stack_lost, &st->kernel_stack_missing, &st->dwarf);
	count_sample(st, &capture_counts, &key);
	return 0;
}

// exe_unwind_at_exec gives a process that has just exec'd a known binary the
// table of that binary's code: the mapping is [start_code, end_code), which
// the ELF loader sets from the executable segments.
static __always_inline void exe_unwind_at_exec(struct task_struct *p, __u32 pid)
{
	struct mm_struct *mm = p->mm;
	struct exe_key key = {};
	struct exe_unwind *eu;
	struct proc_unwind *pu;
	struct file *exe;
	__u32 zero = 0;

	if (!mm)
		return;
	exe = mm->exe_file;
	if (!exe)
		return;
	file_key(exe->f_inode, &key);
	eu = bpf_map_lookup_elem(&exe_unwinds, &key);
	if (!eu)
		return;
	pu = bpf_map_lookup_elem(&proc_unwind_scratch, &zero);
	if (!pu)
		return;
	pu->n = 1;
	pu->m[0].start = mm->start_code;
	pu->m[0].end = mm->end_code;
	pu->m[0].bias = mm->start_code - eu->text_vaddr;
	pu->m[0].table = eu->table;
	pu->m[0].rows = eu->rows;
	bpf_map_update_elem(&proc_unwinds, &pid, pu, BPF_ANY);
}

// proc_exec_locked is proc_exec with samples on this CPU kept from
// announcing the task (in_exec).
static __always_inline void proc_exec_locked(struct task_struct *p)
{
	__u32 pid = p->tgid;
	struct sample_stats *st;

	if (dwarf_unwind) {
		__u64 now = bpf_ktime_get_ns();

		bpf_map_update_elem(&exec_times, &pid, &now, BPF_ANY);
		// The old image's tables describe mappings that are gone.
		bpf_map_delete_elem(&proc_unwinds, &pid);
		bpf_map_delete_elem(&jvm_unwinds, &pid);
		bpf_map_delete_elem(&v8_procs, &pid);
		exe_unwind_at_exec(p, pid);
	}
	// Only a process user space knows needs telling: it drops what it read
	// of the old image, and the next sample announces the new one.
	if (bpf_map_delete_elem(&seen_pids, &pid) != 0)
		return;
	st = stats_for(active_set & 1);
	if (!st)
		return;
	emit(st, EVENT_EXEC, p);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p)
{
	__u32 zero = 0;
	__u32 *busy = bpf_map_lookup_elem(&in_exec, &zero);

	if (!busy)
		return 0;
	*busy = 1;
	proc_exec_locked(p);
	*busy = 0;
	return 0;
}

// Only the first argument is used: kernels before 6.16 have no group_dead.
// The process has exited when its last thread does, which is the thread
// that finds no live thread left (do_exit counts it out of signal->live
// before this tracepoint, on every kernel): not necessarily its leader. A
// leader that ends alone (pthread_exit in main) leaves a process that runs
// on, and a thread that execs has the kernel end the leader first and then
// takes its pid: neither is the process's exit. (Two threads ending at once
// may both find none left; only the one that removes the pid reports it.)
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
	if (p->signal->live.counter != 0)
		return 0; // other threads of the process live on
	if (dwarf_unwind) {
		bpf_map_delete_elem(&proc_unwinds, &pid);
		bpf_map_delete_elem(&jvm_unwinds, &pid);
		bpf_map_delete_elem(&v8_procs, &pid);
		bpf_map_delete_elem(&exec_times, &pid);
	}
	if (bpf_map_delete_elem(&seen_pids, &pid) != 0) {
		// Never sampled: user space has nothing to forget.
		if (dwarf_unwind)
			bpf_map_delete_elem(&mapped_files, &pid);
		return 0;
	}
	// A sampled process's list of mapped files stays for user space, which
	// takes it at this exit event: the files of a process gone before it
	// could be read (a shell's short command) name its samples. Lost with
	// the event, it is an LRU entry that no walk matches (other address
	// space) and an exec in the pid starts afresh.
	st = stats_for(active_set & 1);
	if (!st)
		return 0;
	emit(st, EVENT_EXIT, p);
	return 0;
}

// keep_mapped adds f to mf, in the slot of an entry whose range it
// overlaps if there is one: the list is not told of munmap, and a library
// mapped where another was, or a mapping merged with its neighbour, takes
// the old entry's place. The address space's write lock is held: one store
// at a time per process. A walk on another CPU may read the slot while it
// is written, and skips it until its check holds.
static __always_inline void keep_mapped(struct mapped_files *mf, struct mapped_file *f)
{
	__u32 n = mf->n, slot = n;

	for (int k = 0; k < MAX_MAPPED_FILES; k++) {
		if (k >= n)
			break;
		if (mf->f[k].start < f->end && f->start < mf->f[k].end) {
			slot = k;
			break;
		}
	}
	if (slot == n)
		mf->n = n + 1;
	mf->maps++;
	if (slot >= MAX_MAPPED_FILES)
		return;
	mf->f[slot].check = 0;
	mf->f[slot].start = f->start;
	mf->f[slot].end = f->end;
	mf->f[slot].pgoff = f->pgoff;
	mf->f[slot].key = f->key;
	mf->f[slot].check = mapped_check(f);
}

// proc_vma_store keeps each executable file mapping stored in the current
// process's memory map in its mapped_files: the program and ld.so at exec,
// each library as ld.so maps its code (at start or at a dlopen). The maple
// tree's write tracepoint, not mmap's: it sees the kernel's own mappings at
// exec, needs no tracefs (a raw tracepoint), and costs nothing on system
// calls. Writes to other trees, or to another process's (fork copies the
// parent's into the child's), and the removal of an entry are skipped. A
// mapping made executable later in place (mprotect of a whole mapping) is
// not stored again: the walk looks it up in the memory map.
// Linux 6.2+. Only proc_vma_store uses it: where the kernel lacks it, that
// program alone fails to load.
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

SEC("tp_btf/ma_write")
int BPF_PROG(proc_vma_store, const char *fn, struct ma_state *mas, unsigned long piv, void *entry)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct vm_area_struct *vma; // a memory map's entries are its VMAs
	struct mapped_file f = {};
	struct mapped_files *mf;
	struct mm_struct *mm;
	struct file *file;

	if (!dwarf_unwind || !entry || !task)
		return 0;
	mm = task->mm;
	if (!mm || (__u64)mas->tree != (__u64)&mm->mm_mt)
		return 0;
	// The entry is untyped: a typed view whose loads may fault (and then
	// read 0), as the kernel's own BTF pointers are read.
	vma = bpf_rdonly_cast(entry, bpf_core_type_id_kernel(struct vm_area_struct));
	if (!(vma->vm_flags & VM_EXEC))
		return 0;
	file = vma->vm_file;
	if (!file)
		return 0;
	f.start = vma->vm_start;
	f.end = vma->vm_end;
	f.pgoff = vma->vm_pgoff;
	mapped_file_key(file, &f.key);
	mf = bpf_map_lookup_elem(&mapped_files, &pid);
	if (!mf || mf->mm != (__u64)mm) {
		bpf_map_update_elem(&mapped_files, &pid, &no_mapped_files, BPF_ANY);
		mf = bpf_map_lookup_elem(&mapped_files, &pid);
		if (!mf)
			return 0;
		mf->mm = (__u64)mm;
	}
	keep_mapped(mf, &f);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
