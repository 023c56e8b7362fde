package sqltest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestSettlementAfterLeaseTakenOverChangesNothing: worker A's handler runs past its
// lease without its heartbeat extending it (A's App runs on a clock that stands still:
// a worker stalled or cut off from the database), worker B's App, on a clock a lease
// ahead, claims the row (attempt 2), and then A's handler returns: A's settlement (an
// ack, a put-back or a park) reports ErrLeaseLost and changes nothing; B's ack deletes
// the row.
func TestSettlementAfterLeaseTakenOverChangesNothing(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	for _, tc := range []struct {
		name   string
		action settle.Action
		result error // what A's handler returns
	}{
		{"Ack", settle.ActionAck, nil},
		{"PutBack", settle.ActionPutBack, settle.Retry(errors.New("provider unavailable"))},
		{"Park", settle.ActionPark, settle.RetryAfter(time.Hour, errors.New("busy"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				q := x.ib.Queue("jobs", inbox.Lease(lease), inbox.Poll(10*time.Millisecond))

				aRuns, aRelease := make(chan int, 1), make(chan struct{})
				aRec := sourcetest.NewRecorder()
				runApp(t, newFakeClock(), aRec, q, raw(func(ctx context.Context, m *settle.Message) error {
					aRuns <- m.Attempt
					<-aRelease
					return tc.result
				}))
				t.Cleanup(func() { close(aRelease) }) // runs before A's App stops
				if got := receive(t, aRuns, "A's claim"); got != 1 {
					t.Fatalf("A's claim at attempt %d, want 1", got)
				}
				bRuns, bRelease := make(chan int, 1), make(chan struct{})
				bClock := newFakeClock()
				runApp(t, bClock, x.rec, q, raw(func(ctx context.Context, m *settle.Message) error {
					bRuns <- m.Attempt
					<-bRelease
					return nil
				}))
				t.Cleanup(func() { close(bRelease) }) // runs before B's App stops
				// B's queue is open (its heartbeat waits on its clock) before its clock moves:
				// then B's "now" is the database's plus the lease and a millisecond.
				bClock.waitTimer(t, lease/3)
				bClock.Advance(lease + time.Millisecond)
				if got := receive(t, bRuns, "B's claim"); got != 2 {
					t.Fatalf("B's claim at attempt %d, want 2 (A's delivery never settled and counts)", got)
				}

				aRelease <- struct{}{} // A's handler returns; its settlement meets B's lease
				evs := aRec.WaitFor(t, waitLong, "A's settlement", func(evs []settle.Settled) bool { return len(evs) > 0 })
				if ev := evs[0]; ev.Action != tc.action || !errors.Is(ev.Err, inbox.ErrLeaseLost) {
					t.Fatalf("A's settlement %+v, want %s failing with ErrLeaseLost", ev, tc.action)
				}
				rows := readRows(t, b, x.db, x.tb)
				if len(rows) != 1 || rows[0].attempt != 2 || !rows[0].leased {
					t.Fatalf("got rows %+v, want the row as B claimed it (attempt 2, leased)", rows)
				}

				bRelease <- struct{}{}
				evs = x.rec.WaitFor(t, waitLong, "B's ack", finals(1))
				if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 2 || last.Err != nil {
					t.Fatalf("B's settlement %+v, want an ack of attempt 2 by the lease holder", last)
				}
				if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
					t.Fatalf("got rows %+v after B's ack, want none", rows)
				}
			})
		})
	}
}

// TestHeartbeatExtendsLeaseOfLongRunningHandler: an App's handler runs for two minutes
// of its clock on a 30 s lease; every 10 s the heartbeat extends the lease, so another
// worker's claim on the same clock finds nothing, and the handler's ack, after it all,
// applies.
func TestHeartbeatExtendsLeaseOfLongRunningHandler(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		const lease = 30 * time.Second
		runs, release := make(chan int, 1), make(chan struct{})
		x.run(t, x.ib.Queue("jobs", inbox.Lease(lease), inbox.Poll(10*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			runs <- m.Attempt
			<-release
			return nil
		}))
		t.Cleanup(func() { close(release) }) // runs before the App stops
		receive(t, runs, "the claim")
		other := probe(t, x.ib.Queue("jobs", inbox.Lease(lease)), x.clock)
		// Two minutes pass while the handler runs; every 10 s the heartbeat extends.
		for i := 0; i < 12; i++ {
			x.clock.waitTimer(t, lease/3) // the heartbeat waits
			before := leaseOf(t, b, x.db, x.tb)
			x.clock.Advance(lease / 3)
			waitLeaseMoved(t, b, x.db, x.tb, before)
			if ds, err := other.Fetch(context.Background(), 10, 0); err != nil || len(ds) != 0 {
				t.Fatalf("after %ds: another worker claimed %d rows (err %v); want none", (i+1)*10, len(ds), err)
			}
		}
		release <- struct{}{}
		evs := x.rec.WaitFor(t, waitLong, "the ack after the heartbeats", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 1 {
			t.Fatalf("got %+v, want the ack of attempt 1 applied", last)
		}
	})
}

// receive returns what ch delivers, failing t after waitLong.
func receive(t *testing.T, ch <-chan int, what string) int {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLong):
		t.Fatalf("timed out waiting for %s", what)
		return 0
	}
}
