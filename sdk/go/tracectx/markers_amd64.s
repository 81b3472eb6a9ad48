#include "textflag.h"

// The agent's uprobes fire on the first instruction of each marker: a
// 5-byte NOP (nopl 0x0(%rax,%rax,1)), which kernels with uprobe
// optimization (x86-64, Linux 6.18+) patch into a call to a trampoline
// after the first hit. NOSPLIT with a zero frame keeps the NOP first.

// func hotpathTraceSet(c *wireContext)
TEXT ·hotpathTraceSet(SB), NOSPLIT, $0-8
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET

// func hotpathTraceClear()
TEXT ·hotpathTraceClear(SB), NOSPLIT, $0-0
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET
