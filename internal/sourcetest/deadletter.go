package sourcetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/settlekit/settle"
)

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
