package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/settlekit/settle"
)

var summaryRE = regexp.MustCompile(`^settled ([0-9]+): acked ([0-9]+), dropped ([0-9]+), dead-lettered ([0-9]+), reviewed ([0-9]+)$`)

func TestMailerSettlesEveryMailAndReviewsDeadLetters(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), []string{"-n", "60", "-review"}, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	m := summaryRE.FindStringSubmatch(lines[len(lines)-1])
	if m == nil {
		t.Fatalf("last line %q does not match %s", lines[len(lines)-1], summaryRE)
	}
	if m[1] != "60" || m[4] != m[5] {
		t.Fatalf("got %q, want 60 settled and every dead letter reviewed", lines[len(lines)-1])
	}
}

// A retry's event comes after the retry is written, so the mail's next delivery may
// already be running: that late event must not erase the next delivery from the tally
// (it did, and the run then waited for a settlement it had stopped counting).
func TestTallyCountsAFinalSettlementWhoseRetryEventCameAfterTheNextDelivery(t *testing.T) {
	t.Parallel()
	tl := newTally(1, false)
	tl.claim(mountSend, &settle.Message{ID: "7", Attempt: 1})
	tl.claim(mountSend, &settle.Message{ID: "7", Attempt: 2}) // claimed again once put back
	tl.settled(settle.Settled{Mount: mountSend, ID: "7", Attempt: 1, Action: settle.ActionCopy})
	tl.settled(settle.Settled{Mount: mountSend, ID: "7", Attempt: 2, Action: settle.ActionAck})
	select {
	case <-tl.done:
	default:
		t.Fatalf("the ack of attempt 2 went uncounted: %s", tl.summary())
	}
	if got, want := tl.summary(), "settled 1: acked 1, dropped 0, dead-lettered 0, reviewed 0"; got != want {
		t.Fatalf("tally %q, want %q", got, want)
	}
}

// Only this run's applied settlements count, a park is not final, and with the review
// mount the run ends once every dead letter is reviewed.
func TestTallyCountsOnlyItsOwnAppliedSettlementsAndWaitsForReviews(t *testing.T) {
	t.Parallel()
	tl := newTally(2, true)
	tl.settled(settle.Settled{Mount: mountSend, ID: "other", Attempt: 1, Action: settle.ActionAck}) // another run's
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 1, Action: settle.ActionAck, Err: errors.New("the write failed")})
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 2})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 2, Action: settle.ActionPark})
	tl.claim(mountSend, &settle.Message{ID: "1", Attempt: 3})
	tl.settled(settle.Settled{Mount: mountSend, ID: "1", Attempt: 3, Action: settle.ActionAck})
	tl.claim(mountSend, &settle.Message{ID: "2", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountSend, ID: "2", Attempt: 1, Action: settle.ActionDeadLetter})
	select {
	case <-tl.done:
		t.Fatal("done before the dead letter was reviewed")
	default:
	}
	tl.claim(mountReview, &settle.Message{ID: "2", Attempt: 1})
	tl.settled(settle.Settled{Mount: mountReview, ID: "2", Attempt: 1, Action: settle.ActionAck})
	select {
	case <-tl.done:
	default:
		t.Fatalf("not done after the review: %s", tl.summary())
	}
	if got, want := tl.summary(), "settled 2: acked 1, dropped 0, dead-lettered 1, reviewed 1"; got != want {
		t.Fatalf("tally %q, want %q", got, want)
	}
}
