package python

import (
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pyenvInterpreters are the CPython 3.7 to 3.10 builds pyenv installed
// here, by minor version: the library (its DWARF checks the table) and the
// interpreter.
func pyenvInterpreters(t *testing.T) map[int][2]string {
	t.Helper()
	home, _ := os.UserHomeDir()
	found := map[int][2]string{}
	for minor := 7; minor <= 10; minor++ {
		v := fmt.Sprintf("3.%d", minor)
		libs, _ := filepath.Glob(filepath.Join(home, ".pyenv/versions/"+v+".*/lib/libpython"+v+"*.so.1.0"))
		if len(libs) == 0 {
			continue
		}
		py := filepath.Join(filepath.Dir(filepath.Dir(libs[0])), "bin", "python"+v)
		found[minor] = [2]string{libs[0], py}
	}
	if len(found) == 0 {
		t.Skip("no CPython 3.7-3.10 built by pyenv here")
	}
	return found
}

// A CPython before 3.11 (no Py_Version) is recognised by the API
// functions it exports, with that minor version's offsets; a binary
// exporting a later version's function without an earlier one's is refused.
func TestInspectBefore311(t *testing.T) {
	for minor, files := range pyenvInterpreters(t) {
		f, err := elf.Open(files[0])
		if err != nil {
			t.Fatal(err)
		}
		in, err := Inspect(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", files[0], err)
			continue
		}
		if got, want := in.String(), fmt.Sprintf("CPython 3.%d", minor); got != want {
			t.Errorf("%s inspected as %s, want %s", files[0], got, want)
		}
		if in.Offsets != knownOffsets[[2]int{3, minor}] {
			t.Errorf("%s: not 3.%d's offsets", files[0], minor)
		}
	}
	if _, err := minorBefore311(map[string]uint64{"PyAIter_Check": 1, "PyCode_NewWithPosOnlyArgs": 1}); err == nil {
		t.Error("a binary with 3.10's PyAIter_Check but not 3.9's PyFrame_GetCode was given a version")
	}
}

// lineTableProbe prints, for every code object compiled from a module with
// long functions, comprehensions, lines more than 127 apart and code
// without a line, its first line, line table and CPython's own line for
// each instruction offset: co_lines() from 3.10 on, dis.findlinestarts
// before.
const lineTableProbe = `
import dis, json, sys
src = "def f(a):\n    x = 0\n" + "".join("    x += a * %d\n" % i for i in range(40)) + "\n" * 300 + "    return [y\n            for y in range(x)\n            if y % 3]\n" + \
      "class C:\n    def m(self):\n        try:\n            return 1 / 0\n        except ZeroDivisionError:\n            pass\n        finally:\n            self.z = 2\n" + \
      "async def g():\n    async with a as b:\n        await b\n" + "\n" * 1000 + "def h():\n    return (1,\n" + "\n" * 200 + "            2)\n"
out = []
def walk(co):
    n = len(co.co_code)
    if sys.version_info >= (3, 10):
        table, lines = co.co_linetable, [None] * n
        for start, end, line in co.co_lines():
            for a in range(start, end):
                lines[a] = line
    else:
        table, lines, cur, starts = co.co_lnotab, [], co.co_firstlineno, dict(dis.findlinestarts(co))
        for a in range(n):
            cur = starts.get(a, cur)
            lines.append(cur)
    out.append({"name": co.co_name, "first": co.co_firstlineno, "table": table.hex(), "lines": lines})
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            walk(c)
walk(compile(src, "probe.py", "exec"))
print(json.dumps(out))
`

// The line tables of CPython 3.7 to 3.10 are read as the interpreter
// reads them: for every instruction of every code object of a probe
// module, the line frameAt gives is the one CPython itself gives.
func TestLineTablesBefore311MatchCPython(t *testing.T) {
	for minor, files := range pyenvInterpreters(t) {
		t.Run(fmt.Sprintf("3.%d", minor), func(t *testing.T) {
			raw, err := exec.Command(files[1], "-c", lineTableProbe).Output()
			if err != nil {
				t.Fatalf("%s: %v", files[1], err)
			}
			var codes []struct {
				Name  string
				First int
				Table string
				Lines []*int
			}
			if err := json.Unmarshal(raw, &codes); err != nil {
				t.Fatal(err)
			}
			off := knownOffsets[[2]int{3, minor}]
			checked, far := 0, 0
			for _, c := range codes {
				table, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				ci := &codeInfo{frame: Frame{Function: c.Name, Line: c.First}, lineTable: table}
				step := 2 // every instruction: 2 bytes each from 3.6 on
				for addr := 0; addr < len(c.Lines); addr += step {
					want := c.First // no line: the function's first
					if c.Lines[addr] != nil {
						want = *c.Lines[addr]
					}
					lasti := addr
					if off.Frames == FrameObjects310 {
						lasti = addr / 2
					}
					got := ci.frameAt(0, uint64(uint32(int32(lasti)))|0xdead<<32, &off).Line
					if got != want {
						t.Errorf("%s at byte %d: line %d, CPython says %d", c.Name, addr, got, want)
					}
					checked++
					if want-c.First > 127 {
						far++
					}
				}
			}
			// Before the first instruction (f_lasti -1): the first line.
			ci := &codeInfo{frame: Frame{Line: 7}, lineTable: []byte{2, 1}}
			if got := ci.frameAt(0, uint64(0xffffffff), &off).Line; got != 7 {
				t.Errorf("f_lasti -1 gave line %d, want the first line 7", got)
			}
			t.Logf("%d code objects, %d instructions (%d more than 127 lines below their first) agree", len(codes), checked, far)
			if far == 0 || !strings.Contains(string(raw), `"m"`) {
				t.Error("the probe module did not exercise far lines and a method")
			}
		})
	}
}
