// Package queryserver serves read-only SQL over HTTP while the exporter
// holds the DuckDB file (DuckDB lets one process open it, so people cannot
// open it beside the collector).
package queryserver

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/internal/localendpoint"
	"github.com/hotpath-dev/hotpath/internal/sqlquery"
)

// Config is what the endpoint needs from the exporter's configuration.
type Config struct {
	Limits sqlquery.Limits
	// MaxConcurrent queries run at once; more are refused with 429 rather
	// than queued, so waiting queries cannot pile up either.
	MaxConcurrent int
	// MemoryLimit is DuckDB's memory_limit in this process, quoted when a
	// query runs out of it.
	MemoryLimit string
}

// retryAfter is what a refused client is told to wait, in seconds: about
// one ordinary query.
const retryAfter = "1"

// Server is a running endpoint.
type Server struct {
	*localendpoint.Server
	sem chan struct{}
}

// Start serves queries against db() (a function: the writer may reopen the
// file after a failure; nil while it does) on the endpoint that endpoint configures (the
// collector's HTTP server: TLS, auth extension, limits); host supplies its
// authenticator extension, if any.
func Start(ctx context.Context, endpoint *localendpoint.ServerConfig, host component.Host, set component.TelemetrySettings, cfg Config, db func() *sql.DB) (*Server, error) {
	logger := set.Logger
	s := &Server{sem: make(chan struct{}, max(cfg.MaxConcurrent, 1))}
	mux := http.NewServeMux()
	mux.Handle(sqlquery.Path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			localendpoint.WriteError(w, http.StatusMethodNotAllowed, errors.New("use POST with {\"sql\": \"...\"}"))
			return
		}
		var req sqlquery.Request
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
			localendpoint.WriteError(w, http.StatusBadRequest, fmt.Errorf("decode request: %w", err))
			return
		}
		select {
		case s.sem <- struct{}{}:
			defer func() { <-s.sem }()
		default:
			w.Header().Set("Retry-After", retryAfter)
			localendpoint.WriteError(w, http.StatusTooManyRequests, fmt.Errorf(
				"%d queries are already running (query.max_concurrent); retry in %s s", cap(s.sem), retryAfter))
			return
		}
		conn := db()
		if conn == nil {
			// The writer is opening the file again after a failure
			// (a few seconds at most once the running queries end).
			w.Header().Set("Retry-After", retryAfter)
			localendpoint.WriteError(w, http.StatusServiceUnavailable, errors.New(
				"the database file is being opened again after a failed write; retry in "+retryAfter+" s"))
			return
		}
		body, err := sqlquery.RunBody(r.Context(), conn, req.SQL, cfg.Limits)
		if err != nil {
			status := http.StatusBadRequest
			switch {
			case errors.Is(err, context.DeadlineExceeded):
				status = http.StatusGatewayTimeout
			case sqlquery.IsOutOfMemory(err):
				// The server's bound, not a bad request: ingestion goes on,
				// and a narrower query (or a quieter moment) may pass.
				status = http.StatusServiceUnavailable
				err = fmt.Errorf("the query needs more memory than this collector gives DuckDB (duckdb.memory_limit %s, shared with ingestion); "+
					"narrow it (shorter time range, fewer columns, LIMIT, aggregate before listing): %w", cfg.MemoryLimit, err)
				logger.Warn("query refused: out of DuckDB memory", zap.String("memory_limit", cfg.MemoryLimit), zap.Error(err))
			}
			localendpoint.WriteError(w, status, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if _, err := body.WriteTo(w); err != nil {
			logger.Debug("write query result", zap.Error(err))
		}
	}))
	srv, err := endpoint.Serve(ctx, host, set, mux)
	if err != nil {
		return nil, err
	}
	s.Server = srv
	return s, nil
}

// Running is the number of queries running now.
func (s *Server) Running() int { return len(s.sem) }
