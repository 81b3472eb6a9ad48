package tracectx

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The markers only do something under the agent (see the receiver's
// internal/tracectx tests, which check the BPF maps). These tests check the
// SDK's own logic: which span is marked, nesting, and the otelhttp wiring.

func newTracer(t *testing.T) trace.Tracer {
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("tracectx-test")
}

func TestDoMarksSpanAndNests(t *testing.T) {
	tr := newTracer(t)
	ctx, outer := tr.Start(context.Background(), "outer")
	defer outer.End()
	ran := false
	Do(ctx, func(ctx context.Context) {
		got, ok := Active(ctx)
		if !ok || got.SpanID() != outer.SpanContext().SpanID() {
			t.Errorf("Active = %v %v, want outer span %v", got.SpanID(), ok, outer.SpanContext().SpanID())
		}
		inner, span := tr.Start(ctx, "inner")
		defer span.End()
		Do(inner, func(ctx context.Context) {
			ran = true
			got, _ := Active(ctx)
			if got.SpanID() != span.SpanContext().SpanID() || got.TraceID() != outer.SpanContext().TraceID() {
				t.Errorf("nested Active = %v, want inner span %v of the same trace", got, span.SpanContext())
			}
		})
	})
	if !ran {
		t.Fatal("nested fn did not run")
	}
	if currentG() == 0 {
		t.Error("currentG returned 0 on amd64: nested Do could not restore the outer span")
	}
}

func TestDoWithoutSpanRunsUnmarked(t *testing.T) {
	ran := false
	Do(context.Background(), func(ctx context.Context) {
		ran = true
		if _, ok := Active(ctx); ok {
			t.Error("a context without a span was marked")
		}
	})
	if !ran {
		t.Fatal("fn did not run")
	}
}

// Inside otelhttp.NewHandler the middleware sees the server span, a child
// of the caller's traceparent.
func TestMiddlewareInsideOtelhttp(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	var got trace.SpanContext
	h := otelhttp.NewHandler(Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = Active(r.Context())
	})), "test", otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagation.TraceContext{}))
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("marked trace %v, want the caller's 0af7651916cd43dd8448eb211c80319c", got.TraceID())
	}
	if got.SpanID().String() == "b7ad6b7169203331" || !got.SpanID().IsValid() {
		t.Errorf("marked span %v, want otelhttp's server span (not the caller's)", got.SpanID())
	}
}

// Outside any span the middleware passes the request through unmarked.
func TestMiddlewareWithoutSpan(t *testing.T) {
	marked := true
	Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, marked = Active(r.Context())
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if marked {
		t.Error("request without a span was marked")
	}
}

func BenchmarkDoUnattached(b *testing.B) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("bench").Start(context.Background(), "bench")
	defer span.End()
	fn := func(context.Context) {}
	b.ReportAllocs()
	for b.Loop() {
		Do(ctx, fn)
	}
}

func BenchmarkSetClearUnattached(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}})
	for b.Loop() {
		Set(sc)
		Clear()
	}
}
