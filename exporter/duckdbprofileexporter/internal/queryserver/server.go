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
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/hotpath-dev/hotpath/exporter/duckdbprofileexporter/sqlquery"
	"github.com/hotpath-dev/hotpath/internal/localendpoint"
)

// maxConcurrent keeps ad-hoc queries from starving ingestion on small hosts.
const maxConcurrent = 2

// Server is a running endpoint.
type Server struct {
	srv *http.Server
	ln  net.Listener
	sem chan struct{}
}

// Start listens on endpoint and serves queries against db() (a function: the
// writer may reopen the file after a fatal error).
func Start(endpoint, token string, db func() *sql.DB, lim sqlquery.Limits, logger *zap.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", endpoint)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	s := &Server{ln: ln, sem: make(chan struct{}, maxConcurrent)}
	mux := http.NewServeMux()
	mux.Handle(sqlquery.Path, localendpoint.RequireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		case <-r.Context().Done():
			return
		}
		res, err := sqlquery.Run(r.Context(), db(), req.SQL, lim)
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			localendpoint.WriteError(w, status, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(res); err != nil {
			logger.Debug("write query result", zap.Error(err))
		}
	})))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("query endpoint stopped", zap.Error(err))
		}
	}()
	return s, nil
}

// Addr is the address actually listened on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting queries and waits for running ones.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }
