// Package controlapi is the agent's control endpoint protocol (status, the
// runtime kill switch, on-demand capture) and its client, shared by the
// ebpfprofile receiver and the hotpath CLI.
package controlapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// DefaultEndpoint is where the agent's control endpoint listens unless
// configured otherwise, and where hotpath capture looks for it.
const DefaultEndpoint = "127.0.0.1:7074"

// Paths served by the control endpoint.
const (
	PathStatus   = "/v1/status"
	PathTargets  = "/v1/targets"
	PathSampling = "/v1/sampling"
	PathCapture  = "/v1/capture"
)

// Status is what the agent is doing.
type Status struct {
	Enabled       bool    `json:"enabled"`
	FrequencyHz   int     `json:"frequency_hz"`            // in force; below configured while the overhead guard holds it down
	ConfiguredHz  int     `json:"configured_frequency_hz"` // frequency_hz from the config
	MaxCPUPercent float64 `json:"max_cpu_percent"`
	CPUPercent    float64 `json:"cpu_percent"` // of the machine, last interval
	Processes     int     `json:"processes"`
	Capturing     bool    `json:"capturing"`
}

// Target is a process the agent can capture.
type Target struct {
	PID        int    `json:"pid"`
	Service    string `json:"service"`
	Executable string `json:"executable"`
	// Unwinding is how the kernel walks its user stacks: "dwarf" (unwind
	// tables for its binaries built without frame pointers) or
	// "frame_pointer".
	Unwinding string `json:"unwinding,omitempty"`
	// UnwindPending: with unwinding: auto, a binary of the process new to
	// the agent is still to be analysed (queued, or deferred by the
	// one-time work budget until the process is busy): until then its
	// stacks are frame-pointer walks, which can break off early in code
	// built without frame pointers.
	UnwindPending bool `json:"unwind_pending,omitempty"`
	// StacksEndedEarly counts its sampled user stacks that stopped before
	// the outermost frame, by reason (truncated, unreadable_memory,
	// no_unwind_rule), since the agent first saw it.
	StacksEndedEarly map[string]uint64 `json:"stacks_ended_early,omitempty"`
}

// SamplingRequest turns sampling on or off.
type SamplingRequest struct {
	Enabled bool `json:"enabled"`
}

// CaptureRequest asks for a high-frequency capture of one process or of
// every process of a service.
type CaptureRequest struct {
	PID         int    `json:"pid,omitempty"`
	Service     string `json:"service,omitempty"`
	Duration    string `json:"duration"` // Go duration, e.g. "30s"
	FrequencyHz int    `json:"frequency_hz"`
}

// FoldedLine is one stack (root first, ";"-joined) and its sample count.
type FoldedLine struct {
	Stack string `json:"stack"`
	Count int64  `json:"count"`
}

// CaptureResult is what a capture saw.
type CaptureResult struct {
	Targets     []Target     `json:"targets"`
	FrequencyHz int          `json:"frequency_hz"`
	Duration    string       `json:"duration"`
	Samples     int64        `json:"samples"`
	Lost        uint64       `json:"lost"` // map full or stack not stored
	Folded      []FoldedLine `json:"folded"`
}

// ErrorBody is the JSON body of an error response.
type ErrorBody struct {
	Error string `json:"error"`
}

// Client talks to a control endpoint.
type Client struct {
	Endpoint string // host:port
	Token    string
	HTTP     *http.Client // nil: a client without timeout (captures are long)
}

// Status fetches the agent's status.
func (c Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.do(ctx, http.MethodGet, PathStatus, nil, &st)
}

// Targets lists the processes the agent knows.
func (c Client) Targets(ctx context.Context) ([]Target, error) {
	var ts []Target
	return ts, c.do(ctx, http.MethodGet, PathTargets, nil, &ts)
}

// SetSampling turns sampling on or off.
func (c Client) SetSampling(ctx context.Context, on bool) (Status, error) {
	var st Status
	return st, c.do(ctx, http.MethodPost, PathSampling, SamplingRequest{Enabled: on}, &st)
}

// Capture runs a capture and waits for its result.
func (c Client) Capture(ctx context.Context, req CaptureRequest) (CaptureResult, error) {
	var res CaptureResult
	return res, c.do(ctx, http.MethodPost, PathCapture, req, &res)
}

// ErrUnreachable wraps a failure to reach the endpoint at all.
var ErrUnreachable = errors.New("control endpoint unreachable")

func (c Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.Endpoint+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s (is the agent running with its control endpoint on?): %v", ErrUnreachable, c.Endpoint, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&eb) == nil && eb.Error != "" {
			return errors.New(eb.Error)
		}
		return fmt.Errorf("control endpoint %s: %s", c.Endpoint, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
