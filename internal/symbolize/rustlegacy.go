package symbolize

import (
	"strconv"
	"strings"
)

// rustLegacy demangles a name in Rust's legacy mangling: C++'s nested name
// (_ZN, length-prefixed identifiers, E) whose last identifier is the
// crate's hash (h and 16 hex digits), with punctuation escaped ($LT$ for
// <, .. for ::). ok is false for any other name, or one that does not
// parse; the hash is left out, as rustc-demangle's alternate form does.
//
// The demangling library handles C++ and Rust's v0 names, but reads a
// legacy identifier that starts with an underscore as v0's optional
// separator and drops it: std::sys::backtrace::__rust_begin_short_backtrace,
// at the root of every Rust thread's stack, came out with one underscore.
// This follows rustc-demangle's legacy.rs instead.
func rustLegacy(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "_ZN")
	if !ok {
		return "", false
	}
	var parts []string
	for !strings.HasPrefix(rest, "E") {
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		size, err := strconv.Atoi(rest[:n])
		if n == 0 || err != nil || size <= 0 || size > len(rest)-n {
			return "", false
		}
		parts = append(parts, rest[n:n+size])
		rest = rest[n+size:]
	}
	// What follows E is a suffix LLVM or the linker added (".llvm.1234"):
	// the same function.
	if rest = rest[1:]; rest != "" && rest[0] != '.' {
		return "", false
	}
	if len(parts) < 2 || !isRustHash(parts[len(parts)-1]) {
		return "", false
	}
	var b strings.Builder
	for i, p := range parts[:len(parts)-1] {
		if i > 0 {
			b.WriteString("::")
		}
		if !unescapeRustIdent(&b, p) {
			return "", false
		}
	}
	return b.String(), true
}

func isRustHash(s string) bool {
	if len(s) != 17 || s[0] != 'h' {
		return false
	}
	for _, c := range s[1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// rustEscapes are the $…$ escapes of legacy names that stand for one
// character each.
var rustEscapes = map[string]string{
	"SP": "@", "BP": "*", "RF": "&", "LT": "<", "GT": ">", "LP": "(", "RP": ")", "C": ",",
}

// unescapeRustIdent writes identifier p with its escapes undone: "$LT$",
// "$u7b$" (a character by its code), ".." (::) and "." (.). A leading "_"
// before an escape only keeps the identifier from starting with "$".
func unescapeRustIdent(b *strings.Builder, p string) bool {
	if strings.HasPrefix(p, "_$") {
		p = p[1:]
	}
	for p != "" {
		switch {
		case strings.HasPrefix(p, ".."):
			b.WriteString("::")
			p = p[2:]
		case p[0] == '.':
			b.WriteByte('.')
			p = p[1:]
		case p[0] == '$':
			end := strings.IndexByte(p[1:], '$')
			if end < 0 {
				return false
			}
			esc := p[1 : 1+end]
			p = p[2+end:]
			if s, ok := rustEscapes[esc]; ok {
				b.WriteString(s)
				continue
			}
			code, err := strconv.ParseUint(strings.TrimPrefix(esc, "u"), 16, 32)
			if !strings.HasPrefix(esc, "u") || err != nil || code > 0x10ffff || (code >= 0xd800 && code < 0xe000) {
				return false
			}
			b.WriteRune(rune(code))
		default:
			n := strings.IndexAny(p, "$.")
			if n < 0 {
				n = len(p)
			}
			b.WriteString(p[:n])
			p = p[n:]
		}
	}
	return true
}
