package inbox

import (
	"context"
	"testing"
	"time"
)

// TestAnIdleQueueWhoseNextDueQueryFailsClaimsAgainSoon: when an idle queue cannot learn
// when its next waiting row comes due (the query fails: here the echo driver's row does
// not scan), it claims again within nextDueRetry, not a poll later (an hour here), which
// would strand a row retried after a short delay; a query that finds no waiting row
// leaves only the poll.
func TestAnIdleQueueWhoseNextDueQueryFailsClaimsAgainSoon(t *testing.T) {
	t.Parallel()
	const poll = time.Hour
	tr := &transport{
		d: postgres{},
		q: &Queue{group: "jobs", cfg: queueConfig{poll: poll}, ib: &Inbox{db: openEcho(t), dialect: postgres{}}},
		// Two arguments: the echo driver returns a row of two columns, which does not
		// scan into one.
		s: &statements{nextDue: stmt{text: "SELECT next due", args: []string{"skew", "group"}}},
	}
	before := time.Now()
	due := tr.nextDue(context.Background())
	if due.IsZero() || due.After(time.Now().Add(nextDueRetry)) || due.Before(before.Add(nextDueRetry)) {
		t.Fatalf("next due after a failed query: %v from now, want %s", due.Sub(before), nextDueRetry)
	}
	idle := idleState{since: before, due: due}
	if got := idle.until(poll); !got.Equal(due) {
		t.Fatalf("the idle queue claims again at %v from now, want %s", got.Sub(before), nextDueRetry)
	}
	if got := (idleState{since: before}).until(poll); !got.Equal(before.Add(poll)) {
		t.Fatalf("with no waiting row the idle queue claims again at %v from now, want the poll (%s)", got.Sub(before), poll)
	}
}
