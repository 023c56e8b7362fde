package sourcetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

// Run runs every scenario of the suite as a parallel subtest, each on a fresh Subject
// made by newSubject. f says which differences the transport is allowed.
func Run(t *testing.T, f Features, newSubject func(t *testing.T) *Subject) {
	t.Helper()
	scenarios := []struct {
		name string
		run  func(t *testing.T, f Features, s *Subject)
	}{
		{"AckCompletes", testAckCompletes},
		{"DropNeverDeadLetters", testDropNeverDeadLetters},
		{"RetryWithoutCap", testRetryWithoutCap},
		{"RetryAfterRedelivers", testRetryAfterRedelivers},
		{"PlainErrorBacksOff", testPlainErrorBacksOff},
		{"CapDeadLettersAtNthDelivery", testCapDeadLettersAtNthDelivery},
		{"CapWithoutDeadLetterRejects", testCapWithoutDeadLetterRejects},
		{"DeadLetterWithoutCapAtFirstFailure", testDeadLetterWithoutCapAtFirstFailure},
		{"UndecodablePayloadSpendsAttempts", testUndecodablePayloadSpendsAttempts},
		{"PanicIsRetried", testPanicIsRetried},
		{"DrainFinishesInFlight", testDrainFinishesInFlight},
		{"DrainTimeoutCancelsHandlers", testDrainTimeoutCancelsHandlers},
		{"StopHandsBackWhatNeverStarted", testStopHandsBackWhatNeverStarted},
		{"PausedMountReadsNothingNewAndResumes", testPausedMountReadsNothingNewAndResumes},
		{"StopWhilePausedKeepsWhatWaits", testStopWhilePausedKeepsWhatWaits},
		{"ReplyIsWrittenWithTheCompletion", testReplyIsWrittenWithTheCompletion},
		{"FailedHandlerWritesNoReply", testFailedHandlerWritesNoReply},
		{"HooksFollowOneMessage", testHooksFollowOneMessage},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			sc.run(t, f, newSubject(t))
		})
	}
}

// retryStep is how far a fake clock is moved on each nudge while a scenario waits for
// a retry to come back (past any claiming min-idle).
const retryStep = time.Minute

func testAckCompletes(t *testing.T, f Features, s *Subject) {
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error { return nil }))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the ack", 0, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[0], settle.ActionAck, settle.OutcomeAck, 1)
	if evs[0].HandlerErr != nil {
		t.Fatalf("got handler error %v on an ack, want nil", evs[0].HandlerErr)
	}
	cs := c.all()
	if len(cs) != 1 {
		t.Fatalf("got %d handler calls, want 1", len(cs))
	}
	checkCall(t, f, cs[0], 1, payload, headers)
	if cs[0].id != evs[0].ID {
		t.Fatalf("the handler saw id %q, the settlement %q", cs[0].id, evs[0].ID)
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

func testDropNeverDeadLetters(t *testing.T, f Features, s *Subject) {
	c := newCalls(s)
	unwanted := errors.New("unwanted")
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error {
		return fmt.Errorf("handler: %w", settle.Drop(unwanted))
	}), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the drop", 0, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[0], settle.ActionDrop, settle.OutcomeDrop, 1)
	if !errors.Is(evs[0].HandlerErr, unwanted) {
		t.Fatalf("got handler error %v, want the drop's cause kept", evs[0].HandlerErr)
	}
	if n := len(c.all()); n != 1 {
		t.Fatalf("got %d handler calls, want 1", n)
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

// failThenAck starts an App whose handler returns err to the first n deliveries and
// acks the others, and publishes one message.
func failThenAck(t *testing.T, f Features, s *Subject, n int, err error) (c *calls, run *Running, payload []byte, headers map[string]string) {
	c = newCalls(s)
	run = Start(t, s, c.handler(func(_ context.Context, _ *settle.Message, i int) error {
		if i <= n {
			return err
		}
		return nil
	}))
	payload, headers = message(t, f)
	s.Publish(t, payload, headers)
	return c, run, payload, headers
}

func testRetryWithoutCap(t *testing.T, f Features, s *Subject) {
	c, run, payload, headers := failThenAck(t, f, s, 1, settle.Retry(errors.New("first delivery fails"))) // again at once

	if f.LosesRetryWithoutCap {
		run.WaitFor(t, "the loss", 0, finals(1))
		run.Stop(t)
		evs := ordered(run.Recorder.Events())
		checkApplied(t, evs)
		if len(evs) != 1 {
			t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
		}
		checkEvent(t, evs[0], settle.ActionLose, settle.OutcomeRetry, 1)
		if n := len(c.all()); n != 1 {
			t.Fatalf("got %d handler calls, want 1: a lost message is not redelivered", n)
		}
		checkNoDeadLetters(t, s)
		checkNothingPending(t, s)
		return
	}

	run.WaitFor(t, "the retried delivery's ack", retryStep, hasAction(settle.ActionAck))
	run.Stop(t)
	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 2 {
		t.Fatalf("got %d settlements, want 2 (retry, ack): %s", len(evs), describe(evs))
	}
	want := settle.ActionCopy
	switch {
	case f.UsesDeliveryCounter:
		want = settle.ActionLeave
	case f.PutsBackWithoutCap:
		want = settle.ActionPutBack
	}
	checkEvent(t, evs[0], want, settle.OutcomeRetry, 1)
	cs := c.all()
	if len(cs) != 2 {
		t.Fatalf("got %d handler calls, want 2", len(cs))
	}
	if f.PutsBackWithoutCap {
		// Put back as it was: the transport says what the attempt is.
		checkCall(t, f, cs[1], cs[1].attempt, payload, headers)
		checkEvent(t, evs[1], settle.ActionAck, settle.OutcomeAck, cs[1].attempt)
	} else {
		checkCall(t, f, cs[1], 2, payload, headers)
		checkEvent(t, evs[1], settle.ActionAck, settle.OutcomeAck, 2)
	}
	if want == settle.ActionCopy && !f.NoHeaders {
		if got := cs[1].headers[settle.HeaderRetryCount]; got != "1" {
			t.Fatalf("the copy's %s is %q, want \"1\"", settle.HeaderRetryCount, got)
		}
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

// A plain error (no outcome asked) is retried after the mount's backoff, never at once:
// with DefaultBackoff, about 100ms, 200ms, 400ms… (each between half and all of it), kept
// where the mount keeps delays. A message that keeps failing with no cap therefore
// comes back at most 9 times in its first 10 s (the least waits add up to 25.55 s over 9
// retries). A claiming stream waits its min-idle; a List or PubSub without a cap loses
// the message, as its Retry does.
func testPlainErrorBacksOff(t *testing.T, f Features, s *Subject) {
	const failures = 5
	c, run, _, _ := failThenAck(t, f, s, failures, errors.New("downstream is down"))
	if f.LosesRetryWithoutCap {
		run.WaitFor(t, "the loss", 0, finals(1))
		run.Stop(t)
		evs := run.Recorder.Events()
		if len(evs) != 1 || evs[0].Action != settle.ActionLose {
			t.Fatalf("got %s, want the message lost at its first failure (no cap)", describe(evs))
		}
		return
	}
	step := 10 * time.Millisecond // a fake clock's nudge: a fraction of the first backoff
	if f.UsesDeliveryCounter {
		step = retryStep // past min-idle
	}
	run.WaitFor(t, "the ack after the failures", step, hasAction(settle.ActionAck))
	run.Stop(t)
	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	cs := c.all()
	if len(evs) != failures+1 || len(cs) != failures+1 {
		t.Fatalf("got %d settlements and %d handler calls, want %d of each: %s", len(evs), len(cs), failures+1, describe(evs))
	}
	for i, e := range evs[:failures] {
		step := 100 * time.Millisecond << i
		switch {
		case e.Outcome != settle.OutcomeRetry || e.Attempt != i+1:
			t.Fatalf("settlement %d is %s, want the retry of attempt %d", i+1, describeOne(e), i+1)
		case f.UsesDeliveryCounter:
			if e.Action != settle.ActionLeave {
				t.Fatalf("settlement %d is %s, want it left pending for min-idle", i+1, describeOne(e))
			}
		case e.Action != settle.ActionPark || e.Delay < step/2 || e.Delay > step:
			t.Fatalf("settlement %d is %s, want a park of %s to %s (the backoff)", i+1, describeOne(e), step/2, step)
		}
		// On the wall clock the gap is the wait itself. (Under a fake clock a SQL inbox's
		// "now" is the database's clock plus the fake clock's moves, so the fake clock
		// alone shows less than the wait.)
		if gap := cs[i+1].at.Sub(cs[i].at); s.Advance == nil && gap < e.Delay {
			t.Fatalf("delivery %d came %s after delivery %d, before its %s backoff", i+2, gap, i+1, e.Delay)
		}
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

func testRetryAfterRedelivers(t *testing.T, f Features, s *Subject) {
	delay := 50 * time.Millisecond
	if s.Advance != nil {
		delay = time.Minute
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, _ *settle.Message, n int) error {
		if n == 1 {
			return settle.RetryAfter(delay, errors.New("not yet"))
		}
		return nil
	}))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	// A fake clock moves a quarter of the delay at a time, so a redelivery that comes
	// before the delay shows on the clock.
	run.WaitFor(t, "the delayed delivery's ack", delay/4, hasAction(settle.ActionAck))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) < 2 {
		t.Fatalf("got %d settlements, want a retry then an ack: %s", len(evs), describe(evs))
	}
	first, last := evs[0], evs[len(evs)-1]
	for _, e := range evs[:len(evs)-1] {
		if e.Final() || e.Attempt != 1 || e.Outcome != settle.OutcomeRetryAfter {
			t.Fatalf("got %s before the ack, want only the first delivery's delayed retry: %s", describeOne(e), describe(evs))
		}
	}
	checkEvent(t, last, settle.ActionAck, settle.OutcomeAck, 2)
	want := delay
	if f.UsesDeliveryCounter {
		want = first.Delay // a claiming stream waits for its min-idle
		if want <= 0 {
			t.Fatalf("got delay %s on %s, want the min-idle the retry waits", want, describeOne(first))
		}
	} else if first.Delay != delay {
		t.Fatalf("got delay %s on %s, want %s as asked", first.Delay, describeOne(first), delay)
	}
	cs := c.all()
	if len(cs) != 2 {
		t.Fatalf("got %d handler calls, want 2", len(cs))
	}
	checkCall(t, f, cs[1], 2, payload, headers)
	if gap := cs[1].at.Sub(cs[0].at); gap < want {
		t.Fatalf("the second delivery came %s after the first, before the %s delay", gap, want)
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

func testCapDeadLettersAtNthDelivery(t *testing.T, f Features, s *Subject) {
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, m *settle.Message, _ int) error {
		return fmt.Errorf("attempt %d failed", m.Attempt)
	}), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the dead letter", retryStep, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 3 {
		t.Fatalf("got %d settlements, want 3 (retry, retry, dead letter): %s", len(evs), describe(evs))
	}
	for i, e := range evs[:2] {
		if e.Final() || e.Attempt != i+1 || e.Outcome != settle.OutcomeRetry {
			t.Fatalf("settlement %d is %s, want a retry of attempt %d", i+1, describeOne(e), i+1)
		}
	}
	dead := evs[2]
	checkEvent(t, dead, settle.ActionDeadLetter, settle.OutcomeRetry, 3)
	cs := c.all()
	if len(cs) != 3 {
		t.Fatalf("got %d handler calls, want 3", len(cs))
	}
	for i, cl := range cs {
		checkCall(t, f, cl, i+1, payload, headers)
	}
	dls := s.DeadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want exactly 1", len(dls))
	}
	checkDeadLetter(t, f, dls[0], payload, headers, dead, "3", "attempt 3 failed")
	checkNothingPending(t, s)
}

func testCapWithoutDeadLetterRejects(t *testing.T, f Features, s *Subject) {
	if f.CapNeedsDeadLetter {
		checkRefused(t, s, settle.MaxAttempts(2))
		return
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error {
		return errors.New("always fails")
	}), settle.MaxAttempts(2))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the rejection", retryStep, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 2 {
		t.Fatalf("got %d settlements, want 2 (retry, reject): %s", len(evs), describe(evs))
	}
	if evs[0].Final() || evs[0].Attempt != 1 {
		t.Fatalf("got %s first, want a retry of attempt 1", describeOne(evs[0]))
	}
	checkEvent(t, evs[1], settle.ActionReject, settle.OutcomeRetry, 2)
	if n := len(c.all()); n != 2 {
		t.Fatalf("got %d handler calls, want 2", n)
	}
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

func testDeadLetterWithoutCapAtFirstFailure(t *testing.T, f Features, s *Subject) {
	if f.CapNeedsDeadLetter {
		checkRefused(t, s, settle.DeadLetter(s.DeadLetter))
		return
	}
	c := newCalls(s)
	run := Start(t, s, c.handler(func(context.Context, *settle.Message, int) error {
		return errors.New("no cap declared")
	}), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the dead letter", 0, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 1 {
		t.Fatalf("got %d settlements, want 1: %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[0], settle.ActionDeadLetter, settle.OutcomeRetry, 1)
	if n := len(c.all()); n != 1 {
		t.Fatalf("got %d handler calls, want 1", n)
	}
	dls := s.DeadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want exactly 1", len(dls))
	}
	checkDeadLetter(t, f, dls[0], payload, headers, evs[0], "1", "no cap declared")
	checkNothingPending(t, s)
}

func testUndecodablePayloadSpendsAttempts(t *testing.T, f Features, s *Subject) {
	var mu sync.Mutex
	called := 0
	type refund struct{ Amount int }
	h := settle.Typed(func(context.Context, *settle.Message, refund) error {
		mu.Lock()
		called++
		mu.Unlock()
		return nil
	})
	run := Start(t, s, h, settle.MaxAttempts(2), settle.DeadLetter(s.DeadLetter))
	garbage := []byte{0xc1, 0xc1, 0xc1} // 0xc1 is never used by msgpack
	_, headers := message(t, f)
	s.Publish(t, garbage, headers)
	run.WaitFor(t, "the dead letter", retryStep, finals(1))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 2 {
		t.Fatalf("got %d settlements, want 2 (retry, dead letter): %s", len(evs), describe(evs))
	}
	checkEvent(t, evs[1], settle.ActionDeadLetter, settle.OutcomeRetry, 2)
	for _, e := range evs {
		var de *settle.DecodeError
		if !errors.As(e.HandlerErr, &de) {
			t.Fatalf("got handler error %v on %s, want a *settle.DecodeError", e.HandlerErr, describeOne(e))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if called != 0 {
		t.Fatalf("the typed function was called %d times with a payload that does not decode", called)
	}
	dls := s.DeadLetters(t)
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want exactly 1", len(dls))
	}
	checkDeadLetter(t, f, dls[0], garbage, headers, evs[1], "2", "decode")
	checkNothingPending(t, s)
}

func testPanicIsRetried(t *testing.T, f Features, s *Subject) {
	c := newCalls(s)
	run := Start(t, s, c.handler(func(_ context.Context, _ *settle.Message, n int) error {
		if n == 1 {
			panic("boom")
		}
		return nil
	}), settle.MaxAttempts(3), settle.DeadLetter(s.DeadLetter))
	payload, headers := message(t, f)
	s.Publish(t, payload, headers)
	run.WaitFor(t, "the ack after the panic", retryStep, hasAction(settle.ActionAck))
	run.Stop(t)

	evs := ordered(run.Recorder.Events())
	checkApplied(t, evs)
	if len(evs) != 2 {
		t.Fatalf("got %d settlements, want 2 (retry, ack): %s", len(evs), describe(evs))
	}
	if evs[0].Final() || evs[0].Attempt != 1 || evs[0].Outcome != settle.OutcomeRetry {
		t.Fatalf("got %s first, want a retry of attempt 1", describeOne(evs[0]))
	}
	var pe *settle.PanicError
	if !errors.As(evs[0].HandlerErr, &pe) || pe.Value != "boom" || len(pe.Stack) == 0 {
		t.Fatalf("got handler error %#v, want a *settle.PanicError with value boom and a stack", evs[0].HandlerErr)
	}
	checkEvent(t, evs[1], settle.ActionAck, settle.OutcomeAck, 2)
	cs := c.all()
	if len(cs) != 2 {
		t.Fatalf("got %d handler calls, want 2", len(cs))
	}
	checkCall(t, f, cs[1], 2, payload, headers)
	checkNoDeadLetters(t, s)
	checkNothingPending(t, s)
}

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

// message returns the payload and headers a scenario publishes: a msgpack value, and a
// user header unless the transport carries none.
func message(t *testing.T, f Features) ([]byte, map[string]string) {
	t.Helper()
	payload, err := settle.Msgpack.Marshal(map[string]any{"scenario": t.Name(), "amount": 1250})
	if err != nil {
		t.Fatal(err)
	}
	if f.NoHeaders {
		return payload, nil
	}
	return payload, map[string]string{"trace": "t-" + t.Name()[strings.LastIndex(t.Name(), "/")+1:], "tenant": "north"}
}

// ordered sorts settlements by attempt, a delivery's non-final settlements before its
// final one, and counts an in-process delay (park, then copy) as one. OnSettled reports each settlement once applied, and a retry copy may be
// delivered and settled before its original's settlement is reported, so the order
// events arrive in says nothing.
func ordered(evs []settle.Settled) []settle.Settled {
	rank := func(e settle.Settled) int {
		if e.Final() {
			return 2*e.Attempt + 1
		}
		return 2 * e.Attempt
	}
	slices.SortStableFunc(evs, func(a, b settle.Settled) int { return cmp.Compare(rank(a), rank(b)) })
	// An in-process delay is reported twice: parked, then its copy written when due. One
	// retry is one settlement here: the copy's event goes, unless it failed.
	type key struct {
		attempt int
		id      string
	}
	parked := map[key]bool{}
	for _, e := range evs {
		if e.Action == settle.ActionPark {
			parked[key{e.Attempt, e.ID}] = true
		}
	}
	return slices.DeleteFunc(evs, func(e settle.Settled) bool {
		return e.Action == settle.ActionCopy && e.Err == nil && parked[key{e.Attempt, e.ID}]
	})
}

// finals reports whether at least n settlements were final.
func finals(n int) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool { return Finals(evs) >= n }
}

// hasAction reports whether a settlement with action a was applied.
func hasAction(a settle.Action) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool {
		for _, e := range evs {
			if e.Action == a && e.Err == nil {
				return true
			}
		}
		return false
	}
}

// checkApplied fails t if a settlement failed to apply.
func checkApplied(t *testing.T, evs []settle.Settled) {
	t.Helper()
	for _, e := range evs {
		if e.Err != nil {
			t.Fatalf("settlement %s failed: %v", describeOne(e), e.Err)
		}
	}
}

func checkEvent(t *testing.T, e settle.Settled, action settle.Action, outcome settle.OutcomeKind, attempt int) {
	t.Helper()
	if e.Action != action || e.Outcome != outcome || e.Attempt != attempt {
		t.Fatalf("got %s, want action %s, outcome %s, attempt %d", describeOne(e), action, outcome, attempt)
	}
}

func checkCall(t *testing.T, f Features, c call, attempt int, payload []byte, headers map[string]string) {
	t.Helper()
	if c.attempt != attempt {
		t.Fatalf("the handler saw attempt %d, want %d", c.attempt, attempt)
	}
	if string(c.payload) != string(payload) {
		t.Fatalf("the handler saw payload %q, want %q as published", c.payload, payload)
	}
	if c.headers == nil {
		t.Fatal("the handler saw nil headers, want a map (never nil)")
	}
	if f.NoHeaders {
		return
	}
	for k, v := range headers {
		if got, ok := c.headers[k]; !ok || got != v {
			t.Fatalf("the handler saw header %s=%q, want %q as published (headers %v)", k, got, v, c.headers)
		}
	}
}

func checkDeadLetter(t *testing.T, f Features, d Dead, payload []byte, headers map[string]string, e settle.Settled, retryCount, errorPart string) {
	t.Helper()
	if string(d.Payload) != string(payload) {
		t.Fatalf("dead letter payload %q, want %q as published", d.Payload, payload)
	}
	if f.NoHeaders {
		return
	}
	want := maps.Clone(headers)
	want[settle.HeaderRetryCount] = retryCount
	want[settle.HeaderDeadSource] = e.Key
	want[settle.HeaderDeadID] = e.ID
	for k, v := range want {
		if got, ok := d.Headers[k]; !ok || got != v {
			t.Fatalf("dead letter header %s=%q, want %q (headers %v)", k, got, v, d.Headers)
		}
	}
	if d.Headers[settle.HeaderDeadReason] == "" {
		t.Fatalf("dead letter has no %s (headers %v)", settle.HeaderDeadReason, d.Headers)
	}
	if got := d.Headers[settle.HeaderDeadError]; !strings.Contains(got, errorPart) {
		t.Fatalf("dead letter %s=%q, want it to contain %q", settle.HeaderDeadError, got, errorPart)
	}
}

func checkNoDeadLetters(t *testing.T, s *Subject) {
	t.Helper()
	if dls := s.DeadLetters(t); len(dls) != 0 {
		t.Fatalf("got %d dead letters, want none: %+v", len(dls), dls)
	}
}

func checkNothingPending(t *testing.T, s *Subject) {
	t.Helper()
	if s.Pending == nil {
		return
	}
	if n := s.Pending(t); n != 0 {
		t.Fatalf("got %d messages delivered and not settled, want 0", n)
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
	}
}

// nudgeUntil advances a fake clock by step every few milliseconds until the returned
// stop is called.
func nudgeUntil(advance func(time.Duration), step time.Duration) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ticker := time.NewTicker(nudgeEvery)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				advance(step)
			}
		}
	}()
	return func() { close(done); <-finished }
}

func describeOne(e settle.Settled) string {
	s := fmt.Sprintf("{%s attempt=%d outcome=%s id=%s", e.Action, e.Attempt, e.Outcome, e.ID)
	if e.Delay > 0 {
		s += fmt.Sprintf(" delay=%s", e.Delay)
	}
	if e.HandlerErr != nil {
		s += fmt.Sprintf(" handler_err=%q", e.HandlerErr)
	}
	if e.Err != nil {
		s += fmt.Sprintf(" err=%q", e.Err)
	}
	return s + "}"
}

func describe(evs []settle.Settled) string {
	parts := make([]string, len(evs))
	for i, e := range evs {
		parts[i] = describeOne(e)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// checkRefused checks that an App mounting s.Source with opts refuses to start.
func checkRefused(t *testing.T, s *Subject, opts ...settle.MountOption) {
	t.Helper()
	app, err := settle.New(s.Config)
	if err != nil {
		t.Fatalf("settle.New: %v", err)
	}
	app.Mount(s.Source, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), opts...)
	if err := app.Validate(); err == nil {
		t.Fatal("App.Validate returned nil, want a refusal of the policy")
	}
}
