package procinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestAppName(t *testing.T) {
	files := map[string]string{
		"/srv/web/package.json":           `{"name": "checkout-web", "version": "1.0.0"}`,
		"/srv/unnamed/package.json":       `{"version": "1.0.0"}`,
		"/srv/package.json":               `{"name": "parent-not-read"}`,
		"/srv/broken/dist/package.json":   `{"name": `,
		"/mono/package.json":              `{"name": "mono", "private": true}`,
		"/mono/packages/api/package.json": `{"name": "@shop/api"}`,
		"/app/package.json":               `{"name": "storefront"}`,
	}
	var asked []string
	readFile := fakeFiles{cwd: "/work", files: files, asked: &asked}
	for _, tc := range []struct {
		exe  string
		args string // space-separated command line, argv[0] first
		want string
	}{
		{"python3.11", "python3 /srv/billing/worker.py --queue q", "worker"},
		{"python3.11", "python3 -u -B worker.py", "worker"},
		{"python3.11", "python3 -Bu worker.py", "worker"},
		{"python3.11", "python3 -X importtime -W ignore worker.py", "worker"},
		{"python3.11", "python3 -Ximporttime -Wignore worker.py", "worker"},
		{"python3.11", "python3 --check-hash-based-pycs never app.pyz", "app"},
		{"python3.11", "python3 /srv/tool/__main__.py", "tool"},
		{"python3.11", "python3 -m celery worker -A proj", "celery"},
		{"python3.11", "python3 -mhttp.server 8000", "http.server"},
		{"python3.11", "python3 -Bm pkg.__main__", "pkg"},
		{"python3.11", "/usr/bin/python3 /usr/local/bin/gunicorn app:app", "gunicorn"},
		{"python3.11", "python3 -- -odd-name.py", "-odd-name"},
		{"python3.11", "python3 -c import time", ""},
		{"python3.11", "python3 -Bc import time", ""},
		{"python3.11", "python3 -", ""},
		{"python3.11", "python3 -i", ""},
		{"python3.11", "python3", ""},
		{"python3.13t", "python3.13t app.py", "app"},
		{"pypy3.10", "pypy3 app.py", "app"},
		{"java", "java -Xmx1g -Dapp=x -jar /opt/orders.jar --port 8080", "orders"},
		{"java", "java -cp lib/* com.example.Main arg", "com.example.Main"},
		{"java", "java --class-path lib -XX:+UseG1GC @opts com.example.Main", "com.example.Main"},
		{"java", "java --add-opens java.base/java.lang=ALL-UNNAMED -m app/com.example.Main", "com.example.Main"},
		{"java", "java --module=app", "app"},
		{"java", "java --source 21 Script.java", "Script"},
		{"java", "java -version", ""},
		{"node", "node --enable-source-maps /srv/web/server.js", "checkout-web"},
		{"node", "node /srv/web/dist/index.js", "checkout-web"},
		{"node", "node -r dotenv/config --title api /srv/unnamed/main.mjs", "main"},
		{"node", "node /srv/broken/dist/index.js", "index"},
		{"node", "node /mono/packages/api/dist/server/index.js", "@shop/api"},
		{"node", "node /app/node_modules/.bin/next start", "storefront"},
		{"node", "node /deep/a/b/c/d/e/f/g/h/i/j/server.js", "server"},
		{"nodejs", "nodejs --inspect-port 9230 app.js", "app"},
		{"node", "node -e console.log(1)", ""},
		{"node", "node", ""},
		{"dotnet", "dotnet Shop.Api.dll", "Shop.Api"},
		{"dotnet", "dotnet exec --runtimeconfig x.json /app/Shop.Api.dll", "Shop.Api"},
		{"dotnet", "dotnet build", ""},
		{"ruby", "ruby app.rb", ""},
		{"bash", "bash script.sh", ""},
	} {
		if got := appName(tc.exe, strings.Fields(tc.args), readFile); got != tc.want {
			t.Errorf("appName(%s, %q) = %q, want %q", tc.exe, tc.args, got, tc.want)
		}
	}
	// The look-up is bounded: at most packageLevels reads for a script
	// deep in a tree without a package.json, and none above the root.
	asked = nil
	appName("node", []string{"node", "/deep/a/b/c/d/e/f/g/h/i/j/server.js"}, readFile)
	if len(asked) != packageLevels {
		t.Errorf("%d package.json reads for a deep script (%q), want %d", len(asked), asked, packageLevels)
	}
	asked = nil
	appName("node", []string{"node", "/server.js"}, readFile)
	if len(asked) != 1 || asked[0] != "/package.json" {
		t.Errorf("reads for a script at the root: %q, want only /package.json", asked)
	}

	// Titles a program wrote over its command line (the rest of it left
	// as NULs, so empty arguments).
	for _, tc := range []struct {
		exe  string
		args []string
		want string
	}{
		{"node", []string{"shop-api", "", "", ""}, "shop-api"},
		{"python3.11", []string{"gunicorn: worker [app:app]", "", ""}, "gunicorn"},
		{"python3.11", []string{"celery worker -A proj", ""}, "celery"},
		{"python3.11", []string{"/usr/bin/python3"}, ""},
		{"node", []string{"node", ""}, ""},
		// Empty words inside a command line are skipped, not read as a
		// script in the working directory.
		{"node", []string{"node", "", "/srv/web/server.js"}, "checkout-web"},
		{"bash", []string{"my-title", ""}, ""},
	} {
		if got := appName(tc.exe, tc.args, readFile); got != tc.want {
			t.Errorf("appName(%s, %q) = %q, want %q", tc.exe, tc.args, got, tc.want)
		}
	}
}

// Real interpreters, started as users start them: procinfo.Read names the
// program each runs. java and node come with make deps (nodejs,
// openjdk-17-jdk-headless).
func TestReadNamesTheProgramsOfInterpreters(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	worker := write("billing/worker.py", "import time\ntime.sleep(60)\n")
	write("sleeper.py", "import time\ntime.sleep(60)\n")
	write("Sleeper.java", "class Sleeper { public static void main(String[] a) throws Exception { Thread.sleep(60000); } }\n")
	write("web/package.json", `{"name": "checkout-web"}`)
	write("web/dist/index.js", "setTimeout(() => {}, 60000);\n")
	// A package.json that is a symlink is refused (a container's files
	// are its own to plant): the script names the program.
	write("elsewhere.json", `{"name": "not-this"}`)
	write("linked/server.js", "setTimeout(() => {}, 60000);\n")
	if err := os.Symlink(filepath.Join(dir, "elsewhere.json"), filepath.Join(dir, "linked/package.json")); err != nil {
		t.Fatal(err)
	}

	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java is needed (make deps installs openjdk-17-jdk-headless): %v", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed (make deps installs nodejs): %v", err)
	}
	for _, tc := range []struct {
		argv []string
		cwd  string
		want string
	}{
		{[]string{python, "-u", worker}, "", "worker"},
		{[]string{python, "-B", "-m", "sleeper"}, dir, "sleeper"},
		{[]string{java, "-Xmx64m", "Sleeper.java"}, dir, "Sleeper"},
		{[]string{node, "dist/index.js"}, filepath.Join(dir, "web"), "checkout-web"},
		{[]string{node, filepath.Join(dir, "linked/server.js")}, "", "server"},
	} {
		cmd := exec.Command(tc.argv[0], tc.argv[1:]...)
		cmd.Dir = tc.cwd
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		// Until the name comes: exec switches the executable link before
		// it lays out the command line, and a read between the two finds
		// the interpreter without its arguments.
		info := readStarted(t, cmd.Process.Pid, func(info Info) bool { return info.App == tc.want })
		if info.App != tc.want {
			t.Errorf("%q (in %q): executable %q, program %q, want %q", tc.argv, tc.cwd, info.ExeName, info.App, tc.want)
		}
	}
	// Not an interpreter: its command line is not read.
	if info, err := Read("/proc", os.Getpid(), 0); err != nil || info.App != "" {
		t.Errorf("this test binary: %+v, %v; want no program", info, err)
	}
}

// fakeFiles are a process's files from a map, its working directory cwd;
// asked records every path read.
type fakeFiles struct {
	cwd   string
	files map[string]string
	asked *[]string
}

func (f fakeFiles) Abs(path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(f.cwd, path)
}

func (f fakeFiles) ReadFile(abs string) ([]byte, error) {
	*f.asked = append(*f.asked, abs)
	if s, ok := f.files[abs]; ok {
		return []byte(s), nil
	}
	return nil, os.ErrNotExist
}
