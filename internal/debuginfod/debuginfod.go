// Package debuginfod fetches a build's debug file from debuginfod servers
// (elfutils' HTTP protocol: GET <server>/buildid/<GNU build ID>/debuginfo,
// or .../executable), the symbol store Debian, Ubuntu, Fedora, Arch and
// many build farms run. The agent's receiver uses it to name stripped
// binaries' functions on the node (its debuginfod setting), and `hotpath
// symbolize` to name, after the fact, the frames of stripped programs that
// the agent stored as file offsets.
//
// Files are kept in the cache layout elfutils' own client uses
// (<cache>/<build ID>/debuginfo), so gdb, perf and hotpath share what any
// of them fetched. A file is kept only once it is whole and its build ID
// is the one asked for: a server cannot hand hotpath another build.
package debuginfod

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
)

// DefaultMaxBytes bounds one downloaded file. Debug files of large C++
// programs reach hundreds of MB; a server sending more than this is
// refused rather than allowed to fill the disk.
const DefaultMaxBytes = 4 << 30

// ErrNotFound is returned (wrapped) when no server has the build.
var ErrNotFound = errors.New("no debuginfod server has it")

// Client fetches files by GNU build ID. The zero value is not usable: set
// URLs and CacheDir (New does, from the environment, as elfutils does).
type Client struct {
	// URLs are the servers, asked in order.
	URLs []string
	// CacheDir holds fetched files as <CacheDir>/<build ID>/<kind>.
	CacheDir string
	// HTTP makes the requests; nil uses one with connect and response-header
	// timeouts and no kept-alive connections (the caller's context bounds
	// the whole download).
	HTTP *http.Client
	// MaxBytes bounds a file (DefaultMaxBytes when 0).
	MaxBytes int64
}

// FromEnv returns a client for the servers in $DEBUGINFOD_URLS (separated
// by spaces, as elfutils reads them) and elfutils' cache directory:
// $DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else
// ~/.cache/debuginfod_client. urls, when not empty, replaces the variable.
func FromEnv(urls string) (*Client, error) {
	if strings.TrimSpace(urls) == "" {
		urls = os.Getenv("DEBUGINFOD_URLS")
	}
	if len(strings.Fields(urls)) == 0 {
		return nil, errors.New("no debuginfod server: set DEBUGINFOD_URLS (e.g. https://debuginfod.debian.net) or give --debuginfod-urls")
	}
	dir, err := cacheDir()
	if err != nil {
		return nil, err
	}
	return New([]string{urls}, dir)
}

// New returns a client for the servers urls (http:// or https://, asked in
// order) caching in dir. An element may hold several, separated by spaces
// as in $DEBUGINFOD_URLS.
func New(urls []string, dir string) (*Client, error) {
	c := &Client{CacheDir: dir}
	var servers []string
	for _, u := range urls {
		servers = append(servers, strings.Fields(u)...)
	}
	for _, u := range servers {
		parsed, err := url.Parse(u)
		if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
			return nil, fmt.Errorf("debuginfod server %q: want an http:// or https:// URL", u)
		}
		c.URLs = append(c.URLs, strings.TrimRight(u, "/"))
	}
	if len(c.URLs) == 0 {
		return nil, errors.New("no debuginfod server")
	}
	if dir == "" {
		return nil, errors.New("no debuginfod cache directory")
	}
	return c, nil
}

func cacheDir() (string, error) {
	if d := os.Getenv("DEBUGINFOD_CACHE_PATH"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "debuginfod_client"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("debuginfod cache: %w (set DEBUGINFOD_CACHE_PATH)", err)
	}
	return filepath.Join(home, ".cache", "debuginfod_client"), nil
}

// IsGNUBuildID reports whether id can be asked of a debuginfod server: a
// GNU build ID in lowercase hex. Go build IDs and file hashes (sha256:…)
// are not indexed by debuginfod.
func IsGNUBuildID(id string) bool {
	if len(id) < 8 || len(id) > 128 || len(id)%2 != 0 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Kind is which file of a build is asked for.
type Kind string

const (
	// DebugInfo is the separate debug file (symbols and DWARF; its segments
	// keep addresses but no file data).
	DebugInfo Kind = "debuginfo"
	// Executable is the binary (or library) itself: what places file
	// offsets, and the symbols too where a server indexes unstripped
	// binaries.
	Executable Kind = "executable"
)

// Fetch returns the path of a local copy of the build's file of that kind:
// from the cache, else downloaded from the first server that has it. The
// error wraps ErrNotFound when every server answered that it has no such
// file.
func (c *Client) Fetch(ctx context.Context, buildID string, kind Kind) (string, error) {
	if !IsGNUBuildID(buildID) {
		return "", fmt.Errorf("build ID %q is not a GNU build ID (hex): debuginfod servers index those only", buildID)
	}
	if path, ok := c.Cached(buildID, kind); ok {
		return path, nil
	}
	dir := filepath.Join(c.CacheDir, buildID)
	var failures []string
	for _, server := range c.URLs {
		path, err := c.download(ctx, server, buildID, string(kind), dir)
		if err == nil {
			return path, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if !errors.Is(err, ErrNotFound) {
			failures = append(failures, err.Error())
		}
	}
	if len(failures) == 0 {
		return "", fmt.Errorf("%s of build %s: %w (asked %s)", kind, buildID, ErrNotFound, strings.Join(c.URLs, ", "))
	}
	return "", fmt.Errorf("%s of build %s: %s", kind, buildID, strings.Join(failures, "; "))
}

// Cached returns the path of the build's file of that kind when the cache
// holds it whole, and marks it used (the last to go in Trim).
func (c *Client) Cached(buildID string, kind Kind) (string, bool) {
	if !IsGNUBuildID(buildID) {
		return "", false
	}
	path := filepath.Join(c.CacheDir, buildID, string(kind))
	if checkFile(path, buildID) != nil {
		return "", false
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	return path, true
}

// checkFile accepts a cached file: not empty (elfutils caches a miss as an
// empty file), an ELF file, of the build.
func checkFile(path, buildID string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return errors.New("empty")
	}
	info, err := buildid.Read(path)
	if err != nil {
		return err
	}
	if !info.IsELF {
		return errors.New("not an ELF file")
	}
	if info.GNU != buildID {
		return fmt.Errorf("its build ID is %q, not %s", info.GNU, buildID)
	}
	return nil
}

func (c *Client) client() *http.Client {
	if c.HTTP == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 15 * time.Second}).DialContext
		t.ResponseHeaderTimeout = 60 * time.Second // a server indexing a large package takes its time
		// One request per build, each a whole file: a kept-alive connection
		// would save little and outlive the command's work.
		t.DisableKeepAlives = true
		c.HTTP = &http.Client{Transport: t}
	}
	return c.HTTP
}

// download fetches one kind of file from one server into dir, through a
// temporary file renamed into place once it is whole and checked.
func (c *Client) download(ctx context.Context, server, buildID, kind, dir string) (string, error) {
	u := server + "/buildid/" + buildID + "/" + kind
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("%s: %w", u, err)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		return "", err // names the method and URL
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return "", ErrNotFound
	case resp.StatusCode != http.StatusOK:
		return "", fmt.Errorf("%s: %s", u, resp.Status)
	}
	limit := c.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	if resp.ContentLength > limit {
		return "", fmt.Errorf("%s: %d bytes, more than the %d allowed", u, resp.ContentLength, limit)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+kind+".*.part")
	if err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	n, err := io.Copy(tmp, io.LimitReader(resp.Body, limit+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: after %d bytes: %w", u, n, err)
	case n > limit:
		return "", fmt.Errorf("%s: more than the %d bytes allowed", u, limit)
	case resp.ContentLength >= 0 && n != resp.ContentLength:
		return "", fmt.Errorf("%s: %d of %d bytes", u, n, resp.ContentLength)
	}
	if err := checkFile(tmp.Name(), buildID); err != nil {
		return "", fmt.Errorf("%s: refused: %w", u, err)
	}
	path := filepath.Join(dir, kind)
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("debuginfod cache: %w", err)
	}
	return path, nil
}

// Trim removes the least recently fetched or used builds from the cache
// until what it holds is within maxBytes, never the build keep. It
// returns how many builds it removed. Files other than the build
// directories' are left alone.
func (c *Client) Trim(maxBytes int64, keep string) (int, error) {
	entries, err := os.ReadDir(c.CacheDir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("debuginfod cache: %w", err)
	}
	type build struct {
		dir   string
		bytes int64
		used  time.Time
	}
	var builds []build
	var total int64
	for _, e := range entries {
		if !e.IsDir() || !IsGNUBuildID(e.Name()) {
			continue
		}
		b := build{dir: filepath.Join(c.CacheDir, e.Name())}
		files, _ := os.ReadDir(b.dir)
		for _, f := range files {
			if fi, err := f.Info(); err == nil && fi.Mode().IsRegular() {
				b.bytes += fi.Size()
				if fi.ModTime().After(b.used) {
					b.used = fi.ModTime()
				}
			}
		}
		total += b.bytes
		if e.Name() != keep {
			builds = append(builds, b)
		}
	}
	slices.SortFunc(builds, func(a, b build) int { return a.used.Compare(b.used) })
	removed := 0
	for _, b := range builds {
		if total <= maxBytes {
			break
		}
		if err := os.RemoveAll(b.dir); err != nil {
			return removed, fmt.Errorf("debuginfod cache: %w", err)
		}
		total -= b.bytes
		removed++
	}
	return removed, nil
}
