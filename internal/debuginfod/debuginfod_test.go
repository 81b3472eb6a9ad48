package debuginfod

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/debuginfod/debuginfodtest"
)

// server serves files by build ID the way a debuginfod server does, and
// lets a test misbehave: files are looked up by the path's build ID and
// kind; a missing one is a 404.
type server struct {
	files    map[string][]byte // "<id>/<kind>"
	requests atomic.Int32
	truncate bool // send a Content-Length longer than the body
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	key := strings.TrimPrefix(r.URL.Path, "/buildid/")
	data, ok := s.files[key]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if s.truncate {
		w.Header().Set("Content-Length", "999999")
		_, _ = w.Write(data[:len(data)/2])
		return
	}
	_, _ = w.Write(data)
}

func newClient(t *testing.T, urls ...string) *Client {
	t.Helper()
	t.Setenv("DEBUGINFOD_CACHE_PATH", t.TempDir())
	c, err := FromEnv(strings.Join(urls, " "))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestFetchDownloadsChecksAndCaches(t *testing.T) {
	exe, id := debuginfodtest.BuildELF(t, "int main(void){return 0;}")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	empty := &server{files: map[string][]byte{}}
	full := &server{files: map[string][]byte{id + "/executable": data}}
	s1, s2 := httptest.NewServer(empty), httptest.NewServer(full)
	defer s1.Close()
	defer s2.Close()
	c := newClient(t, s1.URL, s2.URL+"/")

	if _, err := c.Fetch(context.Background(), id, DebugInfo); !errors.Is(err, ErrNotFound) {
		t.Fatalf("debuginfo: %v, want ErrNotFound", err)
	}
	path, err := c.Fetch(context.Background(), id, Executable)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.CacheDir, id, "executable"); path != want {
		t.Fatalf("path %s, want %s", path, want)
	}
	got, _ := os.ReadFile(path)
	if string(got) != string(data) {
		t.Fatal("cached file differs from the served one")
	}
	// The servers are asked in order: the first one each time.
	if n := empty.requests.Load(); n != 2 {
		t.Fatalf("first server asked %d times, want 2", n)
	}
	before := full.requests.Load()
	if _, err := c.Fetch(context.Background(), id, Executable); err != nil {
		t.Fatal(err)
	}
	if full.requests.Load() != before || empty.requests.Load() != 2 {
		t.Fatal("a cached file was asked of a server again")
	}
}

func TestFetchNotFoundIsErrNotFound(t *testing.T) {
	s := httptest.NewServer(&server{files: map[string][]byte{}})
	defer s.Close()
	c := newClient(t, s.URL)
	_, err := c.Fetch(context.Background(), "0123456789abcdef0123456789abcdef01234567", DebugInfo)
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), s.URL) {
		t.Fatalf("err %v, want ErrNotFound naming the server", err)
	}
}

// TestFetchRefusesBadFiles: a server that sends another build, something
// that is not ELF, a cut-off body or more than allowed gets a readable
// error, and nothing is left in the cache.
func TestFetchRefusesBadFiles(t *testing.T) {
	exe, id := debuginfodtest.BuildELF(t, "int main(void){return 0;}")
	_, otherID := debuginfodtest.BuildELF(t, "int main(void){return 1;}")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		srv  *server
		ask  string
		max  int64
		want string
	}{
		{"another build", &server{files: map[string][]byte{otherID + "/debuginfo": data}}, otherID, 0, "refused: its build ID is \"" + id + "\""},
		{"not ELF", &server{files: map[string][]byte{id + "/debuginfo": []byte("<html>login</html>")}}, id, 0, "refused: not an ELF file"},
		{"cut off", &server{files: map[string][]byte{id + "/debuginfo": data}, truncate: true}, id, 0, "unexpected EOF"},
		{"too large", &server{files: map[string][]byte{id + "/debuginfo": data}}, id, 100, "more than the 100 bytes allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := httptest.NewServer(tc.srv)
			defer s.Close()
			c := newClient(t, s.URL)
			c.MaxBytes = tc.max
			_, err := c.Fetch(context.Background(), tc.ask, DebugInfo)
			if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			entries, _ := os.ReadDir(filepath.Join(c.CacheDir, tc.ask))
			if len(entries) != 0 {
				t.Fatalf("cache holds %v after a refused file", entries)
			}
		})
	}
}

func TestFetchServerDown(t *testing.T) {
	s := httptest.NewServer(&server{})
	url := s.URL
	s.Close()
	c := newClient(t, url)
	_, err := c.Fetch(context.Background(), "0123456789abcdef0123456789abcdef01234567", DebugInfo)
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err %v, want connection refused", err)
	}
}

func TestBadInput(t *testing.T) {
	for _, u := range []string{"file:///etc", "debuginfod.debian.net", "http://"} {
		if _, err := FromEnv(u); err == nil || !strings.Contains(err.Error(), "want an http:// or https:// URL") {
			t.Errorf("FromEnv(%q): %v", u, err)
		}
	}
	t.Setenv("DEBUGINFOD_URLS", "")
	if _, err := FromEnv(""); err == nil || !strings.Contains(err.Error(), "set DEBUGINFOD_URLS") {
		t.Errorf("no servers: %v", err)
	}
	// Servers separated by spaces in an element (DEBUGINFOD_URLS' form),
	// trailing slashes dropped.
	if c, err := New([]string{"https://a.example/ http://b.example:8002", "http://c.example"}, "/var/cache/d"); err != nil ||
		!slices.Equal(c.URLs, []string{"https://a.example", "http://b.example:8002", "http://c.example"}) {
		t.Errorf("New: %+v, %v", c, err)
	}
	for _, urls := range [][]string{nil, {""}, {"  "}} {
		if _, err := New(urls, "/var/cache/d"); err == nil || err.Error() != "no debuginfod server" {
			t.Errorf("New(%q): %v", urls, err)
		}
	}
	c := &Client{URLs: []string{"http://127.0.0.1:1"}, CacheDir: t.TempDir()}
	for _, id := range []string{"../../etc/passwd", "ABCDEF0123", "abc", "go:xyz", "sha256:00ff00ff"} {
		if _, err := c.Fetch(context.Background(), id, DebugInfo); err == nil || !strings.Contains(err.Error(), "not a GNU build ID") {
			t.Errorf("Fetch(%q): %v", id, err)
		}
	}
}

func TestCacheDirFollowsElfutils(t *testing.T) {
	t.Setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1")
	t.Setenv("DEBUGINFOD_CACHE_PATH", "")
	t.Setenv("XDG_CACHE_HOME", "/x")
	c, err := FromEnv("")
	if err != nil || c.CacheDir != "/x/debuginfod_client" {
		t.Fatalf("%v %v", c, err)
	}
	t.Setenv("DEBUGINFOD_CACHE_PATH", "/y")
	if c, err = FromEnv(""); err != nil || c.CacheDir != "/y" {
		t.Fatalf("%v %v", c, err)
	}
}

// Trim removes the least recently used builds until the cache is within
// its bound, never the one kept, and leaves what is not a build's alone.
func TestTrimRemovesLeastRecentlyUsed(t *testing.T) {
	c := &Client{URLs: []string{"http://127.0.0.1:1"}, CacheDir: t.TempDir()}
	ids := []string{strings.Repeat("a1", 20), strings.Repeat("b2", 20), strings.Repeat("c3", 20)}
	base := time.Now().Add(-time.Hour)
	for i, id := range ids {
		dir := filepath.Join(c.CacheDir, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, string(DebugInfo))
		if err := os.WriteFile(path, make([]byte, 1000), 0o644); err != nil {
			t.Fatal(err)
		}
		used := base.Add(time.Duration(i) * time.Minute) // ids[0] is the oldest
		if err := os.Chtimes(path, used, used); err != nil {
			t.Fatal(err)
		}
	}
	other := filepath.Join(c.CacheDir, "notes.txt")
	if err := os.WriteFile(other, make([]byte, 5000), 0o644); err != nil {
		t.Fatal(err)
	}
	// ids[0] is the oldest but kept: ids[1] goes, then the 2,000 bytes left fit.
	n, err := c.Trim(2000, ids[0])
	if err != nil || n != 1 {
		t.Fatalf("Trim = %d, %v; want 1 build removed", n, err)
	}
	for i, want := range []bool{true, false, true} {
		if _, err := os.Stat(filepath.Join(c.CacheDir, ids[i])); (err == nil) != want {
			t.Errorf("build %d present = %v, want %v", i, err == nil, want)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is no build's was removed: %v", err)
	}
	if n, err := c.Trim(1<<20, ""); err != nil || n != 0 {
		t.Errorf("within the bound: Trim = %d, %v", n, err)
	}
}
