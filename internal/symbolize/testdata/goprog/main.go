// Test program: prints the entry PCs of known functions, then waits for
// stdin to close so the test can snapshot and symbolize it while it runs.
package main

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
)

//go:noinline
func hotLeaf(x int) int {
	v := x
	for i := 0; i < 8; i++ {
		v = v*31 + i
	}
	return v
}

//go:noinline
func hotMid(x int) int { return hotLeaf(x) + 1 }

// inlinedHelper is small enough that the compiler inlines it.
// It returns the runtime's logical frames from itself up, which for
// inlined frames share one physical return address.
func inlinedHelper() []uintptr {
	return pcBuf[:runtime.Callers(1, pcBuf[:])]
}

var pcBuf [2]uintptr

//go:noinline
func callsInline() []uintptr { return inlinedHelper() }

func main() {
	pcs := callsInline()
	pc := pcs[0]
	// The runtime's own view of that address, inlined frames expanded, as
	// the truth for the test: inline=name:line,name:line (innermost first).
	var chain []string
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		chain = append(chain, fmt.Sprintf("%s:%d", f.Function, f.Line))
		if !more {
			break
		}
	}
	fmt.Printf("main.hotLeaf=%#x main.hotMid=%#x inlinepc=%#x inline=%s\n", reflect.ValueOf(hotLeaf).Pointer(), reflect.ValueOf(hotMid).Pointer(), pc, strings.Join(chain, ","))
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			break
		}
	}
	os.Exit(hotMid(len(os.Args)) & 1)
}
