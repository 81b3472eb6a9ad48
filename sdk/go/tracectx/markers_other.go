//go:build !amd64

package tracectx

// The agent instruments amd64 only; elsewhere the markers are plain no-op
// functions, kept so the SDK builds everywhere.

//go:noinline
func hotpathTraceSet(c *wireContext) {}

//go:noinline
func hotpathTraceClear() {}
