package sqlquery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
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
