package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

func testDrainFinishesInFlight(t *testing.T, f Features, s *Subject) {
	ds := *s
	ds.Config.DrainTimeout = time.Hour // the drain must not time out here
	started, release := make(chan struct{}), make(chan struct{})
	var cause error
	c := newCalls(&ds)
	run := Start(t, &ds, c.handler(func(ctx context.Context, _ *settle.Message, n int) error {
		if n == 1 {
			close(started)
			<-release
			cause = context.Cause(ctx)
		}
		return nil
	}))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	waitClosed(t, started, "the handler to start")
	run.Cancel()
	close(release)
	if err := run.Wait(t); err != nil {
		t.Fatalf("App.Run returned %v, want nil", err)
	}

	if cause != nil {
		t.Fatalf("the handler's context was cancelled (%v) during a drain that had time left", cause)
	}
	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[0], settle.ActionAck, settle.OutcomeAck, 1)
	checkNothingPending(t, s)
}

func testDrainTimeoutCancelsHandlers(t *testing.T, f Features, s *Subject) {
	ds := *s
	ds.Config.DrainTimeout = 50 * time.Millisecond
	if s.Advance != nil {
		ds.Config.DrainTimeout = time.Minute
	}
	started := make(chan struct{})
	var cause error
	c := newCalls(&ds)
	// A handler timeout beyond any drain: on a fake clock the nudges that end the drain
	// would otherwise pass the default one first.
	opts := []settle.MountOption{settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter), settle.Timeout(24 * time.Hour)}
	run := Start(t, &ds, c.handler(func(ctx context.Context, _ *settle.Message, n int) error {
		if n != 1 {
			return nil
		}
		close(started)
		<-ctx.Done()
		cause = context.Cause(ctx)
		return fmt.Errorf("interrupted: %w", cause)
	}), opts...)
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	waitClosed(t, started, "the handler to start")
	run.Cancel()
	stopNudging := func() {}
	if s.Advance != nil {
		// Move the App's clock past the drain timeout until Run returns.
		stopNudging = nudgeUntil(s.Advance, ds.Config.DrainTimeout)
	}
	err := run.Wait(t)
	stopNudging()
	if err != nil {
		t.Fatalf("App.Run returned %v, want nil", err)
	}

	if !errors.Is(cause, settle.ErrDrainTimeout) {
		t.Fatalf("the handler's context cause is %v, want settle.ErrDrainTimeout", cause)
	}
	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	e := evs[0]
	if e.Final() || e.Attempt != 1 || e.Outcome != settle.OutcomeRetry {
		t.Fatalf("got %s, want the cancelled delivery settled as a retry (not lost, not dead-lettered)", describeOne(e))
	}
	switch e.Action {
	case settle.ActionCopy, settle.ActionLeave, settle.ActionPutBack, settle.ActionPark:
	default:
		t.Fatalf("got action %s, want a retry that keeps the message", e.Action)
	}
	if f.Ephemeral {
		return
	}

	// Not lost: an App started afterwards gets it again.
	c2 := newCalls(s)
	run2 := Start(t, s, c2.handler(func(context.Context, *settle.Message, int) error { return nil }), opts...)
	run2.WaitFor(t, "the redelivery after the restart", retryStep, hasAction(settle.ActionAck))
	run2.Stop(t)
	cs := c2.all()
	if len(cs) != 1 {
		t.Fatalf("got %d handler calls after the restart, want 1", len(cs))
	}
	checkCall(t, f, cs[0], 2, payload, headers)
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

// A graceful stop hands back what was read and never started, without spending an
// attempt: with Concurrency(1) and the first handler held until the drain timeout, the
// two messages read with it wait; the stop hands them back and the next App handles each
// at attempt 1. (A List, which cannot hand back, runs them in the drain instead.)
func testStopHandsBackWhatNeverStarted(t *testing.T, f Features, s *Subject) {
	if f.Ephemeral {
		t.Skip("a subscription holds nothing for the next App: the stop has nothing to hand back to")
	}
	var payloads [][]byte
	for i := range 3 {
		p, err := settle.Msgpack.Marshal(map[string]any{"scenario": t.Name(), "n": i})
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, p)
		s.Publish(t, p, nil) // before the App starts: its first read takes all three
	}
	ds := *s
	ds.Config.DrainTimeout = 50 * time.Millisecond
	if s.Advance != nil {
		ds.Config.DrainTimeout = time.Minute
	}
	started := make(chan struct{})
	c := newCalls(&ds)
	run := Start(t, &ds, c.handler(func(ctx context.Context, _ *settle.Message, n int) error {
		if n == 1 {
			close(started)
			<-ctx.Done() // held until the drain timeout: the stop comes while the others wait
		}
		return nil
	}), settle.Concurrency(1), settle.Timeout(24*time.Hour))
	waitClosed(t, started, "the first handler to start")
	run.Cancel()
	stopNudging := func() {}
	if s.Advance != nil {
		stopNudging = nudgeUntil(s.Advance, ds.Config.DrainTimeout)
	}
	err := run.Wait(t)
	stopNudging()
	if err != nil {
		t.Fatalf("App.Run returned %v, want nil", err)
	}
	first := c.all()
	if f.RunsQueuedAtStop {
		if len(first) != 3 {
			t.Fatalf("the stopping App ran %d handlers, want all 3 read (they cannot be handed back)", len(first))
		}
		return
	}
	if len(first) != 1 {
		t.Fatalf("the stopping App ran %d handlers, want only the one that had started", len(first))
	}
	evs := run.Recorder.Events()
	if len(evs) != 1 || evs[0].Action != settle.ActionAck {
		t.Fatalf("the stopping App settled %s, want the started one acked and nothing else", describe(evs))
	}

	c2 := newCalls(s)
	run2 := Start(t, s, c2.handler(func(context.Context, *settle.Message, int) error { return nil }))
	run2.WaitFor(t, "the two handed back", retryStep, finals(2))
	run2.Stop(t)
	cs := c2.all()
	if len(cs) != 2 {
		t.Fatalf("the next App ran %d handlers, want the 2 handed back", len(cs))
	}
	for _, cl := range cs {
		if cl.attempt != 1 {
			t.Fatalf("a handed-back message came at attempt %d, want 1: a delivery that never started spends nothing", cl.attempt)
		}
		if !slices.ContainsFunc(payloads[1:], func(p []byte) bool { return string(p) == string(cl.payload) }) {
			t.Fatalf("the next App got %x, want one of the two that never started", cl.payload)
		}
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}
