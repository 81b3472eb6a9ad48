// Command tracesvc is a test HTTP service instrumented with the OpenTelemetry
// SDK (otelhttp) and hotpath's tracectx middleware. /slow?n=N burns CPU in
// main.slowWork for N million loop iterations, /fast?n=N in main.fastWork, so
// a profile tagged with a request's trace ID must show that request's
// function. Work is counted in iterations, not wall time, so the samples a
// request gets do not depend on how loaded the machine is.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hotpath-dev/hotpath/sdk/go/tracectx"
)

var sink uint64

// slowWork and fastWork loop without calls, so they are the leaf of their
// samples (frame-pointer unwinding keeps the leaf's own name).
//
//go:noinline
func slowWork(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink += i * i
	}
}

//go:noinline
func fastWork(n uint64) {
	for i := uint64(0); i < n; i++ {
		sink ^= i * 7
	}
}

func iterations(r *http.Request) uint64 {
	n, _ := strconv.ParseUint(r.URL.Query().Get("n"), 10, 64)
	return n * 1_000_000
}

func main() {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { slowWork(iterations(r)); fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/fast", func(w http.ResponseWriter, r *http.Request) { fastWork(iterations(r)); fmt.Fprintln(w, "ok") })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %s gomaxprocs %d\n", ln.Addr(), runtime.GOMAXPROCS(0))
	srv := &http.Server{Handler: otelhttp.NewHandler(tracectx.Middleware(mux), "tracesvc")}
	// Serve while standard input is open: the test holds a pipe, so the
	// server goes when the test does (even killed), however long a loaded
	// machine makes the requests take.
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); os.Exit(0) }()
	_ = srv.Serve(ln)
}
