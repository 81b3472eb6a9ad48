// Package localendpoint holds the rules every hotpath HTTP endpoint (the
// exporters' read-only SQL, the agent's control API) follows: served by the
// collector's confighttp (TLS, auth extensions, limits), loopback by
// default, a bearer token or an authenticator required to listen anywhere
// else.
package localendpoint

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
)

// Validate checks that endpoint is host:port and that it is a loopback
// address unless requests must authenticate. key names the setting in
// messages ("query.endpoint").
func Validate(key, endpoint string, authenticated bool) error {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return fmt.Errorf("%s must be host:port, got %q: %w", key, endpoint, err)
	}
	if !IsLoopback(host) && !authenticated {
		return fmt.Errorf("%s %q is not a loopback address; set a token or an auth authenticator to listen beyond this host", key, endpoint)
	}
	return nil
}

// IsLoopback reports whether host names this machine only.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RequireToken wraps h so that, when token is set, requests must carry
// "Authorization: Bearer <token>" (compared in constant time).
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			WriteError(w, http.StatusUnauthorized, fmt.Errorf("missing or wrong bearer token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error string `json:"error"`
}

// WriteError answers with status and {"error": err}.
func WriteError(w http.ResponseWriter, status int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(ErrorBody{Error: err.Error()})
}
