// Test program: prints the entry PCs of known functions, then waits for
// stdin to close so the test can snapshot and symbolize it while it runs.
package main

import (
	"fmt"
	"os"
	"reflect"
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

func main() {
	fmt.Printf("main.hotLeaf=%#x main.hotMid=%#x\n", reflect.ValueOf(hotLeaf).Pointer(), reflect.ValueOf(hotMid).Pointer())
	buf := make([]byte, 1)
	for {
		if _, err := os.Stdin.Read(buf); err != nil {
			break
		}
	}
	os.Exit(hotMid(len(os.Args)) & 1)
}
