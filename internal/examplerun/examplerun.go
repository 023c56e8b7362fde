// Package examplerun holds what every example program does the same way: run an App in
// the background until the example's own tally says every message is settled, then shut
// it down gracefully. It is for the programs in examples/ only.
package examplerun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/settlekit/settle"
)

// Running is an App running in the background.
type Running struct {
	cancel context.CancelFunc
	errc   chan error
}

// Start runs app in the background on a context derived from ctx.
func Start(ctx context.Context, app *settle.App) *Running {
	runCtx, cancel := context.WithCancel(ctx)
	r := &Running{cancel: cancel, errc: make(chan error, 1)}
	go func() { r.errc <- app.Run(runCtx) }()
	return r
}

// Stop cancels the App and returns what Run returned. Call it once, and not after Until.
func (r *Running) Stop() error {
	r.cancel()
	return <-r.errc
}

// Until waits for done (the example's tally: every message settled), then stops the App
// gracefully. It returns an error naming summary() when the App stopped early, the
// timeout passed or ctx ended first, joined with Run's own error.
func (r *Running) Until(ctx context.Context, done <-chan struct{}, timeout time.Duration, summary func() string) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var waitErr error
	select {
	case <-done:
	case err := <-r.errc:
		r.cancel()
		return fmt.Errorf("app stopped early: %v (%s)", err, summary())
	case <-timer.C:
		waitErr = fmt.Errorf("timed out after %s: %s", timeout, summary())
	case <-ctx.Done():
		waitErr = fmt.Errorf("interrupted: %s", summary())
	}
	return errors.Join(waitErr, r.Stop())
}
