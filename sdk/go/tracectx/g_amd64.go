package tracectx

// currentG returns the running goroutine's g pointer: the same value the
// agent's uprobe reads from TLS, so Do can tell goroutines apart for free.
func currentG() uintptr
