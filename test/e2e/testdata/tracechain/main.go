// Command tracechain is a two-service test application for trace profiles:
// run with -role front it serves /checkout and /browse and calls the back
// service for each; with -role back it serves /verify and /noise. Both are
// instrumented with the OpenTelemetry SDK (otelhttp) and hotpath's tracectx
// middleware, and the front propagates W3C traceparent to the back, so one
// request is one trace in two processes.
//
// Work is counted in loop iterations (query parameters, in millions), not
// wall time, so the samples a request gets do not depend on machine load.
// Each path burns CPU in its own function, which a trace profile must show:
//
//	/checkout?front=N&back=M  main.frontRender, then back /verify: main.backVerify
//	/browse?n=N               main.frontNoise, then back /noise: main.backNoise
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/hotpath-dev/hotpath/sdk/go/tracectx"
)

// The burners loop without calls, so each is the leaf of its samples
// (frame-pointer unwinding keeps the leaf's own name); their results go into
// the response so the loops cannot be optimized away.

//go:noinline
func frontRender(n uint64) uint64 {
	var sink uint64
	for i := uint64(0); i < n; i++ {
		sink += i * i
	}
	return sink
}

//go:noinline
func frontNoise(n uint64) uint64 {
	var sink uint64
	for i := uint64(0); i < n; i++ {
		sink ^= i * 7
	}
	return sink
}

//go:noinline
func backVerify(n uint64) uint64 {
	var sink uint64
	for i := uint64(0); i < n; i++ {
		sink += i ^ 0x5bd1e995
	}
	return sink
}

//go:noinline
func backNoise(n uint64) uint64 {
	var sink uint64
	for i := uint64(0); i < n; i++ {
		sink ^= i * 13
	}
	return sink
}

func millions(r *http.Request, key string) uint64 {
	n, _ := strconv.ParseUint(r.URL.Query().Get(key), 10, 64)
	return n * 1_000_000
}

func main() {
	role := flag.String("role", "", "front or back")
	backend := flag.String("backend", "", "the back service's host:port (front)")
	flag.Parse()

	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	// The client span's context goes out as traceparent: same trace ID.
	client := &http.Client{Transport: otelhttp.NewTransport(http.DefaultTransport)}
	callBack := func(r *http.Request, path string) error {
		req, err := http.NewRequestWithContext(r.Context(), "GET", "http://"+*backend+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("back %s: %s", path, resp.Status)
		}
		return nil
	}
	reply := func(w http.ResponseWriter, v uint64, err error) {
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, "ok", v)
	}

	mux := http.NewServeMux()
	switch *role {
	case "front":
		mux.HandleFunc("/checkout", func(w http.ResponseWriter, r *http.Request) {
			v := frontRender(millions(r, "front"))
			reply(w, v, callBack(r, "/verify?n="+r.URL.Query().Get("back")))
		})
		mux.HandleFunc("/browse", func(w http.ResponseWriter, r *http.Request) {
			v := frontNoise(millions(r, "n"))
			reply(w, v, callBack(r, "/noise?n="+r.URL.Query().Get("n")))
		})
	case "back":
		mux.HandleFunc("/verify", func(w http.ResponseWriter, r *http.Request) { reply(w, backVerify(millions(r, "n")), nil) })
		mux.HandleFunc("/noise", func(w http.ResponseWriter, r *http.Request) { reply(w, backNoise(millions(r, "n")), nil) })
	default:
		fmt.Fprintln(os.Stderr, "tracechain: -role front|back")
		os.Exit(2)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening %s gomaxprocs %d\n", ln.Addr(), runtime.GOMAXPROCS(0))
	srv := &http.Server{Handler: otelhttp.NewHandler(tracectx.Middleware(mux), *role)}
	// Stop on its own after a while even if the test dies.
	go func() { time.Sleep(120 * time.Second); os.Exit(0) }()
	_ = srv.Serve(ln)
}
