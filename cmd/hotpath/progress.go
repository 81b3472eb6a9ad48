package main

import (
	"io"
	"os"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// progressAfter is how long an operation runs before its indicator shows:
// what finishes sooner draws nothing, so quick commands stay quiet.
const progressAfter = time.Second

// startProgress shows label on w until stop is called: with total > 0 a bar
// that fills over total (a capture's duration), else a spinner with the
// elapsed time (reading a long range, loading a large debug file). It draws
// only when w is a terminal, and only from progressAfter on; stop removes
// it, so what the command prints next starts on a clean line.
func startProgress(w io.Writer, label string, total time.Duration) (stop func()) {
	if !isTerminal(w) {
		return func() {}
	}
	show := make(chan any)
	timer := time.AfterFunc(progressAfter, func() { close(show) })
	p := mpb.New(mpb.WithOutput(w), mpb.WithRenderDelay(show), mpb.WithWidth(30), mpb.WithRefreshRate(150*time.Millisecond))
	var bar *mpb.Bar
	done := make(chan struct{})
	var ticking sync.WaitGroup
	if total > 0 {
		bar = p.AddBar(total.Milliseconds(),
			mpb.PrependDecorators(decor.Name(label+" ")),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Name(" "), decor.Elapsed(decor.ET_STYLE_GO), decor.Name(" of "+total.String())))
		start := time.Now()
		ticking.Go(func() {
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					// The bar stops short of full: the agent, not the clock, says when the capture ends.
					bar.SetCurrent(min(time.Since(start).Milliseconds(), total.Milliseconds()-1))
				}
			}
		})
	} else {
		bar = p.New(0, mpb.SpinnerStyle(),
			mpb.PrependDecorators(decor.Name(label+" ")),
			mpb.AppendDecorators(decor.Elapsed(decor.ET_STYLE_GO)))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			ticking.Wait()
			timer.Stop()
			bar.Abort(true)
			p.Wait()
		})
	}
}

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too, and is no place for a progress bar).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
