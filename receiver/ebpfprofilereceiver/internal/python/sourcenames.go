package python

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"unicode"
	"unicode/utf8"
)

// CPython 3.10 and older have no co_qualname: a code object knows only its
// own name (co_name, "encode"), and the function object that knows the
// qualified one is not reachable from a frame. The qualified name is where
// the function is defined, so it is read from the source, as the compiler
// composes it (PEP 3155): each enclosing class adds "Class.", each
// enclosing function "outer.<locals>.". A definition counts only where the
// source still defines co_name at co_firstlineno (that line is the first
// decorator's, else the def's or class's own): a file changed since the
// process loaded it, or anything else, keeps the bare name.

// Bounds on the sources read for one process: past them, further files
// keep bare names.
const (
	maxSourceBytes  = 4 << 20 // a larger file is not read
	maxSourceFiles  = 1024    // files read
	maxSourceHeld   = 1 << 20 // bytes of the definitions kept, over all files
	definitionBytes = 64      // a kept definition's map entry and string headers
)

// definition is a def or class statement: its own name and qualified name.
type definition struct{ name, qualName string }

// sourceNames caches, per source file of one process, its nested
// definitions by line (the statement's line and its first decorator's): a
// module's own functions and classes are named as co_name names them.
type sourceNames struct {
	procDir string // /proc/PID: the process's root and working directory
	files   map[string]map[int]definition
	held    int // bytes of the definitions kept
}

// qualName is co_name's qualified name where file (co_filename) defines
// it at line firstLine, else "".
func (s *sourceNames) qualName(file string, firstLine int, name string) string {
	defs, ok := s.files[file]
	if !ok {
		if len(s.files) >= maxSourceFiles || s.held >= maxSourceHeld {
			return ""
		}
		defs = readDefinitions(s.sourcePath(file))
		for line, d := range defs {
			if d.qualName == d.name {
				delete(defs, line)
				continue
			}
			s.held += definitionBytes + len(d.name) + len(d.qualName)
		}
		if s.files == nil {
			s.files = map[string]map[int]definition{}
		}
		s.files[file] = defs
	}
	if d, ok := defs[firstLine]; ok && d.name == name {
		return d.qualName
	}
	return ""
}

// sourcePath is file as the process opened it: in its own root (a
// container's), relative to its working directory when not absolute (3.8
// keeps a script's name as given on the command line). "" for what is no
// Python source file: "<frozen importlib._bootstrap>", "<string>", a
// module from a zip archive.
func (s *sourceNames) sourcePath(file string) string {
	if !strings.HasSuffix(file, ".py") || s.procDir == "" {
		return ""
	}
	if filepath.IsAbs(file) {
		return filepath.Join(s.procDir, "root", file)
	}
	return filepath.Join(s.procDir, "cwd", file)
}

// readDefinitions reads the definitions of the Python source at path (nil
// when it cannot: gone, unreadable, not a regular file, too large).
func readDefinitions(path string) map[int]definition {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxSourceBytes {
		return nil
	}
	src := make([]byte, fi.Size())
	if _, err := f.ReadAt(src, 0); err != nil {
		return nil
	}
	return definitions(src)
}

// definitions finds every def, async def and class statement of a Python
// source, by line. It follows the tokenizer as far as blocks need: logical
// lines (brackets and backslashes join physical lines, strings may span
// them), comments, and indentation (tabs to multiples of 8).
func definitions(src []byte) map[int]definition {
	type scope struct {
		indent int
		class  bool
		qual   string
	}
	defs := map[int]definition{}
	var (
		stack      []scope
		depth      int    // open brackets
		quote      string // the open string's delimiter: ', ", ''' or """
		joined     bool   // the line continues the previous one (a backslash)
		decorator  int    // line of the first decorator of the next definition
		decoIndent int
	)
	for i, text := range bytes.Split(src, []byte("\n")) {
		if quote == "" && depth == 0 && !joined {
			indent, stmt := indentation(text)
			if len(stmt) > 0 && stmt[0] != '#' {
				for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
					stack = stack[:len(stack)-1]
				}
				switch name, class := definedName(stmt); {
				case stmt[0] == '@':
					if decorator == 0 {
						decorator, decoIndent = i+1, indent
					}
				case name != "":
					qual := name
					if n := len(stack); n > 0 {
						if stack[n-1].class {
							qual = stack[n-1].qual + "." + name
						} else {
							qual = stack[n-1].qual + ".<locals>." + name
						}
					}
					d := definition{name: name, qualName: qual}
					defs[i+1] = d
					if decorator != 0 && decoIndent == indent {
						defs[decorator] = d
					}
					decorator = 0
					stack = append(stack, scope{indent: indent, class: class, qual: qual})
				default:
					decorator = 0
				}
			}
		}
		quote, depth, joined = scanLine(text, quote, depth)
	}
	return defs
}

// indentation is the line's indentation (a tab to the next multiple of 8,
// as CPython's tokenizer counts it) and the rest of the line.
func indentation(text []byte) (int, []byte) {
	n := 0
	for k, c := range text {
		switch c {
		case ' ':
			n++
		case '\t':
			n = n/8*8 + 8
		case '\f':
			n = 0
		case '\r':
		default:
			return n, text[k:]
		}
	}
	return n, nil
}

// definedName is the name a def, async def or class statement defines
// ("" for any other statement), and whether it is a class.
func definedName(stmt []byte) (string, bool) {
	word, rest := nextWord(stmt)
	if word == "async" {
		word, rest = nextWord(rest)
		if word != "def" {
			return "", false
		}
	}
	if word != "def" && word != "class" {
		return "", false
	}
	name, _ := nextWord(rest)
	return name, word == "class"
}

// nextWord is the identifier at the start of b (after blanks) and what
// follows it.
func nextWord(b []byte) (string, []byte) {
	b = bytes.TrimLeft(b, " \t\f")
	end := 0
	for end < len(b) {
		r, size := utf8.DecodeRune(b[end:])
		if r != '_' && !unicode.IsLetter(r) && (end == 0 || !unicode.IsDigit(r)) {
			break
		}
		end += size
	}
	return string(b[:end]), b[end:]
}

// scanLine follows one physical line from the state the previous line left
// (an open string's delimiter, open brackets) and returns the state at its
// end, and whether a backslash joins it to the next line.
func scanLine(text []byte, quote string, depth int) (string, int, bool) {
	for k := 0; k < len(text); k++ {
		c := text[k]
		if quote != "" {
			switch {
			case c == '\\':
				if k == len(text)-1 {
					return quote, depth, true
				}
				k++
			case c == quote[0] && bytes.HasPrefix(text[k:], []byte(quote)):
				k += len(quote) - 1
				quote = ""
			}
			continue
		}
		switch c {
		case '#':
			return "", depth, false
		case '\'', '"':
			quote = string(c)
			if k+2 < len(text) && text[k+1] == c && text[k+2] == c {
				quote = strings.Repeat(string(c), 3)
				k += 2
			}
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth = max(depth-1, 0)
		case '\\':
			if k == len(text)-1 {
				return "", depth, true
			}
		}
	}
	if len(quote) == 1 {
		// A one-quote string ends with its line (an error CPython reports).
		quote = ""
	}
	return quote, depth, false
}
