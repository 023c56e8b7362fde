package sourcetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
)

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
