package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/google/pprof/driver"
	"github.com/google/pprof/profile"

	"github.com/hotpath-dev/hotpath/internal/localendpoint"
)

const webExamples = `  hotpath web --service api --since 1h                 # prints the URL; open it in a browser
  hotpath web --service api --local --since 15m --http 127.0.0.1:8080
  hotpath web --service api --since 7d --build-id 1f0e9d8c7b6a --open
`

// newWebCommand serves pprof's own web UI (graph, flame graph, top, peek,
// source) for the selected profile on a loopback port until interrupted.
func newWebCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "web --service S [--since 1h] [--http 127.0.0.1:0] [flags]",
		Short:   "open the pprof web UI (graph, flame graph, top) for a range on a loopback port",
		Example: webExamples,
		Args:    noArgs,
	}
	fs := cmd.Flags()
	target := addTargetFlags(fs)
	sel := addSelectFlags(fs)
	addr := fs.String("http", "127.0.0.1:0", "listen address (loopback; port 0 picks a free one)")
	open := fs.Bool("open", false, "open a browser (pprof's default browser choice)")
	_ = cmd.RegisterFlagCompletionFunc("service", completeServices(target, sel))
	cmd.RunE = action(func(cmd *cobra.Command, args []string) error {
		return serveWeb(cmd.Context(), target, sel, *addr, *open, cmd.OutOrStdout(), cmd.ErrOrStderr())
	})
	return cmd
}

func serveWeb(ctx context.Context, target *targetFlags, sel *selectFlags, addr string, open bool, stdout, stderr io.Writer) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--http %q: %w", addr, err)
	}
	if !localendpoint.IsLoopback(host) {
		return fmt.Errorf("--http %q: profiles show what the code does; serve them on a loopback address only", addr)
	}
	p, err := loadProfile(ctx, target, sel, time.Now(), stderr)
	if err != nil {
		return err
	}
	pp, err := p.Pprof()
	if err != nil {
		return err
	}
	// Bind first so port 0 resolves and the URL printed is the real one.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	flags := &driverFlags{fs: flag.NewFlagSet("pprof", flag.ContinueOnError),
		args: []string{"-http=" + ln.Addr().String()}}
	if !open {
		flags.args = append(flags.args, "-no_browser")
	}
	flags.args = append(flags.args, "hotpath:"+p.Service)
	flags.fs.SetOutput(stderr)
	opts := &driver.Options{
		Flagset: flags,
		Fetch:   fetcher{pp},
		UI:      &quietUI{w: stderr, browser: open},
		HTTPServer: func(args *driver.HTTPServerArgs) error {
			err := serveUI(ctx, ln, args, func(u string) {
				fmt.Fprintf(stdout, "pprof web UI for service %s, %s (%d samples): %s\n", p.Service, p.Range, p.Total(), u)
			})
			served <- err
			return err
		},
	}
	err = driver.PProf(opts)
	if err != nil {
		return fmt.Errorf("pprof web UI: %w", err)
	}
	select {
	case err = <-served:
	default:
	}
	return err
}

// serveUI serves pprof's handlers under /ui/ (as pprof itself does) until
// ctx ends.
func serveUI(ctx context.Context, ln net.Listener, args *driver.HTTPServerArgs, announce func(string)) error {
	mux := http.NewServeMux()
	mux.Handle("/ui/", http.StripPrefix("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := args.Handlers[r.URL.Path]
		if h == nil {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})))
	mux.Handle("/", http.RedirectHandler("/ui/", http.StatusTemporaryRedirect))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	announce((&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/ui/"}).String())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve pprof web UI: %w", err)
	}
	return nil
}

type fetcher struct{ p *profile.Profile }

func (f fetcher) Fetch(string, time.Duration, time.Duration) (*profile.Profile, string, error) {
	return f.p, "", nil
}

// driverFlags gives pprof its flags from a fixed argument list instead of
// os.Args.
type driverFlags struct {
	fs    *flag.FlagSet
	args  []string
	extra string
}

func (f *driverFlags) Bool(n string, d bool, u string) *bool          { return f.fs.Bool(n, d, u) }
func (f *driverFlags) Int(n string, d int, u string) *int             { return f.fs.Int(n, d, u) }
func (f *driverFlags) Float64(n string, d float64, u string) *float64 { return f.fs.Float64(n, d, u) }
func (f *driverFlags) String(n string, d string, u string) *string    { return f.fs.String(n, d, u) }
func (f *driverFlags) StringList(n string, d string, u string) *[]*string {
	return &[]*string{f.fs.String(n, d, u)}
}
func (f *driverFlags) ExtraUsage() string      { return f.extra }
func (f *driverFlags) AddExtraUsage(eu string) { f.extra += eu }
func (f *driverFlags) Parse(usage func()) []string {
	f.fs.Usage = usage
	if err := f.fs.Parse(f.args); err != nil {
		return nil
	}
	return f.fs.Args()
}

// quietUI sends pprof's messages to our stderr and never reads stdin.
type quietUI struct {
	w       io.Writer
	browser bool
}

func (u *quietUI) ReadLine(string) (string, error)     { return "", io.EOF }
func (u *quietUI) Print(args ...any)                   { fmt.Fprintln(u.w, args...) }
func (u *quietUI) PrintErr(args ...any)                { fmt.Fprintln(u.w, args...) }
func (u *quietUI) IsTerminal() bool                    { return false }
func (u *quietUI) WantBrowser() bool                   { return u.browser }
func (u *quietUI) SetAutoComplete(func(string) string) {}
