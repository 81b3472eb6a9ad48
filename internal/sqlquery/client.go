package sqlquery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// Path is where the endpoint serves queries.
const Path = "/v1/sql"

// Where the shipped configs (distributions/*/config.yaml) serve SQL: the
// agent's local tier and the gateway's summary tier.
const (
	DefaultAgentEndpoint   = "127.0.0.1:7072"
	DefaultGatewayEndpoint = "127.0.0.1:7073"
)

// Request is the endpoint's JSON body.
type Request struct {
	SQL string `json:"sql"`
}

// ErrorBody is the endpoint's JSON answer on failure.
type ErrorBody struct {
	Error string `json:"error"`
}

// Client queries a running exporter's endpoint.
type Client struct {
	Endpoint string // host:port
	Token    string
	HTTP     *http.Client
}

// ErrUnreachable wraps failures to connect (no collector is serving).
var ErrUnreachable = errors.New("query endpoint unreachable")

// Query sends stmt and decodes the result. Numbers keep their exact text.
func (c Client) Query(ctx context.Context, stmt string) (*Result, error) {
	body, _ := json.Marshal(Request{SQL: stmt})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Endpoint+Path, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.Endpoint, err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, eb.Error)
		}
		return nil, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	var res Result
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	return &res, nil
}

// servedFileSQL asks an endpoint which file it serves.
const servedFileSQL = "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"

// probeHTTP asks endpoints one question each: no connection is kept for
// later (the endpoint found is asked again through the caller's client).
var probeHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// ServedBy is the first of endpoints whose collector serves the file at
// path (the same file, by os.SameFile), "" when none does or none answers.
// DuckDB lets one process open a file, so a file a collector holds is read
// through that collector's endpoint, which says which file it serves.
func ServedBy(ctx context.Context, path, token string, endpoints ...string) string {
	want, err := os.Stat(path)
	if err != nil {
		return ""
	}
	asked := map[string]bool{"": true}
	for _, ep := range endpoints {
		// Only a collector on this machine can hold the file: a remote
		// one may serve a file of the same path there.
		if asked[ep] || !onThisMachine(ep) {
			continue
		}
		asked[ep] = true
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := Client{Endpoint: ep, Token: token, HTTP: probeHTTP}.Query(qctx, servedFileSQL)
		cancel()
		if err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
			continue
		}
		served, ok := res.Rows[0][0].(string)
		if !ok {
			continue
		}
		if st, err := os.Stat(served); err == nil && os.SameFile(want, st) {
			return ep
		}
	}
	return ""
}

// IsHeld reports whether err is DuckDB refusing to open a file another
// process holds (its lock).
func IsHeld(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Could not set lock on file")
}

// onThisMachine reports whether endpoint's host is a loopback name or
// address, or an address of this machine's interfaces.
func onThisMachine(endpoint string) bool {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return false
	}
	if host == "" || host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}
