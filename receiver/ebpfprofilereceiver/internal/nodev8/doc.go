// Package nodev8 names the JavaScript functions of a running Node.js
// process from V8's own objects, read through /proc/PID/mem: nothing is
// asked of node, no flag is needed (no --perf-basic-prof, no perf map) and
// nothing is written.
//
// V8 keeps, in each JavaScript frame, the JSFunction being run (at a
// fixed offset from the frame pointer); the JSFunction points to its
// SharedFunctionInfo, which outlives recompilation and names the
// function. The kernel side walks the stack by frame pointer and records
// that SharedFunctionInfo pointer for each JavaScript frame; it needs
// only a few offsets and instance types, which ReadLayout reads from the
// v8dbg_ symbols (V8's postmortem debugging constants) of node or
// libnode.so. A Namer then turns a SharedFunctionInfo pointer into a
// Function: its debug name (its own, else the one V8 inferred, such as
// obj.method, else "(anonymous)"), its script's name, and the line it
// starts on.
//
// What is read, and its bounds: the SharedFunctionInfo; its name (a String
// before the function is compiled) or its ScopeInfo (once compiled: the
// name and start position, found among at most a few slots after the
// context locals); its UncompiledData (start position and inferred name);
// its Script, directly or through a DebugInfo while a debugger is
// attached; the Script's name and line table (Script::line_ends, at most
// 1<<20 lines) or, when V8 has not made that table, the script's source
// if it is a sequential string of at most 8 MiB. Names are read up to 256
// bytes, file names up to 4096; ConsString, ThinString and SlicedString
// links are followed at most 4 deep; external strings are not read. Every
// object's type is checked (its map, and the map's map) before it is
// trusted, so memory that V8's garbage collector freed or moved since the
// sample gives an error, not a wrong name. Scripts are cached per Namer,
// 256 at most with 1 MB of line tables over all of them, and each entry
// is checked against the Script's fields at each use.
//
// What it does not do: it names the function whose frame it is, not the
// functions optimized code inlined into it, and gives the function's first
// line, not the line of the statement being run. It reads 64-bit V8
// without pointer compression (as Node.js builds it), from V8 9.6 (Node.js
// 18, V8 10.2, and Node.js 20, V8 11.3, whose layout the tests read from a
// running node; V8 12 and later from their symbols' names, untested here),
// on x86-64.
package nodev8
