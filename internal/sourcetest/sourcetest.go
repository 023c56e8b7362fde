// Package sourcetest is the conformance suite every settle source runs: the same
// scenarios (ack, drop, retry, retry after a delay, cap to dead letter, undecodable
// payloads, panics, graceful drain) on every transport and SQL dialect, with Features
// recording the differences a transport is allowed.
package sourcetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// Features records what a transport is allowed to do differently.
type Features struct {
	// LosesRetryWithoutCap: Retry with no cap completes the message and loses it, with a
	// warning (List, PubSub).
	LosesRetryWithoutCap bool
	// NoHeaders: the transport carries no headers (a SQL table inbox); header
	// assertions are skipped.
	NoHeaders bool
	// PutsBackWithoutCap: Retry with no cap returns the message as it was (ReliableList,
	// SQL inbox): the next delivery's attempt comes from the transport.
	PutsBackWithoutCap bool
	// UsesDeliveryCounter: attempts come from the transport's own counter and a retry
	// leaves the message pending until its min-idle passes (ClaimingStream).
	UsesDeliveryCounter bool
}

// Subject is one fresh transport under test, with keys or a table of its own.
type Subject struct {
	// Advance moves the clock the App runs on (Config.Test.Clock) so delays come due;
	// nil means delays wait on the real clock.
	Advance func(d time.Duration)
	// Config is the App's configuration (Logger, Test.Clock); the suite sets OnSettled.
	Config settle.Config
	// DeadLetter is the destination to pass to settle.DeadLetter.
	DeadLetter string
	// DeadLetters returns the dead letters written so far.
	DeadLetters func(t testing.TB) []Dead
	// Publish writes one message with an already encoded payload and headers (may be nil).
	Publish func(t testing.TB, payload []byte, headers map[string]string)
	// Source is the source to mount.
	Source settle.Source
}

// Dead is one dead letter as read back from its destination.
type Dead struct {
	Headers map[string]string
	Payload []byte
}

// Recorder collects the Settled events of one App.
type Recorder struct {
	mu     sync.Mutex
	events []settle.Settled
	wake   chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{wake: make(chan struct{})} }

// OnSettled records s; use it as Config.OnSettled.
func (r *Recorder) OnSettled(_ context.Context, s settle.Settled) {
	r.mu.Lock()
	r.events = append(r.events, s)
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// Events returns the events recorded so far.
func (r *Recorder) Events() []settle.Settled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]settle.Settled(nil), r.events...)
}

// WaitFor waits until cond holds for the events recorded so far, failing t after
// timeout (a bound on a signal, never a sleep).
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]settle.Settled) bool) []settle.Settled {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		evs := append([]settle.Settled(nil), r.events...)
		wake := r.wake
		r.mu.Unlock()
		if cond(evs) {
			return evs
		}
		select {
		case <-wake:
		case <-deadline.C:
			t.Fatalf("timed out after %s waiting for %s; events: %+v", timeout, what, evs)
		}
	}
}

// Finals counts events that put a message in a final state.
func Finals(evs []settle.Settled) int {
	n := 0
	for _, e := range evs {
		if e.Final() {
			n++
		}
	}
	return n
}
