package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

// never is a poll interval no test waits for: a row it finds came by a wake.
const never = time.Hour

// TestRetryIsClaimedAgainWithoutWaitingForThePoll: a row put back by Retry is due at
// once, and the put-back wakes the queue's own Fetch, so a row retried four times is
// handled five times although the queue polls once an hour.
func TestRetryIsClaimedAgainWithoutWaitingForThePoll(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		x.run(t, x.ib.Queue("jobs", inbox.Poll(never)), raw(func(_ context.Context, m *settle.Message) error {
			if m.Attempt < 5 {
				return settle.Retry(errors.New("again"))
			}
			return nil
		}))
		evs := x.rec.WaitFor(t, waitLong, "the ack at attempt 5", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 5 {
			t.Fatalf("got %+v, want the ack at attempt 5", last)
		}
	})
}

// TestPutBackWakesEveryQueueOfTheInbox: a put-back through one queue wakes a Fetch of
// another queue of the same Inbox and group that is waiting (its poll an hour away):
// it claims the row at once.
func TestPutBackWakesEveryQueueOfTheInbox(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		a := probe(t, x.ib.Queue("jobs", inbox.Poll(never)), nil)
		ds, err := a.Fetch(context.Background(), 10, 0)
		if err != nil || len(ds) != 1 {
			t.Fatalf("A's claim: got %d rows, err %v; want 1", len(ds), err)
		}
		other := probe(t, x.ib.Queue("jobs", inbox.Poll(never)), nil)
		if got, err := other.Fetch(context.Background(), 10, 0); err != nil || len(got) != 0 {
			t.Fatalf("B's first claim: got %d rows, err %v; want none (A holds the row)", len(got), err)
		}
		// B is idle now: its next claim waits for its poll, an hour away, or a wake.
		claimed := make(chan []*source.Delivery, 1)
		go func() {
			got, err := other.Fetch(context.Background(), 10, waitLong)
			if err != nil {
				t.Errorf("B's fetch: %v", err)
			}
			claimed <- got
		}()
		if err := errors.Join(a.Moves(context.Background(), []source.Move{{Action: source.ActionPutBack, Delivery: ds[0]}})...); err != nil {
			t.Fatalf("A's put-back: %v", err)
		}
		if got := <-claimed; len(got) != 1 || got[0].Attempt != 2 {
			t.Fatalf("B's fetch: got %+v, want the row put back, at attempt 2, before its wait ended", got)
		}
	})
}

// TestRetryAfterComesBackWhenDueWhateverThePoll: an idle queue asks the database when
// its earliest parked row comes due and claims it then, so RetryAfter(300ms) comes back
// although the queue polls once an hour.
func TestRetryAfterComesBackWhenDueWhateverThePoll(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: x.rec.OnSettled}) // the wall clock
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(x.ib.Queue("jobs", inbox.Poll(never)), raw(func(_ context.Context, m *settle.Message) error {
			if m.Attempt == 1 {
				return settle.RetryAfter(300*time.Millisecond, errors.New("busy"))
			}
			return nil
		}))
		startApp(t, app)
		evs := x.rec.WaitFor(t, waitLong, "the ack after the delay", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 2 {
			t.Fatalf("got %+v, want the ack at attempt 2", last)
		}
	})
}
