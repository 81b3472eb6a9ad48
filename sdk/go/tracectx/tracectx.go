// Package tracectx tells the hotpath agent which trace the current goroutine
// is working for, so CPU samples taken meanwhile carry that trace's ID and
// can be shown as a per-request flame graph.
//
// The application needs no privileges and no connection to the agent: Do
// calls two tiny marker functions that do nothing by themselves; the agent
// finds them in the binary and attaches uprobes that copy the IDs into a BPF
// map keyed by goroutine. Without an agent a Do costs a few nanoseconds.
//
// Wrap the work of a span:
//
//	tracectx.Do(ctx, func(ctx context.Context) { handle(ctx) })
//
// or, for HTTP servers, put Middleware inside otelhttp (which starts the
// span it reads):
//
//	http.Handle("/", otelhttp.NewHandler(tracectx.Middleware(mux), "server"))
//
// Only the goroutine that calls Do is tagged: goroutines it starts are not,
// unless they call Do themselves.
//
// PublishResource tells the agent (and any reader of OpenTelemetry's
// process context, OTEP 4719) the service the application is, with its
// version and environment, as its own telemetry names them:
//
//	res, _ := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(semconv.ServiceVersion(version)))
//	tracectx.PublishResource(res.Attributes()...)
package tracectx

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/trace"
)

// wireContext is what the markers pass to the agent; it mirrors struct
// trace_ctx in bpf/trace_ctx.h (24 bytes, no padding).
type wireContext struct {
	TraceID [16]byte
	SpanID  [8]byte
}

// hotpathTraceSet(c *wireContext) and hotpathTraceClear() are the markers
// the agent attaches uprobes to; their names are part of the agent's ABI.
// On amd64 they are assembly (markers_amd64.s): ABI0, so the argument is on
// the stack at a fixed place whatever Go's register ABI does, and the first
// instruction is a 5-byte NOP, which Linux ≥ 6.18 turns into a call to a
// uprobe trampoline instead of a breakpoint trap (several times cheaper).
// They take a pointer: the uprobe reads the 24 bytes it points to.

// activation is what Do records in the context it passes on: which span it
// marked and on which goroutine, so a nested Do can restore it.
type activation struct {
	sc trace.SpanContext
	g  uintptr
}

type activationKey struct{}

// Set marks sc as the current goroutine's trace context until Clear. Prefer
// Do, which pairs them and handles nesting; with Set, always defer Clear on
// the same goroutine (a goroutine that ends without Clear leaves its entry
// until the agent's LRU map evicts it or the process exits).
func Set(sc trace.SpanContext) {
	if !sc.IsValid() {
		return
	}
	c := wireContext{TraceID: sc.TraceID(), SpanID: sc.SpanID()}
	hotpathTraceSet(&c)
}

// Clear removes the current goroutine's trace context.
func Clear() {
	hotpathTraceClear()
}

// Do runs fn with ctx's span marked as the current goroutine's trace context
// and removes the mark when fn returns (or panics). Inside a Do of an outer
// span on the same goroutine, the outer span is marked again afterwards. A
// ctx without a valid span runs fn unchanged.
func Do(ctx context.Context, fn func(context.Context)) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		fn(ctx)
		return
	}
	g := currentG()
	outer, _ := ctx.Value(activationKey{}).(*activation)
	Set(sc)
	defer func() {
		// Restore only on the goroutine that set the outer mark: restoring
		// on another one would leave an entry behind when it ends.
		if outer != nil && g != 0 && outer.g == g {
			Set(outer.sc)
		} else {
			Clear()
		}
	}()
	fn(context.WithValue(ctx, activationKey{}, &activation{sc: sc, g: g}))
}

// Active returns the span Do marked for ctx, if any.
func Active(ctx context.Context) (trace.SpanContext, bool) {
	a, ok := ctx.Value(activationKey{}).(*activation)
	if !ok {
		return trace.SpanContext{}, false
	}
	return a.sc, true
}

// Middleware marks each request's span for the duration of next. It reads
// the span from the request's context, so it must run inside the handler
// that starts the span (otelhttp.NewHandler(Middleware(h), name)).
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trace.SpanContextFromContext(r.Context()).IsValid() {
			next.ServeHTTP(w, r)
			return
		}
		Do(r.Context(), func(ctx context.Context) {
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	})
}
