package perfmap

import (
	"strconv"
	"strings"
)

// Frame is a perf-map name split into what a profile shows: the function
// and, where the runtime wrote them, its source file and line.
type Frame struct {
	Function string
	File     string
	Line     int
}

// Describe splits the names runtimes are known to write; any other name is
// the function as written.
//
//   - V8 (Node.js): "JS:*hotA /srv/app.js:12:3", the character after "JS:"
//     being the tier ("~" interpreted, "^" Sparkplug, "+" Maglev, "*"
//     TurboFan), followed in newer V8 (node 24) by "'" for code compiled
//     context-specialized ("JS:*'hotA", "JS:+'hotA");
//     older V8 writes "LazyCompile:" or "Function:". The tiers of one
//     function become one function, as in a Go or C profile.
//   - CPython ≥ 3.12 -X perf: "py::hotA:/srv/app.py".
func Describe(name string) Frame {
	for _, prefix := range []string{"JS:", "LazyCompile:", "Function:"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok {
			return describeV8(rest)
		}
	}
	if rest, ok := strings.CutPrefix(name, "py::"); ok {
		// The function's name cannot hold ':', the path may.
		if fn, file, ok := strings.Cut(rest, ":"); ok && fn != "" {
			return Frame{Function: fn, File: file}
		}
	}
	return Frame{Function: name}
}

func describeV8(rest string) Frame {
	if rest != "" && strings.ContainsRune("~^+*", rune(rest[0])) {
		rest = rest[1:]
		rest = strings.TrimPrefix(rest, "'")
	}
	fn, loc, _ := strings.Cut(rest, " ")
	if fn == "" {
		fn = "(anonymous)"
	}
	f := Frame{Function: fn}
	// loc is "file:line:column"; the file may hold ':' (URLs).
	if i := strings.LastIndexByte(loc, ':'); i > 0 {
		if j := strings.LastIndexByte(loc[:i], ':'); j > 0 {
			if line, err := strconv.Atoi(loc[j+1 : i]); err == nil && line > 0 {
				f.File, f.Line = loc[:j], line
				return f
			}
		}
	}
	f.File = loc
	return f
}
