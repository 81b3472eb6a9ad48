package localendpoint

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/bearertokenauthextension"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configauth"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/extension/extensiontest"
)

// extensionHost is a collector host holding real extensions.
type extensionHost struct {
	component.Host
	ext map[component.ID]component.Component
}

func (h extensionHost) GetExtensions() map[component.ID]component.Component { return h.ext }

// selfSignedCert writes a certificate for 127.0.0.1 and its key to dir and
// returns their paths and a pool trusting it.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "hotpath test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startBearerTokenAuth starts contrib's bearertokenauth extension accepting
// token.
func startBearerTokenAuth(t *testing.T, token string) (component.ID, component.Component) {
	t.Helper()
	f := bearertokenauthextension.NewFactory()
	cfg := f.CreateDefaultConfig().(*bearertokenauthextension.Config)
	cfg.BearerToken = configopaque.String(token)
	id := component.NewID(f.Type())
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ext.Shutdown(context.Background()) })
	return id, ext
}

func get(t *testing.T, client *http.Client, url, auth string) (int, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// An endpoint with tls and an authenticator extension set serves HTTPS to
// a real TLS client and lets only requests the extension accepts through.
func TestServeTLSWithAuthenticatorExtension(t *testing.T) {
	certFile, keyFile, pool := selfSignedCert(t, t.TempDir())
	authID, auth := startBearerTokenAuth(t, "s3cret")

	cfg := NewServerConfig("127.0.0.1:0")
	tlsCfg := configtls.NewDefaultServerConfig()
	tlsCfg.CertFile, tlsCfg.KeyFile = certFile, keyFile
	cfg.HTTP.TLS = configoptional.Some(tlsCfg)
	cfg.HTTP.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: authID}})
	if err := cfg.Check("query"); err != nil {
		t.Fatal(err)
	}
	// Authenticated, it may listen beyond loopback.
	public := cfg
	public.HTTP.NetAddr.Endpoint = "0.0.0.0:7072"
	if err := public.Check("query"); err != nil {
		t.Fatalf("non-loopback endpoint with an authenticator refused: %v", err)
	}

	host := extensionHost{Host: componenttest.NewNopHost(), ext: map[component.ID]component.Component{authID: auth}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv, err := cfg.Serve(context.Background(), host, componenttest.NewNopTelemetrySettings(), handler)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	url := "https://" + srv.Addr() + "/"
	for _, tc := range []struct {
		auth string
		want int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusNoContent},
	} {
		got, err := get(t, client, url, tc.auth)
		if err != nil {
			t.Fatalf("Authorization %q: %v", tc.auth, err)
		}
		if got != tc.want {
			t.Errorf("Authorization %q: status %d, want %d", tc.auth, got, tc.want)
		}
	}
	// Plain HTTP to the TLS port gets no answer from the handler.
	plain := &http.Client{}
	defer plain.CloseIdleConnections()
	if got, err := get(t, plain, "http://"+srv.Addr()+"/", "Bearer s3cret"); err == nil && got == http.StatusNoContent {
		t.Fatal("plain HTTP was served on the TLS endpoint")
	}
	// A client that does not trust the certificate is refused.
	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}
	defer untrusting.CloseIdleConnections()
	if _, err := get(t, untrusting, url, "Bearer s3cret"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted certificate: err = %v", err)
	}
}

// The static token works without any extension, and setting both a token
// and an authenticator is refused (which one would apply?).
func TestServeStaticToken(t *testing.T) {
	cfg := NewServerConfig("127.0.0.1:0")
	cfg.Token = "s3cret"
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv, err := cfg.Serve(context.Background(), componenttest.NewNopHost(), componenttest.NewNopTelemetrySettings(), handler)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	client := &http.Client{}
	defer client.CloseIdleConnections()
	for auth, want := range map[string]int{"": http.StatusUnauthorized, "Bearer nope": http.StatusUnauthorized, "Bearer s3cret": http.StatusNoContent} {
		got, err := get(t, client, "http://"+srv.Addr()+"/", auth)
		if err != nil || got != want {
			t.Errorf("Authorization %q: status %d (%v), want %d", auth, got, err, want)
		}
	}

	both := NewServerConfig("127.0.0.1:0")
	both.Token = "s3cret"
	both.HTTP.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: component.MustNewID("bearertokenauth")}})
	if err := both.Check("control"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("token and auth together: err = %v", err)
	}
	open := NewServerConfig("0.0.0.0:7074")
	if err := open.Check("control"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Fatalf("unauthenticated non-loopback endpoint: err = %v", err)
	}
}
