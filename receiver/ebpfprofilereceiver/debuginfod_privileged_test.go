//go:build privileged

package ebpfprofilereceiver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-dev/hotpath/internal/buildid"
	"github.com/hotpath-dev/hotpath/internal/debuginfod/debuginfodtest"
	"github.com/hotpath-dev/hotpath/internal/profileschema"
	"github.com/hotpath-dev/hotpath/internal/symbolize"
	"github.com/hotpath-dev/hotpath/internal/testworkload"
)

// A stripped program and the stripped library it calls, each burning CPU in
// a static function (in no symbol table they ship: named only by their
// debug files), as distributions ship both. The library is built without
// frame pointers, as distributions build theirs: its callers are found
// only through its unwind table.
const (
	strippedLibC = `
volatile unsigned long lib_sink;
static __attribute__((noinline, noclone)) void lib_static_mix(unsigned long n) {
	unsigned long x = lib_sink;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	lib_sink = x;
}
/* Keeps values across its calls in callee-saved registers it pushes, with
   no frame pointer: only its unwind table tells where its caller is. */
unsigned long lib_work(unsigned long n) {
	unsigned long before = lib_sink;
	lib_static_mix(n);
	unsigned long mid = lib_sink;
	lib_static_mix(n / 2);
	return before ^ mid ^ n;
}
`
	strippedAppC = `
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
unsigned long lib_work(unsigned long n);
volatile unsigned long app_sink;
static __attribute__((noinline, noclone)) void app_static_spin(unsigned long n) {
	unsigned long x = app_sink;
	for (unsigned long i = 0; i < n; i++) x = x * 6364136223846793005UL + i;
	app_sink = x;
}
int main(int argc, char **argv) {
	double seconds = argc > 1 ? atof(argv[1]) : 5;
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	printf("ready\n");
	fflush(stdout);
	SETTLE();
	/* seconds of CPU time: on a loaded machine the samples come with it */
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
	for (;;) {
		app_static_spin(200000);
		lib_work(200000);
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
		if ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 >= seconds) break;
	}
	return 0;
}
`
)

// TestDebugFilesFromDebuginfod runs a stripped program and its stripped
// library under a receiver whose debuginfod servers (a real elfutils
// server) have both debug files, and none installed: their static
// functions are named in the profiles, the files are in the receiver's
// cache directory, and counted as fetched.
func TestDebugFilesFromDebuginfod(t *testing.T) {
	build, run, srv := t.TempDir(), t.TempDir(), t.TempDir()
	gcc := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(build, "lib.c"), strippedLibC)
	write(filepath.Join(build, "app.c"), settle+strippedAppC)
	flags := []string{"-O1", "-g", "-Wl,--build-id"}
	libBin, appBin := filepath.Join(build, "libhpdbg.so"), filepath.Join(build, "hpdbg_app")
	gcc(append(flags, "-fomit-frame-pointer", "-shared", "-fPIC", "-o", libBin, filepath.Join(build, "lib.c"))...)
	gcc(append(flags, "-fno-omit-frame-pointer", "-o", appBin, filepath.Join(build, "app.c"), "-L"+build, "-lhpdbg", "-Wl,-rpath,$ORIGIN")...)
	builds := map[string]string{}
	for _, bin := range []string{libBin, appBin} {
		name := filepath.Base(bin)
		for _, args := range [][]string{
			{"objcopy", "--only-keep-debug", bin, filepath.Join(srv, name+".debug")},
			{"strip", "-o", filepath.Join(run, name), bin},
		} {
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
		}
		info, err := buildid.Read(bin)
		if err != nil || info.GNU == "" {
			t.Fatalf("%s: no GNU build ID (%v)", bin, err)
		}
		builds[name] = info.GNU
		out, _ := exec.Command("nm", filepath.Join(run, name)).CombinedOutput()
		if strings.Contains(string(out), "static_") {
			t.Fatalf("the stripped %s still names its static function; the test proves nothing:\n%s", name, out)
		}
	}
	url, _ := debuginfodtest.Serve(t, srv, builds["hpdbg_app"])
	// The server answers only once the process has been read and its
	// unwind tables attached, as a server across a network answers after
	// the agent has read a new process: the attach must not wait for the
	// debug files.
	release := make(chan struct{})
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(slow.Close)
	released := false
	releaseNow := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(releaseNow) // before slow.Close: a test that failed early

	// No debug file installed: only the servers can name them.
	oldDir := symbolize.DebugDir
	symbolize.DebugDir = t.TempDir()
	t.Cleanup(func() { symbolize.DebugDir = oldDir })

	cfg := testConfig()
	cfg.TraceContext.Enabled = false
	cache := t.TempDir()
	cfg.Debuginfod = DebuginfodConfig{URLs: []string{slow.URL}, Directory: cache, MaxMiB: 64, Wait: 30 * time.Second}
	r, sink := startReceiver(t, cfg)
	// Measured once the receiver has read the process and attached its
	// unwind tables: while the debug files are on their way.
	cmd := startSettled(t, filepath.Join(run, "hpdbg_app"), "3", r)
	releaseNow()
	_ = cmd.Wait()
	if err := r.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	st := testworkload.TallyProcess(sink.AllProfiles(), cmd.Process.Pid)
	var app, lib, libWhole, raw int64
	for stack, n := range st.Folded {
		frames := testworkload.UserFrames(stack)
		if len(frames) == 0 {
			continue
		}
		switch frames[len(frames)-1] {
		case "app_static_spin":
			app += n
		case "lib_static_mix":
			lib += n
			if strings.Contains(stack, ";main;lib_work;lib_static_mix") {
				libWhole += n
			}
		}
		for _, f := range frames {
			if strings.HasPrefix(f, profileschema.RawFramePrefix("hpdbg_app")) || strings.HasPrefix(f, profileschema.RawFramePrefix("libhpdbg.so")) {
				raw += n
				break
			}
		}
	}
	t.Logf("of %d samples: app_static_spin %d, lib_static_mix %d (%d under main;lib_work), with an unnamed frame of either file %d; top:%s", st.Total, app, lib, libWhole, raw, st.Top(4))
	minSamples := int64(0.2 * testworkload.ExpectedSamples(cmd, cfg.FrequencyHz))
	if app < minSamples || lib < minSamples {
		t.Errorf("app_static_spin %d and lib_static_mix %d samples, want ≥ %d each (named from their debug files)", app, lib, minSamples)
	}
	// The library's unwind table was attached while its debug file was on
	// its way: its stacks reach main.
	if libWhole < lib*9/10 {
		t.Errorf("%d of %d lib_static_mix samples have main;lib_work above them", libWhole, lib)
	}
	// The first interval can be symbolized before a fetch is done (its
	// frames then keep their addresses); the rest is named.
	if raw > st.Total/10 {
		t.Errorf("%d of %d samples have an unnamed frame of the program or its library", raw, st.Total)
	}
	for name, id := range builds {
		if _, err := os.Stat(filepath.Join(cache, id, "debuginfo")); err != nil {
			t.Errorf("%s's debug file is not in the cache directory: %v", name, err)
		}
	}
}
