// Command gopublisher publishes its process context with hotpath's Go SDK
// (tracectx.PublishResource), as a Go service does beside its
// TracerProvider: KEY=VALUE arguments are the resource's attributes. It
// prints "published" once they are out; each line read from stdin
// ("KEY=VALUE ...") publishes those instead and prints "updated"; end of
// input exits.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/hotpath-dev/hotpath/sdk/go/tracectx"
)

func attrs(words []string) []attribute.KeyValue {
	var out []attribute.KeyValue
	for _, w := range words {
		if k, v, ok := strings.Cut(w, "="); ok {
			out = append(out, attribute.String(k, v))
		}
	}
	return out
}

func main() {
	if err := tracectx.PublishResource(attrs(os.Args[1:])...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("published")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if err := tracectx.PublishResource(attrs(strings.Fields(in.Text()))...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("updated")
	}
}
