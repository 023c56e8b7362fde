package examplerun

import (
	"errors"
	"testing"

	"github.com/settlekit/settle"
)

// A retry's event comes after the retry is written, so the message's next delivery may
// already be running: that late event must not erase the next delivery from the tally
// (it did, and the run then waited for a settlement it had stopped counting).
func TestTallyCountsAFinalSettlementWhoseRetryEventCameAfterTheNextDelivery(t *testing.T) {
	t.Parallel()
	tl := NewTally(1, "")
	tl.Claim("send", &settle.Message{ID: "7", Attempt: 1})
	tl.Claim("send", &settle.Message{ID: "7", Attempt: 2}) // claimed again once put back
	tl.Settled(settle.Settled{Mount: "send", ID: "7", Attempt: 1, Action: settle.ActionCopy})
	tl.Settled(settle.Settled{Mount: "send", ID: "7", Attempt: 2, Action: settle.ActionAck})
	select {
	case <-tl.Done():
	default:
		t.Fatalf("the ack of attempt 2 went uncounted: %+v", tl.Counts())
	}
	if got, want := tl.Counts(), (Counts{Acked: 1}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

// Only this run's applied settlements count; with a review mount the run ends once
// every dead letter is reviewed.
func TestTallyCountsOnlyItsOwnAppliedSettlementsAndWaitsForReviews(t *testing.T) {
	t.Parallel()
	tl := NewTally(2, "review")
	tl.Settled(settle.Settled{Mount: "send", ID: "other", Attempt: 1, Action: settle.ActionAck}) // another run's
	tl.Claim("send", &settle.Message{ID: "1", Attempt: 1})
	tl.Settled(settle.Settled{Mount: "send", ID: "1", Attempt: 1, Action: settle.ActionAck, Err: errFailed})
	tl.Claim("send", &settle.Message{ID: "1", Attempt: 2})
	tl.Settled(settle.Settled{Mount: "send", ID: "1", Attempt: 2, Action: settle.ActionPark})
	tl.Claim("send", &settle.Message{ID: "1", Attempt: 3})
	tl.Settled(settle.Settled{Mount: "send", ID: "1", Attempt: 3, Action: settle.ActionAck})
	tl.Claim("send", &settle.Message{ID: "2", Attempt: 1})
	tl.Settled(settle.Settled{Mount: "send", ID: "2", Attempt: 1, Action: settle.ActionDeadLetter})
	select {
	case <-tl.Done():
		t.Fatal("done before the dead letter was reviewed")
	default:
	}
	tl.Claim("review", &settle.Message{ID: "2", Attempt: 1})
	tl.Settled(settle.Settled{Mount: "review", ID: "2", Attempt: 1, Action: settle.ActionAck})
	select {
	case <-tl.Done():
	default:
		t.Fatalf("not done after the review: %+v", tl.Counts())
	}
	if got, want := tl.Counts(), (Counts{Acked: 1, Dead: 1, Delayed: 1, Reviewed: 1}); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
}

var errFailed = errors.New("the write failed")
