// Package sourcetest is the conformance suite every settle source runs: the same
// scenarios (ack, drop, retry, retry after a delay, cap to dead letter, undecodable
// payloads, panics, graceful drain) on every transport and SQL dialect, with Features
// recording the differences a transport is allowed.
//
// A transport's test gives Run a constructor of Subjects: a fresh source with keys (or a
// table) of its own, a way to publish to it and a way to read its dead letters. The
// suite never sees Redis or SQL: the Subject hides the transport. Start, Running and
// Recorder are the suite's own helpers, exported so a transport's own tests stay short.
package sourcetest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// Features records what a transport is allowed to do differently.
type Features struct {
	// Ephemeral: messages exist only while a subscriber listens (PubSub), so a message
	// settled by one App is not looked for from another App started afterwards.
	Ephemeral bool
	// CapNeedsDeadLetter: MaxAttempts and DeadLetter must be declared together (a SQL
	// inbox): instead of the reject and dead-letter-without-cap scenarios, the suite
	// checks that either one alone stops startup.
	CapNeedsDeadLetter bool
	// LosesRetryWithoutCap: Retry with no cap completes the message and loses it, with a
	// warning (List, PubSub).
	LosesRetryWithoutCap bool
	// NoHeaders: the transport carries no headers (a SQL table inbox); header
	// assertions are skipped.
	NoHeaders bool
	// RunsQueuedAtStop: the transport cannot hand back a delivery read and not started
	// (a List pop took it), so a graceful stop runs the deliveries waiting instead.
	RunsQueuedAtStop bool
	// PutsBackWithoutCap: Retry with no cap returns the message as it was (ReliableList,
	// SQL inbox): the next delivery's attempt comes from the transport.
	PutsBackWithoutCap bool
	// UsesDeliveryCounter: attempts come from the transport's own counter and a retry
	// leaves the message pending until its min-idle passes (ClaimingStream).
	UsesDeliveryCounter bool
	// NoDedupe: the transport keeps no completion marks (settle.Dedupe): List and
	// PubSub, whose messages leave Redis when read; the suite checks that Dedupe stops
	// startup.
	NoDedupe bool
	// NeverPaused: the transport cannot be paused (PubSub: Redis keeps nothing for a
	// subscriber, so a pause would only lose what is published meanwhile); the pause
	// scenarios are skipped.
	NeverPaused bool
	// TakesLimits: the transport takes the flow limits (settle.RateLimit, RateLimitBy,
	// ConcurrencyBy): a delivery can wait safely there and the limits' state lives
	// beside the source (Stream, ClaimingStream, ReliableList, the inbox). Elsewhere the suite
	// checks that they are refused at startup.
	TakesLimits bool
}

// Subject is one fresh transport under test, with keys or a table of its own.
type Subject struct {
	// Advance moves the clock the App runs on (Config.Test.Clock) so delays come due;
	// nil means delays wait on the real clock.
	Advance func(d time.Duration)
	// Config is the App's configuration (Logger, Test.Clock); the suite sets OnSettled
	// (calling the subject's own after its recorder) and, when nil, a Logger writing to
	// the test's log.
	Config settle.Config
	// DeadLetter is the destination to pass to settle.DeadLetter.
	DeadLetter string
	// DeadLetters returns the dead letters written so far.
	DeadLetters func(t testing.TB) []Dead
	// Pending, when set, returns how many messages were delivered and not yet settled
	// (a stream group's pending count); the suite checks it is 0 once every message
	// reached a final state. Nil when the transport has no such notion.
	Pending func(t testing.TB) int64
	// Publish writes one message with an already encoded payload and headers (may be
	// nil). The suite publishes after starting the App, so a transport that only
	// delivers to present subscribers may wait for one.
	Publish func(t testing.TB, payload []byte, headers map[string]string)
	// Source is the source to mount. The suite may mount it on a second App after the
	// first has returned (a restart).
	Source settle.Source
	// Peer, when set, is a second source on the same store read under another consumer
	// name, for a scenario that runs two Apps at once (as two processes would); nil:
	// Source serves both (a transport whose consumers share nothing by name).
	Peer settle.Source
	// Pause and Resume pause and resume the mounts of Source from outside the App, as
	// an operator does (settle/admin's Pause, the inbox's): a control key or row.
	// Required unless Features.NeverPaused.
	Pause, Resume func(t testing.TB)
	// ReplyTo is the destination to pass to settle.ReplyTo, in the source's own store;
	// empty when the transport cannot write replies itself (the reply scenarios are
	// then skipped).
	ReplyTo string
	// Replies returns the replies written to ReplyTo so far, oldest first.
	Replies func(t testing.TB) []Dead
}

// Dead is one dead letter as read back from its destination.
type Dead struct {
	Headers map[string]string
	Payload []byte
}

// now returns the time on the App's clock.
func (s *Subject) now() time.Time {
	if c := s.Config.Test.Clock; c != nil {
		return c.Now()
	}
	return time.Now()
}

// Recorder collects the Settled events of one App.
type Recorder struct {
	mu     sync.Mutex
	events []settle.Settled
	wake   chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{wake: make(chan struct{})} }

// Events returns the events recorded so far.
func (r *Recorder) Events() []settle.Settled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]settle.Settled(nil), r.events...)
}

// OnSettled records s; use it as Config.OnSettled.
func (r *Recorder) OnSettled(_ context.Context, s settle.Settled) {
	r.mu.Lock()
	r.events = append(r.events, s)
	close(r.wake)
	r.wake = make(chan struct{})
	r.mu.Unlock()
}

// WaitFor waits until cond holds for the events recorded so far, failing t after
// timeout (a bound on a signal, never a sleep).
func (r *Recorder) WaitFor(t testing.TB, timeout time.Duration, what string, cond func([]settle.Settled) bool) []settle.Settled {
	t.Helper()
	return r.waitFor(t, timeout, what, nil, cond)
}

// waitFor is WaitFor that calls nudge every few milliseconds while it waits (to move a
// fake clock), when nudge is not nil.
func (r *Recorder) waitFor(t testing.TB, timeout time.Duration, what string, nudge func(), cond func([]settle.Settled) bool) []settle.Settled {
	t.Helper()
	var evs []settle.Settled
	waitSignal(t, timeout, nudge, func() (bool, <-chan struct{}) {
		r.mu.Lock()
		defer r.mu.Unlock()
		evs = append([]settle.Settled(nil), r.events...)
		return cond(evs), r.wake
	}, func() {
		t.Fatalf("timed out after %s waiting for %s; events: %s", timeout, what, describe(evs))
	})
	return evs
}

// waitSignal waits until check reports done, woken by the channel check returns
// (closed at the next change), calling nudge (when not nil) every few milliseconds
// meanwhile; after timeout it calls fail, which must stop the test.
func waitSignal(t testing.TB, timeout time.Duration, nudge func(), check func() (done bool, wake <-chan struct{}), fail func()) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var tick <-chan time.Time
	if nudge != nil {
		ticker := time.NewTicker(nudgeEvery)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		done, wake := check()
		if done {
			return
		}
		select {
		case <-wake:
		case <-tick:
			nudge()
		case <-deadline.C:
			fail()
			return
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

// Running is an App started on a Subject by Start.
type Running struct {
	// Recorder records the App's settlements.
	Recorder *Recorder

	cancel  context.CancelFunc
	done    chan struct{}
	err     error
	logs    *logWatch
	stop    sync.Once
	subject *Subject
}

// Start starts an App with s's configuration and one mount of h on s.Source, and
// returns it running; the App is stopped when the test ends if it is still running.
func Start(t testing.TB, s *Subject, h settle.Handler, opts ...settle.MountOption) *Running {
	t.Helper()
	rec := NewRecorder()
	cfg := s.Config
	own := cfg.OnSettled
	cfg.OnSettled = func(ctx context.Context, ev settle.Settled) {
		rec.OnSettled(ctx, ev)
		if own != nil {
			own(ctx, ev)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	logs := newLogWatch()
	cfg.Logger = slog.New(logs.handler(cfg.Logger.Handler()))
	app, err := settle.New(cfg)
	if err != nil {
		t.Fatalf("settle.New: %v", err)
	}
	app.Mount(s.Source, h, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{Recorder: rec, cancel: cancel, done: make(chan struct{}), logs: logs, subject: s}
	go func() {
		defer close(r.done)
		r.err = app.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(stopTimeout):
			t.Errorf("App.Run did not return within %s of its context being cancelled", stopTimeout)
		}
	})
	return r
}

// Cancel cancels the App's context: a graceful shutdown begins.
func (r *Running) Cancel() { r.cancel() }

// Stop cancels the App's context, waits for Run to return and fails t unless it
// returned nil. Every settlement is recorded by then.
func (r *Running) Stop(t testing.TB) {
	t.Helper()
	r.cancel()
	if err := r.Wait(t); err != nil {
		t.Fatalf("App.Run returned %v, want nil after a graceful shutdown", err)
	}
}

// Wait waits for Run to return (failing t after a bound) and returns its error.
func (r *Running) Wait(t testing.TB) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(stopTimeout):
		t.Fatalf("App.Run did not return within %s", stopTimeout)
		return nil
	}
}

// WaitFor waits for the App's settlements to satisfy cond. On a subject with a fake
// clock it keeps advancing the clock by step while it waits (step 0: it does not), so
// retries that wait for a min-idle or a delay come due.
func (r *Running) WaitFor(t testing.TB, what string, step time.Duration, cond func([]settle.Settled) bool) []settle.Settled {
	t.Helper()
	var nudge func()
	if r.subject.Advance != nil && step > 0 {
		nudge = func() { r.subject.Advance(step) }
	}
	return r.Recorder.waitFor(t, waitTimeout, what, nudge, cond)
}

// Timing bounds. They bound waits on signals; none is slept.
const (
	// nudgeEvery is how often a wait advances a fake clock.
	nudgeEvery = 5 * time.Millisecond
	// stopTimeout bounds a graceful shutdown.
	stopTimeout = 20 * time.Second
	// waitTimeout bounds one wait for settlements or handler calls.
	waitTimeout = 15 * time.Second
)

// testWriter sends log lines to the test's log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Logf("%s", p)
	return len(p), nil
}
