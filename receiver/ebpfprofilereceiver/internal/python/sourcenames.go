package python

import (
	"bytes"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/hotpath-dev/hotpath/internal/fileid"
	"github.com/hotpath-dev/hotpath/internal/procfile"
)

// CPython 3.10 and older have no co_qualname: a code object knows only its
// own name (co_name, "encode"), and the function object that knows the
// qualified one is not reachable from a frame. The qualified name is where
// the function is defined, so it is read from the source, as the compiler
// composes it (PEP 3155): each enclosing class adds "Class.", each
// enclosing function "outer.<locals>.". A def or class counts only where
// the source still defines co_name at co_firstlineno (that line is the
// first decorator's, else the statement's own): a file changed since the
// process loaded it, or anything else, keeps the bare name. A lambda's or
// comprehension's code ("<lambda>", "<listcomp>", …) is named in the def
// or class whose body holds its first line.

// Bounds on the sources read: past them, further files keep bare names
// (or are read again, once the shared cache was emptied).
const (
	maxSourceBytes  = 4 << 20 // a larger file is not read
	maxSourceFiles  = 1024    // co_filenames looked up per process
	maxSourceHeld   = 4 << 20 // bytes of parsed sources kept for all processes
	definitionBytes = 64      // a kept definition's map entry and string headers
	scopeBytes      = 32      // a kept body's line range and string header
)

// definition is a def or class statement: its own name and qualified name.
type definition struct{ name, qualName string }

// parsedSource is what a source's qualified names need: its nested
// definitions by line (the statement's and its first decorator's; a
// module's own functions and classes are named as co_name names them), and
// every def's and class's body.
type parsedSource struct {
	defs   map[int]definition
	scopes []scopeRange
	// ambiguous are the line ranges of logical lines with more than one
	// lambda or comprehension: those keep their bare names.
	ambiguous [][2]int
}

// scopeRange is the lines of a def's or class's body: a lambda or a
// comprehension that starts on one of them is named in it.
type scopeRange struct {
	first, last int
	prefix      string // "outer.<locals>." for a def, "Codec." for a class
}

// anonymous are the names CPython gives the code of lambdas and
// comprehensions (3.11 qualifies them: "outer.<locals>.<listcomp>").
var anonymous = map[string]bool{"<lambda>": true, "<listcomp>": true, "<genexpr>": true, "<dictcomp>": true, "<setcomp>": true}

// sourceNames looks up the parsed sources of one process, by co_filename.
type sourceNames struct {
	procDir string // /proc/PID: the process's root and working directory
	files   map[string]*parsedSource
}

// qualName is the qualified name of the code object co_name that file
// (co_filename) defines at line firstLine, else "".
func (s *sourceNames) qualName(file string, firstLine int, name string) string {
	src, ok := s.files[file]
	if !ok {
		if len(s.files) >= maxSourceFiles {
			return ""
		}
		src = sharedSources.get(s.procDir, s.sourcePath(file))
		if s.files == nil {
			s.files = map[string]*parsedSource{}
		}
		s.files[file] = src
	}
	return src.qualName(firstLine, name)
}

// sourceCache holds parsed sources by file identity (fileid.ID), for all
// processes: the processes of a service (a server's forked workers, each
// read on its own) share one parse of a file. It keeps at most limit
// bytes; full, it is emptied (a service's processes then parse their files
// again, once each).
type sourceCache struct {
	limit int
	mu    sync.Mutex
	byKey map[fileid.ID]*parsedSource
	held  int
}

var sharedSources = sourceCache{limit: maxSourceHeld}

// get is the parsed source at path inside the process of procDir (empty
// when it cannot be read: gone, unreadable, not a regular file, too large,
// or no Python source). It is opened within the process's root
// (procfile.OpenInRoot): a path the process names, or a symlink it
// planted, does not lead to the agent's own files, and a FIFO does not
// block the read.
func (c *sourceCache) get(procDir, path string) *parsedSource {
	empty := &parsedSource{}
	if path == "" {
		return empty
	}
	f, err := procfile.OpenInRoot(procDir, path)
	if err != nil {
		return empty
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxSourceBytes {
		return empty
	}
	key, err := fileid.FromInfo(fi)
	if err != nil {
		return empty
	}
	c.mu.Lock()
	src, ok := c.byKey[key]
	c.mu.Unlock()
	if ok {
		return src
	}
	text := make([]byte, fi.Size())
	if _, err := f.ReadAt(text, 0); err != nil {
		return empty
	}
	parsed := parseSource(text)
	src = &parsed
	size := src.keep()
	if size > c.limit {
		return empty
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if kept, ok := c.byKey[key]; ok {
		return kept // parsed meanwhile for another process
	}
	if c.held+size > c.limit {
		clear(c.byKey)
		c.held = 0
	}
	if c.byKey == nil {
		c.byKey = map[fileid.ID]*parsedSource{}
	}
	c.byKey[key] = src
	c.held += size
	return src
}

// keep drops what a lookup does not need (a module's own definitions:
// co_name is their name) and returns the bytes the rest holds.
func (p *parsedSource) keep() int {
	size := 0
	for line, d := range p.defs {
		if d.qualName == d.name {
			delete(p.defs, line)
			continue
		}
		size += definitionBytes + len(d.name) + len(d.qualName)
	}
	for _, r := range p.scopes {
		size += scopeBytes + len(r.prefix)
	}
	return size + 16*len(p.ambiguous)
}

// qualName is the qualified name of the code object name that starts at
// line, "" when the source does not qualify it.
func (p *parsedSource) qualName(line int, name string) string {
	if anonymous[name] {
		return p.anonymousQualName(line, name)
	}
	if d, ok := p.defs[line]; ok && d.name == name {
		return d.qualName
	}
	return ""
}

// anonymousQualName is the qualified name of a lambda's or comprehension's
// code (name) that starts at line: in the innermost body holding the line,
// "" at module level (its name is its own).
func (p *parsedSource) anonymousQualName(line int, name string) string {
	for _, r := range p.ambiguous {
		if r[0] <= line && line <= r[1] {
			return ""
		}
	}
	best := -1
	for k, r := range p.scopes {
		// Bodies nest, and an inner one comes after its outer one.
		if r.first <= line && line <= r.last && (best < 0 || r.first >= p.scopes[best].first) {
			best = k
		}
	}
	if best < 0 {
		return ""
	}
	return p.scopes[best].prefix + name
}

// sourcePath is file as the process opened it, inside its root (a
// container's): relative to its working directory when not absolute (3.8
// keeps a script's name as given on the command line). "" for what is no
// Python source file: "<frozen importlib._bootstrap>", "<string>", a
// module from a zip archive.
func (s *sourceNames) sourcePath(file string) string {
	if !strings.HasSuffix(file, ".py") || s.procDir == "" {
		return ""
	}
	return procfile.InProcess(s.procDir, file)
}

// parseSource finds every def, async def and class statement of a Python
// source, by line, and each one's body. It follows the tokenizer as far as
// blocks need: logical lines (brackets and backslashes join physical
// lines, strings may span them), comments, and indentation (tabs to
// multiples of 8).
func parseSource(src []byte) parsedSource {
	type scope struct {
		indent int
		class  bool
		qual   string
		body   int // index in scopes
	}
	p := parsedSource{defs: map[int]definition{}}
	var (
		stack      []scope
		sc         lineScanner
		logical    int // the first line of the logical line scanned
		decorator  int // line of the first decorator of the next definition
		decoIndent int
		header     = -1 // index in scopes of the definition whose header goes on
	)
	lines := bytes.Split(src, []byte("\n"))
	for i, text := range lines {
		line := i + 1
		if !sc.continues() {
			logical, sc.anonymous = line, 0
			indent, stmt := indentation(text)
			if len(stmt) > 0 && stmt[0] != '#' {
				for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
					p.scopes[stack[len(stack)-1].body].last = line - 1
					stack = stack[:len(stack)-1]
				}
				switch name, class := definedName(stmt); {
				case stmt[0] == '@':
					if decorator == 0 {
						decorator, decoIndent = line, indent
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
					p.defs[line] = d
					if decorator != 0 && decoIndent == indent {
						p.defs[decorator] = d
					}
					decorator = 0
					prefix := qual + ".<locals>."
					if class {
						prefix = qual + "."
					}
					header = len(p.scopes)
					p.scopes = append(p.scopes, scopeRange{last: len(lines), prefix: prefix})
					stack = append(stack, scope{indent: indent, class: class, qual: qual, body: header})
				default:
					decorator = 0
				}
			}
		}
		sc.scan(text)
		if sc.continues() {
			continue
		}
		if header >= 0 {
			// The header ends on this line: the body starts on the next
			// one, or on this one after the colon (def f(): return …).
			p.scopes[header].first = line + 1
			if sc.last != ':' {
				p.scopes[header].first = line
			}
			header = -1
		}
		if sc.anonymous > 1 {
			// One may be inside another ([[…] for …], a lambda in a
			// comprehension): its name would need the other's.
			p.ambiguous = append(p.ambiguous, [2]int{logical, line})
		}
	}
	if header >= 0 {
		// A header the file ends in (an unclosed bracket): no body.
		p.scopes[header].first = len(lines) + 1
	}
	return p
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

// lineScanner follows a source's physical lines as far as logical lines
// need: an open string, open brackets, a backslash at the end of a line.
type lineScanner struct {
	quote  string // the open string's delimiter: a quote, or three
	depth  int    // open brackets
	joined bool   // the line continues on the next one (a backslash)
	last   byte   // the last character outside strings and comments
	// anonymous counts the lambdas and comprehensions ("for" inside
	// brackets) of the logical line.
	anonymous int
}

// continues reports whether the logical line goes on past the line scanned.
func (sc *lineScanner) continues() bool { return sc.quote != "" || sc.depth > 0 || sc.joined }

// scan follows one physical line.
func (sc *lineScanner) scan(text []byte) {
	sc.joined = false
	for k := 0; k < len(text); k++ {
		c := text[k]
		if sc.quote != "" {
			switch {
			case c == '\\':
				if k == len(text)-1 {
					sc.joined = true
					return
				}
				k++
			case c == sc.quote[0] && bytes.HasPrefix(text[k:], []byte(sc.quote)):
				k += len(sc.quote) - 1
				sc.quote = ""
			}
			continue
		}
		switch c {
		case '#':
			return
		case ' ', '\t', '\f', '\r':
			continue
		case '\'', '"':
			sc.quote = string(c)
			if k+2 < len(text) && text[k+1] == c && text[k+2] == c {
				sc.quote = strings.Repeat(string(c), 3)
				k += 2
			}
		case '(', '[', '{':
			sc.depth++
		case ')', ']', '}':
			sc.depth = max(sc.depth-1, 0)
		case '\\':
			if k == len(text)-1 {
				sc.joined = true
				return
			}
		default:
			if c == '_' || c >= 0x80 || unicode.IsLetter(rune(c)) {
				word, _ := nextWord(text[k:])
				if word == "lambda" || (word == "for" && sc.depth > 0) {
					sc.anonymous++
				}
				if len(word) > 0 {
					k += len(word) - 1
				}
			} else if c >= '0' && c <= '9' {
				// A number's letters (0x1f, 1e5, 2j) are no identifier.
				for k+1 < len(text) && (text[k+1] == '_' || text[k+1] == '.' || unicode.IsLetter(rune(text[k+1])) || text[k+1] >= '0' && text[k+1] <= '9') {
					k++
				}
			}
		}
		sc.last = c
	}
	if len(sc.quote) == 1 {
		// A one-quote string ends with its line (an error CPython reports).
		sc.quote = ""
	}
}
