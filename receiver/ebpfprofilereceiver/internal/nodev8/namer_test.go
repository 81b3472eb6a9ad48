package nodev8

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// The functions the test names, in main.js unless file says helper.js.
// marker is a piece of the line the function starts on.
var namedFunctions = []struct {
	expr, name, file, marker string
}{
	{"hotA", "hotA", "main.js", "function hotA("},
	{"Foo.prototype.bar", "bar", "main.js", "bar() {"},
	{"arrow", "arrow", "main.js", "const arrow ="},
	{"anon", "(anonymous)", "main.js", "register(function () {"},
	{"obj.lazy", "obj.lazy", "main.js", "obj.lazy ="},       // never called: UncompiledData
	{"obj.called", "obj.called", "main.js", "obj.called ="}, // compiled: ScopeInfo's inferred name
	{"manyLocals", "manyLocals", "main.js", "function manyLocals("},
	{"inner", "inner", "main.js", "function inner("},
	{"bigLocals", "bigLocals", "main.js", "function bigLocals("},
	{"bigArrow", "(anonymous)", "main.js", "return () =>"},
	{"helper.helperFn", "helperFn", "helper.js", "function helperFn("},
	{"helper.later", "later", "helper.js", "function later("},
	{"Array.prototype.map", "map", "", ""}, // a builtin: no script
	{"debugged", "debugged", "main.js", "function debugged("},
	// Node's own modules: the line is not checked (their sources are
	// external strings, read only when V8 made the line table).
	{"require('path').join", "join", "node:path", ""},
}

// How some of namedFunctions are held, so that each way of reading is
// seen: not compiled (UncompiledData), compiled (a ScopeInfo), and with a
// breakpoint (the script through a DebugInfo).
var heldAs = map[string]string{
	"obj.lazy":   "uncompiled",
	"hotA":       "compiled",
	"obj.called": "compiled",
	"bigLocals":  "compiled",
	"debugged":   "debugged",
}

// The functions whose instance type must be a JSFunction's, and one that
// must not (a bound function is a JSBoundFunction).
var jsFunctionExprs = []string{
	"hotA", "Foo", "class extends Foo {}", "asyncFn", "genFn", "arrow", "Array.prototype.map",
	"Promise", "Array", "RegExp", "Object", "Function", "require",
	"Uint8Array", "Int8Array", "Uint16Array", "Int16Array", "Uint32Array", "Int32Array",
	"Float32Array", "Float64Array", "Uint8ClampedArray", "BigUint64Array", "BigInt64Array",
}

const boundFunctionExpr = "hotA.bind(null)"

func mainJS(helperPath string) string {
	var b strings.Builder
	b.WriteString(`'use strict';
const helper = require(` + strconv.Quote(helperPath) + `);
function hotA(x) {
  return x + 1;
}
class Foo {
  bar() {
    return 1;
  }
}
const arrow = (a) => a * 2;
function register(f) { return f; }
const anon = register(function () {
  return 4;
});
const obj = {};
obj.lazy = function () { return 6; };
obj.called = function () { return 7; };
async function asyncFn() {}
function* genFn() {}
function manyLocals() {
  let a1 = 1, a2 = 2, a3 = 3, a4 = 4, a5 = 5, a6 = 6, a7 = 7, a8 = 8;
  return function inner() { return a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8; };
}
// Past 75 context locals V8 keeps their names in a hash table.
function bigLocals() {
`)
	var sum []string
	for i := range 80 {
		fmt.Fprintf(&b, "  let b%d = %d;\n", i, i)
		sum = append(sum, fmt.Sprintf("b%d", i))
	}
	b.WriteString("  return () => " + strings.Join(sum, " + ") + ";\n}\n")
	b.WriteString(`function debugged(x) {
  return x + 1; // a breakpoint
}
// A breakpoint gives debugged a DebugInfo, which then holds its script.
const lines = require('fs').readFileSync(__filename, 'utf8').split('\n');
const session = new (require('inspector').Session)();
session.connect();
session.post('Debugger.enable', () => {});
session.post('Debugger.setBreakpointByUrl', {
  lineNumber: lines.findIndex((l) => l.includes('// a ' + 'breakpoint')),
  url: require('url').pathToFileURL(__filename).href,
}, (err) => { if (err) throw err; });
hotA(1); new Foo().bar(); arrow(2); anon(); obj.called(); helper.helperFn(1);
const inner = manyLocals(); inner();
const bigArrow = bigLocals(); bigArrow();
`)
	var all []string
	for _, f := range namedFunctions {
		all = append(all, f.expr)
	}
	all = append(all, jsFunctionExprs...)
	all = append(all, boundFunctionExpr)
	b.WriteString("for (const f of [" + strings.Join(all, ", ") + "]) %DebugPrint(f);\n")
	b.WriteString("console.log('ready');\nsetInterval(() => {}, 1 << 30);\n")
	return b.String()
}

const helperJS = `'use strict';

exports.helperFn = function helperFn(n) {
  return n * 3;
};
// Not all Latin-1 (→), so V8 keeps this source in two bytes a character.
exports.later =
  function later() { return 0; };
`

// printedObject is one %DebugPrint of a function: its address, its map's,
// and its SharedFunctionInfo's (tagged, as V8 prints them).
type printedObject struct {
	addr, mapAddr, sfi uint64
}

// startNode runs node on a main.js written in a temporary directory and
// returns its pid, the scripts' paths and what it printed of each
// function, once it printed them all.
func startNode(t *testing.T) (pid int, mainPath, helperPath string, printed []printedObject) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed (make deps installs nodejs): %v", err)
	}
	dir := t.TempDir()
	mainPath = filepath.Join(dir, "main.js")
	helperPath = filepath.Join(dir, "helper.js")
	if err := os.WriteFile(helperPath, []byte(helperJS), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mainPath, []byte(mainJS(helperPath)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, "--allow-natives-syntax", mainPath)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	want := len(namedFunctions) + len(jsFunctionExprs) + 1
	type result struct {
		printed []printedObject
		err     error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				if len(r.printed) != want {
					r.err = fmt.Errorf("node printed %d functions, want %d", len(r.printed), want)
				}
				done <- r
				return
			case strings.HasPrefix(line, "DebugPrint: "):
				addr, err := hexAfter(line, "DebugPrint: ")
				if err != nil {
					r.err = err
				}
				r.printed = append(r.printed, printedObject{addr: addr})
			case len(r.printed) > 0 && strings.HasPrefix(line, " - map: ") && r.printed[len(r.printed)-1].mapAddr == 0:
				r.printed[len(r.printed)-1].mapAddr, r.err = hexAfter(line, " - map: ")
			case len(r.printed) > 0 && strings.HasPrefix(line, " - shared_info: ") && r.printed[len(r.printed)-1].sfi == 0:
				r.printed[len(r.printed)-1].sfi, r.err = hexAfter(line, " - shared_info: ")
			}
			if r.err != nil {
				break
			}
		}
		if r.err == nil {
			r.err = fmt.Errorf("node's output ended before it was ready: %v", sc.Err())
		}
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return cmd.Process.Pid, mainPath, helperPath, r.printed
	case <-time.After(time.Minute):
		t.Fatal("node did not print its functions within a minute")
	}
	return
}

func hexAfter(line, prefix string) (uint64, error) {
	s := strings.TrimPrefix(line, prefix)
	if i := strings.IndexAny(s, ": "); i >= 0 {
		s = s[:i]
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		return 0, fmt.Errorf("line %q: %w", line, err)
	}
	return v, nil
}

// lineOfMarker returns the 1-based line of source holding marker.
func lineOfMarker(t *testing.T, source, marker string) int {
	t.Helper()
	for i, line := range strings.Split(source, "\n") {
		if strings.Contains(line, marker) {
			return i + 1
		}
	}
	t.Fatalf("no line holds %q", marker)
	return 0
}

func nodeLayout(t *testing.T) *Layout {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed (make deps installs nodejs): %v", err)
	}
	if node, err = filepath.EvalSymlinks(node); err != nil {
		t.Fatal(err)
	}
	l, err := ReadLayout(node)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestFunctionNamesNodesFunctions: the functions of a running node, found
// from the SharedFunctionInfo addresses it printed, are named with their
// name, script and first line. Node is a child of the test, so its memory
// is readable without privileges (same user, and Yama lets a parent read
// its descendants).
func TestFunctionNamesNodesFunctions(t *testing.T) {
	l := nodeLayout(t)
	pid, mainPath, helperPath, printed := startNode(t)
	n, err := Open("/proc", pid, l)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	mainSource, helperSource := mainJS(helperPath), helperJS
	for i, f := range namedFunctions {
		p := printed[i]
		if p.sfi&heapObjectTagMask != heapObjectTag {
			t.Fatalf("%s: V8 printed SharedFunctionInfo %#x, not a tagged pointer", f.expr, p.sfi)
		}
		want := Function{Name: f.name}
		switch f.file {
		case "main.js":
			want.File, want.Line = mainPath, lineOfMarker(t, mainSource, f.marker)
		case "helper.js":
			want.File, want.Line = helperPath, lineOfMarker(t, helperSource, f.marker)
		default:
			want.File = f.file
		}
		if kind, ok := heldAs[f.expr]; ok {
			if kind == "debugged" && l.debugInfoType == 0 {
				kind = "compiled" // V8 12.1 on: no DebugInfo in the function (node 22 on)
			}
			if got := heldAsIn(t, n, p.sfi); got != kind {
				t.Errorf("%s is held as %s, want %s: the test does not read what it means to", f.expr, got, kind)
			}
		}
		// Twice: the second from the script cache.
		for range 2 {
			got, err := n.Function(p.sfi)
			if f.marker == "" && f.file != "" {
				t.Logf("%s: %+v", f.expr, got)
				got.Line = 0
			}
			if err != nil || got != want {
				t.Errorf("%s (sfi %#x): %+v %v, want %+v", f.expr, p.sfi, got, err, want)
			}
		}
	}

	// What is not a SharedFunctionInfo is refused.
	for _, bad := range []struct {
		what string
		ptr  uint64
	}{
		{"a JSFunction", printed[0].addr},
		{"a Map", printed[0].mapAddr},
		{"the SharedFunctionInfo untagged", printed[0].sfi &^ heapObjectTagMask},
		{"the SharedFunctionInfo's second word", printed[0].sfi + taggedSize},
		{"a Smi", 42 << smiValueShift},
		{"null", 0},
		{"unmapped memory", 0x1001},
		{"a kernel address", 0xffffffff81000001},
	} {
		if got, err := n.Function(bad.ptr); err == nil {
			t.Errorf("%s (%#x): named %+v, want an error", bad.what, bad.ptr, got)
		}
	}
}

// TestJSFunctionTypeRange: every kind of function node made (plain,
// class constructor, async, generator, arrow, builtins, constructors) has
// an instance type within the layout's JSFunction range, and the kernel's
// check keeps a bound function out.
func TestJSFunctionTypeRange(t *testing.T) {
	l := nodeLayout(t)
	pid, _, _, printed := startNode(t)
	n, err := Open("/proc", pid, l)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	typeOf := func(ptr uint64) uint16 {
		t.Helper()
		_, typ, err := n.typeOf(ptr)
		if err != nil {
			t.Fatal(err)
		}
		return typ
	}
	functions := printed[len(namedFunctions):]
	for i, expr := range jsFunctionExprs {
		typ := typeOf(functions[i].addr)
		if typ < l.FirstJSFunctionType || typ > l.LastJSFunctionType {
			t.Errorf("%s: instance type %d, not in the JSFunction range [%d, %d]", expr, typ, l.FirstJSFunctionType, l.LastJSFunctionType)
		}
		// What the kernel reads: the JSFunction's shared field.
		shared, err := n.word(functions[i].addr&^heapObjectTagMask + uint64(l.JSFunctionShared))
		if err != nil || shared != functions[i].sfi {
			t.Errorf("%s: JSFunction::shared is %#x %v, V8 printed %#x", expr, shared, err, functions[i].sfi)
		}
	}
	if typ := typeOf(functions[len(jsFunctionExprs)].addr); typ >= l.FirstJSFunctionType && typ <= l.LastJSFunctionType {
		t.Errorf("%s: instance type %d, in the JSFunction range [%d, %d]", boundFunctionExpr, typ, l.FirstJSFunctionType, l.LastJSFunctionType)
	}
}

func TestReadLayout(t *testing.T) {
	l := nodeLayout(t)
	if l.FPFunction >= 0 || l.FPContext >= 0 || l.FPFunction == l.FPContext {
		t.Errorf("frame offsets: function %d, context %d; want both negative and apart", l.FPFunction, l.FPContext)
	}
	if l.FPFunction%taggedSize != 0 || l.FPContext%taggedSize != 0 {
		t.Errorf("frame offsets: function %d, context %d; want whole words", l.FPFunction, l.FPContext)
	}
	if l.MapInstanceType == 0 || l.JSFunctionShared == 0 || l.JSFunctionShared%taggedSize != 0 {
		t.Errorf("offsets: Map::instance_type %d, JSFunction::shared %d", l.MapInstanceType, l.JSFunctionShared)
	}
	if l.HeapObjectMap != 0 {
		t.Errorf("HeapObject::map at %d, want 0", l.HeapObjectMap)
	}
	if l.FirstJSFunctionType == 0 || l.FirstJSFunctionType > l.LastJSFunctionType || l.LastJSFunctionType-l.FirstJSFunctionType > 32 {
		t.Errorf("JSFunction types [%d, %d]", l.FirstJSFunctionType, l.LastJSFunctionType)
	}
	if l.SharedFunctionInfoType == 0 || (l.SharedFunctionInfoType >= l.FirstJSFunctionType && l.SharedFunctionInfoType <= l.LastJSFunctionType) {
		t.Errorf("SharedFunctionInfo type %d, JSFunction types [%d, %d]", l.SharedFunctionInfoType, l.FirstJSFunctionType, l.LastJSFunctionType)
	}

	if _, err := ReadLayout("/bin/true"); !errors.Is(err, ErrNotV8) {
		t.Errorf("ReadLayout(/bin/true): %v, want ErrNotV8", err)
	}
	if _, err := ReadLayout(filepath.Join(t.TempDir(), "none")); err == nil || errors.Is(err, ErrNotV8) {
		t.Errorf("ReadLayout of no file: %v, want an error other than ErrNotV8", err)
	}
}

// heldAsIn says how V8 holds the function at sfi: "debugged" (its
// script through a DebugInfo), "uncompiled" (UncompiledData), "compiled"
// (a ScopeInfo) or "other".
func heldAsIn(t *testing.T, n *Namer, sfi uint64) string {
	t.Helper()
	l := n.l
	field := func(offset uint32) uint16 {
		t.Helper()
		ptr, err := n.word(sfi&^heapObjectTagMask + uint64(offset))
		if err != nil {
			t.Fatal(err)
		}
		if !isHeapObject(ptr) {
			return 0
		}
		_, typ, err := n.typeOf(ptr)
		if err != nil {
			t.Fatal(err)
		}
		return typ
	}
	switch {
	case field(l.sfiScriptOrDebugInfo) == l.debugInfoType:
		return "debugged"
	case l.isUncompiledData(field(l.sfiFunctionData)):
		return "uncompiled"
	case field(l.sfiNameOrScopeInfo) == l.scopeInfoType:
		return "compiled"
	}
	return "other"
}

// TestLineEndsFromSource: the line ends computed from a script's source
// (one byte and two bytes a character) are the source's, and the same as
// V8's own table when V8 made one.
func TestLineEndsFromSource(t *testing.T) {
	l := nodeLayout(t)
	pid, _, helperPath, printed := startNode(t)
	n, err := Open("/proc", pid, l)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for _, c := range []struct {
		expr, source string
		twoByte      bool
	}{
		{"hotA", mainJS(helperPath), false},
		{"helper.later", helperJS, true},
	} {
		var sfi uint64
		for i, f := range namedFunctions {
			if f.expr == c.expr {
				sfi = printed[i].sfi
			}
		}
		scriptField, err := n.word(sfi&^heapObjectTagMask + uint64(l.sfiScriptOrDebugInfo))
		if err != nil {
			t.Fatal(err)
		}
		script, err := n.object(scriptField, l.scriptType, "Script")
		if err != nil {
			t.Fatal(err)
		}
		source, err := n.word(script + uint64(l.scriptSource))
		if err != nil {
			t.Fatal(err)
		}
		if _, typ, err := n.typeOf(source); err != nil || typ&l.stringRepresentationMask != l.seqStringTag ||
			(typ&l.stringEncodingMask == l.twoByteStringTag) != c.twoByte {
			t.Errorf("%s: source of type %#x %v, want a sequential string, two bytes a character: %v", c.expr, typ, err, c.twoByte)
		}
		// Node wraps a CommonJS module's source in no text of its own
		// (it compiles it as a function body), so positions are the file's.
		var want []int32
		pos := int32(0)
		for _, r := range c.source {
			if r == '\n' {
				want = append(want, pos)
			}
			pos += int32(len(utf16.Encode([]rune{r})))
		}
		want = append(want, pos)
		got := n.sourceLineEnds(source)
		if !slices.Equal(got, want) {
			t.Errorf("%s: line ends from the source %v, want %v", c.expr, got, want)
		}
		lineEnds, err := n.word(script + uint64(l.scriptLineEnds))
		if err != nil {
			t.Fatal(err)
		}
		if fromV8 := n.lineEnds(lineEnds); fromV8 != nil && !slices.Equal(fromV8, want) {
			t.Errorf("%s: V8's line ends %v, want %v", c.expr, fromV8, want)
		} else {
			t.Logf("%s: V8 made a line table: %v", c.expr, fromV8 != nil)
		}
	}
}

func TestLineOf(t *testing.T) {
	ends := []int32{3, 7, 7, 12}
	for _, c := range []struct{ pos, want int }{
		{0, 1}, {3, 1}, {4, 2}, {7, 2}, {8, 4}, {12, 4}, {13, 0},
	} {
		if got := lineOf(ends, c.pos); got != c.want {
			t.Errorf("lineOf(%v, %d) = %d, want %d", ends, c.pos, got, c.want)
		}
	}
	if got := lineOf(nil, 0); got != 0 {
		t.Errorf("lineOf(nil, 0) = %d, want 0", got)
	}
}

// olderMetadata makes the symbols of the node under test look like those
// of a V8 before 11.3, whose checks TestLayoutRefuses exercises: no
// JSFunction range exported, and the class hierarchy (ScopeInfo a
// HeapObject) still listed.
func olderMetadata(v map[string]int64) {
	delete(v, "v8dbg_FirstJSFunctionType")
	delete(v, "v8dbg_LastJSFunctionType")
	v["v8dbg_parent_ScopeInfo__HeapObject"] = 0
}

// TestLayoutRefuses: builds this package does not read are refused, with
// an error that says why.
func TestLayoutRefuses(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed (make deps installs nodejs): %v", err)
	}
	f, err := elf.Open(node)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, version, err := readV8dbg(f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := layoutOf(d, version); err != nil {
		t.Fatalf("node's own symbols: %v", err)
	}
	for _, c := range []struct {
		what    string
		change  func(values map[string]int64)
		version uint32
		want    string
	}{
		{"pointer compression", func(v map[string]int64) { v["v8dbg_TaggedSize"] = 4; v["v8dbg_SmiShiftSize"] = 0 }, version, "pointer compression"},
		{"31-bit Smis", func(v map[string]int64) { v["v8dbg_SmiShiftSize"] = 0 }, version, "31-bit Smis"},
		{"a missing symbol", func(v map[string]int64) { delete(v, "v8dbg_off_fp_function") }, version, "v8dbg_off_fp_function"},
		{"no JSFunction range nor version", olderMetadata, 0, "JSFunction"},
		{"V8 9.4", olderMetadata, v8Version(9, 4, 146), "before 9.6"},
		{"V8 9.0", func(v map[string]int64) { olderMetadata(v); delete(v, "v8dbg_parent_ScopeInfo__HeapObject") }, v8Version(9, 0, 257), "before 9.1"},
	} {
		values := maps.Clone(d.values)
		c.change(values)
		if _, err := layoutOf(v8dbg{values: values}, c.version); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.what, err, c.want)
		}
	}
}
