package python

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

const qualSource = `import functools

def deco(f):
    return f

class Codec:
    """A docstring whose lines look like code:
def fake():
class Fake:
    """

    @deco
    @functools.lru_cache(
        maxsize=None,
    )
    def encode(self, n):
        s = '#' ; t = "'''" # a comment with "quotes
        return n

    class Inner:
        async def decode(self, n): return n

    if True:
        def conditional(self):
            pass

x = (1,
def_not_a_def := 2) if False else None

def outer(n):
    def inner(m):
        class Local:
            def method(self):
                pass
        return m
    values = [1, 2,
        3]
    def after(m): \
        return m
    return inner(n)

class Empty: pass
def last():
	return '''
def in_a_string():
'''
`

func TestDefinitions(t *testing.T) {
	got := parseSource([]byte(qualSource)).defs
	want := map[int]definition{
		3:  {"deco", "deco"},
		6:  {"Codec", "Codec"},
		12: {"encode", "Codec.encode"}, // the first decorator's line
		16: {"encode", "Codec.encode"},
		20: {"Inner", "Codec.Inner"},
		21: {"decode", "Codec.Inner.decode"},
		24: {"conditional", "Codec.conditional"}, // an if is no scope
		30: {"outer", "outer"},
		31: {"inner", "outer.<locals>.inner"},
		32: {"Local", "outer.<locals>.inner.<locals>.Local"},
		33: {"method", "outer.<locals>.inner.<locals>.Local.method"},
		38: {"after", "outer.<locals>.after"},
		42: {"Empty", "Empty"},
		43: {"last", "last"},
	}
	for line, w := range want {
		if got[line] != w {
			t.Errorf("line %d: %+v, want %+v", line, got[line], w)
		}
	}
	for line, d := range got {
		if _, ok := want[line]; !ok {
			t.Errorf("line %d: unexpected definition %+v", line, d)
		}
	}
}

const anonymousSource = `squares = [x * x for x in range(3)]

class Table:
    keys = {k for k in "ab"}
    def rows(self, data,
             key=lambda r: r[0]):
        ordered = sorted(data, key=lambda r: r[1])
        return [r for r in ordered]
    def one(self): return [c for c in "xy"]
    def nested(self):
        return [[y for y in x] for x in self]
`

// A lambda's or comprehension's code is named in the body that holds its
// first line: a default value in a def's header is in the enclosing body,
// a one-line def's is in the def. One of several on a line keeps its bare
// name: the line does not say whether one is inside the other.
func TestAnonymousQualNames(t *testing.T) {
	p := parseSource([]byte(anonymousSource))
	for _, c := range []struct {
		line       int
		name, want string
	}{
		{1, "<listcomp>", ""}, // a module's: its name is its own
		{4, "<setcomp>", "Table.<setcomp>"},
		{6, "<lambda>", "Table.<lambda>"},
		{7, "<lambda>", "Table.rows.<locals>.<lambda>"},
		{8, "<listcomp>", "Table.rows.<locals>.<listcomp>"},
		{9, "<listcomp>", "Table.one.<locals>.<listcomp>"},
		{11, "<listcomp>", ""},
	} {
		if got := p.qualName(c.line, c.name); got != c.want {
			t.Errorf("line %d %s: %q, want %q", c.line, c.name, got, c.want)
		}
	}
}

// TestDefinitionsMatchCPython compares the qualified names read from the
// source with the ones CPython 3.11 compiles (co_qualname) for every
// function, class, lambda and comprehension of the standard library's
// modules and packages: the names 3.10 and older processes get from their
// sources. None may differ; a lambda or comprehension on a line with
// another keeps its bare name (one may be inside the other).
func TestDefinitionsMatchCPython(t *testing.T) {
	files, _ := filepath.Glob("/usr/lib/python3.11/*.py")
	packages, _ := filepath.Glob("/usr/lib/python3.11/*/*.py")
	files = append(files, packages...)
	if len(files) < 100 {
		t.Fatalf("Debian's python3.11 and its standard library are needed: found %d modules", len(files))
	}
	const walk = `
import json, sys
out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        src = f.read()
    try:
        top = compile(src, path, "exec")
    except SyntaxError:
        continue
    found, todo = [], [top]
    while todo:
        co = todo.pop()
        for c in co.co_consts:
            if hasattr(c, "co_qualname"):
                todo.append(c)
                found.append([c.co_firstlineno, c.co_name, c.co_qualname])
    out[path] = found
print(json.dumps(out))
`
	out, err := exec.Command(debianPython, append([]string{"-c", walk}, files...)...).Output()
	if err != nil {
		t.Fatalf("%s: %v", debianPython, err)
	}
	var compiled map[string][][3]json.RawMessage
	if err := json.Unmarshal(out, &compiled); err != nil {
		t.Fatal(err)
	}
	var checked, wrong, anon, bare int
	for path, found := range compiled {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		parsed := parseSource(src)
		for _, f := range found {
			var line int
			var name, qual string
			if json.Unmarshal(f[0], &line) != nil || json.Unmarshal(f[1], &name) != nil || json.Unmarshal(f[2], &qual) != nil {
				t.Fatalf("%s: %s", path, f)
			}
			checked++
			if anonymous[name] {
				anon++
			}
			got := parsed.qualName(line, name)
			if got == "" && anonymous[name] && qual != name {
				bare++ // one of several on its line
				continue
			}
			if got == "" {
				got = name // as a module's own: co_name
			}
			if got != qual {
				wrong++
				if wrong <= 20 {
					t.Errorf("%s:%d: %s named %s, CPython compiles %s", path, line, name, got, qual)
				}
			}
		}
	}
	t.Logf("%d functions, classes, lambdas and comprehensions in %d modules: %d named otherwise, %d lambdas and comprehensions kept bare", checked, len(compiled), wrong, bare)
	if checked < 5000 {
		t.Errorf("only %d compared", checked)
	}
	if bare*10 > anon {
		t.Errorf("%d of %d lambdas and comprehensions kept bare: more than a tenth", bare, anon)
	}
}

// A process's co_filename is read in its own root, relative to its working
// directory when relative; only a definition of co_name at co_firstlineno
// qualifies it, so a file changed since it was loaded keeps bare names.
func TestQualNameFromTheProcessSource(t *testing.T) {
	// A /proc/PID of its own: the root a directory, cwd a link to a path
	// inside it, as the kernel shows it.
	proc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(proc, "root/srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/srv/app", filepath.Join(proc, "cwd")); err != nil {
		t.Fatal(err)
	}
	write := func(path, src string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(proc, path), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("root/srv/app/codec.py", qualSource)
	write("root/srv/app/main.py", "class Main:\n    def run(self):\n        pass\n")
	s := &sourceNames{procDir: proc}
	for _, c := range []struct {
		file, name string
		line       int
		want       string
	}{
		{"/srv/app/codec.py", "encode", 12, "Codec.encode"},
		{"/srv/app/codec.py", "decode", 21, "Codec.Inner.decode"},
		{"/srv/app/codec.py", "inner", 31, "outer.<locals>.inner"},
		{"/srv/app/codec.py", "renamed", 31, ""}, // another function there now
		{"/srv/app/codec.py", "encode", 13, ""},  // not a definition's line
		{"/srv/app/codec.py", "deco", 3, ""},     // a module's own: co_name is its name
		{"main.py", "run", 2, "Main.run"},
		{"/srv/app/missing.py", "run", 2, ""},
		{"<frozen importlib._bootstrap>", "_find_and_load", 1165, ""},
		{"/srv/app/codec.pyc", "encode", 12, ""},
	} {
		if got := s.qualName(c.file, c.line, c.name); got != c.want {
			t.Errorf("%s:%d %s: %q, want %q", c.file, c.line, c.name, got, c.want)
		}
	}
	// Each file is read once per process.
	write("root/srv/app/codec.py", strings.Repeat("\n", 11)+"def encode(): pass\n")
	if got := s.qualName("/srv/app/codec.py", 12, "encode"); got != "Codec.encode" {
		t.Errorf("read again: %q", got)
	}
	if len(s.files) != 5 {
		t.Errorf("%d files cached, want 5 (every co_filename asked about)", len(s.files))
	}
}

// FuzzDefinitions: any bytes as a source (a file the process named, which
// need not be Python) give definitions without a panic, each qualified
// name ending with its own name, one per line at most.
func FuzzDefinitions(f *testing.F) {
	f.Add([]byte(qualSource))
	f.Add([]byte("class A:\n\tdef b(self):\n\t\tdef c(): '''\n\"\"\"\n'''\n"))
	f.Add([]byte("@d(\n)\nasync  def\tf(x): \\\n  pass\n  class C: pass"))
	f.Add([]byte{0xff, '\n', 'd', 'e', 'f', ' ', 0xc3, 0xa9, '(', ')', ':', '\r', '\n'})
	f.Fuzz(func(t *testing.T, src []byte) {
		parsed := parseSource(src)
		for _, r := range parsed.scopes {
			if r.first < 1 || r.first > r.last+1 || !strings.HasSuffix(r.prefix, ".") {
				t.Fatalf("body %+v", r)
			}
		}
		for line, d := range parsed.defs {
			if d.name == "" || !strings.HasSuffix(d.qualName, d.name) {
				t.Fatalf("line %d: %+v", line, d)
			}
			if line < 1 || line > strings.Count(string(src), "\n")+1 {
				t.Fatalf("line %d of a source of %d lines", line, strings.Count(string(src), "\n")+1)
			}
		}
	})
}

// Processes share a parse of a source file by its identity (a server's
// forked workers are read each on its own): the same file gives the same
// parse; a changed one, a new parse. The cache stays within its bytes.
func TestSourcesSharedByFileIdentity(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "codec.py")
	if err := os.WriteFile(path, []byte(qualSource), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := hostProcDir(t)
	c := &sourceCache{limit: 1 << 20}
	first := c.get(proc, path)
	if first.qualName(16, "encode") != "Codec.encode" {
		t.Fatalf("parsed %+v", first.defs)
	}
	if again := c.get(proc, path); again != first {
		t.Error("the same file was parsed again")
	}
	link := filepath.Join(dir, "link.py")
	if err := os.Link(path, link); err != nil {
		t.Fatal(err)
	}
	if other := c.get(proc, link); other != first {
		t.Error("the same file under another name was parsed again")
	}
	if err := os.WriteFile(path, []byte("class Codec:\n    def encode(self): pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed := c.get(proc, path)
	if changed == first || changed.qualName(2, "encode") != "Codec.encode" {
		t.Errorf("a changed file kept its old parse: %+v", changed.defs)
	}
	if c.held != first.keep()+changed.keep() {
		t.Errorf("%d bytes held, want %d", c.held, first.keep()+changed.keep())
	}
	// Past the limit, the cache starts again with the new file alone.
	small := &sourceCache{limit: first.keep() + 1}
	small.get(proc, link)
	small.get(proc, path)
	if len(small.byKey) != 1 || small.held > small.limit {
		t.Errorf("%d files, %d bytes held past a limit of %d", len(small.byKey), small.held, small.limit)
	}
}

// Processes read on their own goroutines may parse one file at once: one
// parse is kept, counted once, and given to all.
func TestSourceParsedAtOnceIsKeptOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "codec.py")
	if err := os.WriteFile(path, []byte(qualSource), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := hostProcDir(t)
	c := &sourceCache{limit: 1 << 20}
	got := make([]*parsedSource, 8)
	var wg sync.WaitGroup
	for k := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[k] = c.get(proc, path)
		}()
	}
	wg.Wait()
	for _, p := range got[1:] {
		if p != got[0] {
			t.Fatal("goroutines got different parses of one file")
		}
	}
	if len(c.byKey) != 1 || c.held != got[0].keep() {
		t.Errorf("%d parses kept, %d bytes held, want 1 and %d", len(c.byKey), c.held, got[0].keep())
	}
}

// hostProcDir is a /proc/PID of a process whose root is this machine's.
func hostProcDir(t *testing.T) string {
	t.Helper()
	proc := t.TempDir()
	if err := os.Symlink("/", filepath.Join(proc, "root")); err != nil {
		t.Fatal(err)
	}
	return proc
}

// A process cannot lead the agent to its own files: a symlink it planted
// to an absolute path resolves inside the process's root, and a FIFO named
// like a source is not read (nor waited on).
func TestSourceStaysInTheProcessRoot(t *testing.T) {
	host := filepath.Join(t.TempDir(), "host.py")
	if err := os.WriteFile(host, []byte("class Host:\n    def secret(self):\n        pass\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := t.TempDir()
	app := filepath.Join(proc, "root/app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(app, "link.py")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(app, "fifo.py"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &sourceNames{procDir: proc}
	for _, file := range []string{"/app/link.py", "/app/fifo.py", "/app/../../" + host} {
		if got := s.qualName(file, 2, "secret"); got != "" {
			t.Errorf("%s: named %q from a file outside the process's root", file, got)
		}
	}
}
