/*
 * hotpath_tracectx.h: tell the hotpath agent which trace the current thread
 * is working for, so CPU samples taken meanwhile carry that trace's ID.
 * Header-only, no dependencies, no privileges needed.
 *
 *     struct hotpath_trace_ctx c;
 *     if (hotpath_tracectx_parse_traceparent(&c, header) == 0)
 *         hotpath_tracectx_set(&c);
 *     handle_request();
 *     hotpath_tracectx_clear();
 *
 * hotpath_tracectx_set and hotpath_tracectx_clear are marker functions: they
 * do nothing by themselves. The agent finds them in the binary (or shared
 * library) and attaches uprobes that copy the IDs into the BPF map
 * traces_ctx_v1, keyed by thread. Keep the symbols: do not strip .symtab, or
 * export them (-rdynamic / a shared library's .dynsym).
 *
 * The context belongs to the calling thread: call set and clear on the thread
 * that does the work. A thread that exits without clearing loses its entry
 * when the agent sees it exit.
 *
 * Every translation unit may include this header: the markers are weak and
 * the linker keeps one copy, so the binary has exactly one symbol of each
 * name.
 */
#ifndef HOTPATH_TRACECTX_H
#define HOTPATH_TRACECTX_H

#ifdef __cplusplus
extern "C" {
#endif

/* Layout shared with the agent (struct trace_ctx): 24 bytes, no padding. */
struct hotpath_trace_ctx {
	unsigned char trace_id[16];
	unsigned char span_id[8];
};

#if defined(__x86_64__)
/*
 * On x86-64 the markers are assembly: each starts with a 5-byte NOP, which
 * Linux 6.18+ turns into a call to a uprobe trampoline after the first hit
 * instead of trapping on a breakpoint every time (for the Go SDK's
 * identical markers: ~1.2 us per set/clear pair instead of ~20 us). They
 * live in a COMDAT group
 * and are weak, so every translation unit may include this header and the
 * linker keeps one copy. They follow the System V ABI (ctx in RDI) and only
 * return.
 */
__asm__(".pushsection .text.hotpath_tracectx,\"axG\",@progbits,hotpath_tracectx,comdat\n"
	".weak hotpath_tracectx_set\n"
	".type hotpath_tracectx_set,@function\n"
	"hotpath_tracectx_set:\n"
	"\t.byte 0x0f,0x1f,0x44,0x00,0x00\n" /* nopl 0x0(%rax,%rax,1) */
	"\tret\n"
	".size hotpath_tracectx_set,.-hotpath_tracectx_set\n"
	".weak hotpath_tracectx_clear\n"
	".type hotpath_tracectx_clear,@function\n"
	"hotpath_tracectx_clear:\n"
	"\t.byte 0x0f,0x1f,0x44,0x00,0x00\n" /* nopl 0x0(%rax,%rax,1) */
	"\tret\n"
	".size hotpath_tracectx_clear,.-hotpath_tracectx_clear\n"
	".popsection\n");

void hotpath_tracectx_set(const struct hotpath_trace_ctx *ctx);
void hotpath_tracectx_clear(void);
#else
/*
 * Elsewhere (the agent instruments x86-64 only) plain functions: the empty
 * asm with the pointer as input and a memory clobber keeps the call and the
 * pointed-to bytes alive at every optimization level; noinline and weak
 * (interposable) keep the compiler from inlining or dropping it.
 */
__attribute__((weak, noinline, used)) void
hotpath_tracectx_set(const struct hotpath_trace_ctx *ctx)
{
	__asm__ __volatile__("" : : "r"(ctx) : "memory");
}

__attribute__((weak, noinline, used)) void hotpath_tracectx_clear(void)
{
	__asm__ __volatile__("" : : : "memory");
}
#endif

static inline int hotpath_tracectx_hexval_(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static inline int hotpath_tracectx_hex_(unsigned char *out, const char *s, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		int hi = hotpath_tracectx_hexval_(s[2 * i]);
		int lo = hi < 0 ? -1 : hotpath_tracectx_hexval_(s[2 * i + 1]);

		if (lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

/*
 * hotpath_tracectx_parse_traceparent fills ctx from a W3C traceparent value
 * ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"). Returns 0, or -1
 * when the value is malformed or the trace ID is all zeros (invalid).
 */
static inline int hotpath_tracectx_parse_traceparent(struct hotpath_trace_ctx *ctx, const char *tp)
{
	int i, nonzero = 0;

	if (!ctx || !tp)
		return -1;
	for (i = 0; i < 55; i++)
		if (tp[i] == '\0')
			return -1;
	if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-')
		return -1;
	if (hotpath_tracectx_hex_(ctx->trace_id, tp + 3, 16) ||
	    hotpath_tracectx_hex_(ctx->span_id, tp + 36, 8))
		return -1;
	for (i = 0; i < 16; i++)
		nonzero |= ctx->trace_id[i];
	return nonzero ? 0 : -1;
}

#ifdef __cplusplus
}
#endif

#endif /* HOTPATH_TRACECTX_H */
