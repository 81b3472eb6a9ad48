package localendpoint

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		endpoint, token, want string
	}{
		{"127.0.0.1:7072", "", ""},
		{"[::1]:7072", "", ""},
		{"localhost:7072", "", ""},
		{"0.0.0.0:7072", "", "not a loopback address"},
		{"10.1.2.3:7072", "", "not a loopback address"},
		{"0.0.0.0:7072", "s3cret", ""},
		{"7072", "", "must be host:port"},
	} {
		err := Validate("x.endpoint", tc.endpoint, tc.token != "")
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%q, token %q) = %v, want %q", tc.endpoint, tc.token, err, tc.want)
		}
	}
}

func TestRequireToken(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h := RequireToken("s3cret", ok)
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusNoContent},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: status %d, want %d", tc.auth, rec.Code, tc.want)
		}
	}
	rec := httptest.NewRecorder()
	RequireToken("", ok).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusNoContent {
		t.Errorf("no token configured: status %d", rec.Code)
	}
}
