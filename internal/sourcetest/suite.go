package sourcetest

import (
	"context"
	"errors"
	"fmt"
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
		{"BatchSettlesEachMessageOnItsOwn", testBatchSettlesEachMessageOnItsOwn},
		{"BatchPanicChargesOnlyThePanickingMessage", testBatchPanicChargesOnlyThePanickingMessage},
		{"BatchNeverExceedsItsSize", testBatchNeverExceedsItsSize},
		{"DedupeSkipsAKeyCompletedWithinTheWindow", testDedupeSkipsAKeyCompletedWithinTheWindow},
		{"DedupeMarksOnlyCompletions", testDedupeMarksOnlyCompletions},
		{"DedupeMarksAReply", testDedupeMarksAReply},
		{"DedupeRefusesBadValues", testDedupeRefusesBadValues},
		{"BadLimitsRefusedAtStartup", testBadLimitsRefusedAtStartup},
		{"LimitsRefusedWhereTheyCannotWait", testLimitsRefusedWhereTheyCannotWait},
		{"RateLimitSpacesStartsAndSpendsNoAttempt", testRateLimitSpacesStartsAndSpendsNoAttempt},
		{"HotKeyAtItsLimitDoesNotHoldUpOtherKeys", testHotKeyAtItsLimitDoesNotHoldUpOtherKeys},
		{"ConcurrencyByOneIsExclusiveAcrossApps", testConcurrencyByOneIsExclusiveAcrossApps},
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
