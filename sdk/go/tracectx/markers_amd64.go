package tracectx

// Implemented in markers_amd64.s.

//go:noescape
func hotpathTraceSet(c *wireContext)

func hotpathTraceClear()
