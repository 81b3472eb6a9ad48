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
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v7"
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
	// RetryFor bounds how long Query sends a query again that the endpoint
	// refused for the moment: a 429 or 503 with Retry-After (every query
	// slot taken, or the file being opened again after a failed write).
	// 0 means DefaultRetryFor; a negative value sends it once.
	RetryFor time.Duration
}

// DefaultRetryFor is how long Query waits out refusals by default: a slot
// frees when a query ends (query.timeout bounds it), a reopen takes seconds.
const DefaultRetryFor = 30 * time.Second

// ErrUnreachable wraps failures to connect (no collector is serving).
var ErrUnreachable = errors.New("query endpoint unreachable")

// Query sends stmt and decodes the result. Numbers keep their exact text.
// A refusal that says when to try again (Retry-After) is waited out, the
// server's delay each time, for RetryFor in all; any other failure, or a
// refusal without Retry-After (a query that needs more memory than DuckDB
// has would fail again), is returned at once.
func (c Client) Query(ctx context.Context, stmt string) (*Result, error) {
	body, _ := json.Marshal(Request{SQL: stmt})
	retryFor := c.RetryFor
	if retryFor == 0 {
		retryFor = DefaultRetryFor
	}
	start := time.Now()
	res, err := backoff.Retry(ctx, func() (*Result, error) {
		res, wait, err := c.send(ctx, body)
		if err != nil && wait > 0 && retryFor > 0 {
			return nil, backoff.RetryAfter(wait, err)
		}
		return res, backoff.Permanent(err)
	}, backoff.WithMaxElapsedTime(max(retryFor, 0)))
	if re := backoff.AsRetryError(err); re != nil {
		if errors.Is(re.Cause, backoff.ErrPermanent) {
			return nil, re.LastErr
		}
		return nil, fmt.Errorf("%w (still refused after %s of retries: %w)", re.LastErr, time.Since(start).Round(100*time.Millisecond), re.Cause)
	}
	return res, err
}

// send posts one query. wait is the server's Retry-After on a 429 or 503
// that carries one, 0 when the failure is not worth sending again.
func (c Client) send(ctx context.Context, body []byte) (res *Result, wait time.Duration, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Endpoint+Path, bytes.NewReader(body))
	if err != nil {
		return nil, 0, fmt.Errorf("build request: %w", err)
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
		return nil, 0, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.Endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
			wait = retryAfter(resp.Header.Get("Retry-After"))
		}
		var eb ErrorBody
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		if json.Unmarshal(raw, &eb) == nil && eb.Error != "" {
			return nil, wait, fmt.Errorf("%s: %s", resp.Status, eb.Error)
		}
		return nil, wait, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(raw))
	}
	dec := json.NewDecoder(resp.Body)
	dec.UseNumber()
	var r Result
	if err := dec.Decode(&r); err != nil {
		return nil, 0, fmt.Errorf("decode result: %w", err)
	}
	return &r, 0, nil
}

// minRetryWait keeps a server that answers "Retry-After: 0" from being
// asked again in a tight loop.
const minRetryWait = 250 * time.Millisecond

// retryAfter reads a Retry-After header (seconds, or an HTTP date): 0 when
// there is none or it cannot be read, minRetryWait at least otherwise.
func retryAfter(h string) time.Duration {
	var d time.Duration
	if s, err := strconv.Atoi(h); err == nil {
		d = time.Duration(s) * time.Second
	} else if t, err := http.ParseTime(h); err == nil {
		d = time.Until(t)
	} else {
		return 0
	}
	return max(d, minRetryWait)
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
