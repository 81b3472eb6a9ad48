// Package cputime measures the CPU time of the calling OS thread, so the
// agent can tell what a stretch of its own work cost apart from waiting for
// the CPU on a busy node (wall time) and from its other threads' work.
package cputime

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// Thread is the CPU time the calling OS thread has used (0 if the clock
// cannot be read). Differences are meaningful only while the goroutine stays
// on one thread: see Measure, or hold runtime.LockOSThread.
func Thread() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Measure runs fn on a locked OS thread and returns the CPU time it used.
func Measure(fn func()) time.Duration {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := Thread()
	fn()
	return Thread() - start
}
