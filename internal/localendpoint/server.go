package localendpoint

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.uber.org/zap"
)

// ServerConfig is a hotpath HTTP endpoint: the collector's own server
// settings (endpoint, tls, auth through an authenticator extension, cors,
// limits, timeouts), plus one static bearer token for the common case of a
// single shared secret without an extension.
type ServerConfig struct {
	// HTTP is a named field, not embedded: embedding would promote
	// confighttp's Unmarshal to every config that embeds this one, and
	// confmap would then decode only confighttp's keys of it.
	HTTP confighttp.ServerConfig `mapstructure:",squash"`
	// Token, when set, must be sent as "Authorization: Bearer <token>".
	// More than one token, tokens from a file or other schemes: leave it
	// empty and set auth.authenticator (e.g. bearertokenauth).
	Token configopaque.String `mapstructure:"token"`
}

// NewServerConfig is the collector's default HTTP server on endpoint.
func NewServerConfig(endpoint string) ServerConfig {
	sc := confighttp.NewDefaultServerConfig()
	sc.NetAddr.Endpoint = endpoint
	// Requests are small JSON bodies; a slow client holding a header open
	// has no business here.
	sc.ReadHeaderTimeout = 10 * time.Second
	// Results can take as long as the query timeout allows: the write
	// deadline is the caller's (query.timeout, capture duration), not 30 s.
	sc.WriteTimeout = 0
	return ServerConfig{HTTP: sc}
}

// Endpoint is host:port as configured.
func (c *ServerConfig) Endpoint() string { return c.HTTP.NetAddr.Endpoint }

// Authenticated reports whether requests must authenticate (a token or an
// authenticator extension).
func (c *ServerConfig) Authenticated() bool {
	return c.Token != "" || c.HTTP.Auth.HasValue()
}

// Check is Validate for the endpoint named key ("query", "control"):
// host:port, loopback unless requests must authenticate, and not both a
// token and an authenticator (which one would be checked?).
func (c *ServerConfig) Check(key string) error {
	if c.Token != "" && c.HTTP.Auth.HasValue() {
		return fmt.Errorf("%s: set token or auth, not both", key)
	}
	return Validate(key+".endpoint", c.Endpoint(), c.Authenticated())
}

// Server is a running endpoint.
type Server struct {
	srv *http.Server
	ln  net.Listener
}

// Serve listens on the configured endpoint (with TLS when tls is set) and
// serves handler behind the token or authenticator. host supplies the
// authenticator extension and receives a fatal error event when serving
// fails after the start.
func (c *ServerConfig) Serve(ctx context.Context, host component.Host, set component.TelemetrySettings, handler http.Handler) (*Server, error) {
	ln, err := c.HTTP.ToListener(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.Endpoint(), err)
	}
	srv, err := c.HTTP.ToServer(ctx, host.GetExtensions(), set, RequireToken(string(c.Token), handler))
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s := &Server{srv: srv, ln: ln}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			set.Logger.Error("endpoint stopped", zap.String("endpoint", ln.Addr().String()), zap.Error(err))
			componentstatus.ReportStatus(host, componentstatus.NewFatalErrorEvent(err))
		}
	}()
	return s, nil
}

// Addr is the address actually listened on (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Shutdown stops accepting requests and waits for running ones until ctx
// ends, then closes what is left.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return s.srv.Close()
	}
	return err
}
