//go:build linux

// Package tracectx makes the CPU sampler see which trace a thread or
// goroutine is working for. It owns the trace context maps (the pinned
// traces_ctx_v1 shared with OpenTelemetry eBPF Instrumentation, and the
// agent's go_traces keyed by goroutine) and the uprobes on the hotpath SDK's
// marker functions, attached to every binary that contains them.
package tracectx

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel -type trace_ctx -type go_trace_key traceCtx ../../../../bpf/tracectx.bpf.c -- -I../../../../bpf

// Marker symbols of the SDKs (sdk/go/tracectx, sdk/c/hotpath_tracectx.h).
// Renaming one breaks agents already deployed: treat them as an ABI. The Go
// markers are assembly (ABI0): .symtab names them with an ".abi0" suffix,
// .gopclntab without.
const (
	GoSetSymbol   = "github.com/hotpath-dev/hotpath/sdk/go/tracectx.hotpathTraceSet.abi0"
	GoClearSymbol = "github.com/hotpath-dev/hotpath/sdk/go/tracectx.hotpathTraceClear.abi0"
	CSetSymbol    = "hotpath_tracectx_set"
	CClearSymbol  = "hotpath_tracectx_clear"
)
