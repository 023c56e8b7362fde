package sqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

// abandon claims the queue's due rows with a transport of its own and abandons them as
// a worker that crashed would: nothing settles them and no heartbeat extends their
// leases, which stay until they pass (see probe).
func (x *testBundle) abandon(t *testing.T, q *inbox.Queue) []*source.Delivery {
	t.Helper()
	return claim(t, q, x.clock)
}

// TestClaimAfterLeasePassedAddsOneAttempt: a row claimed again after its lease passed
// (its worker crashed) comes back with one more attempt, each time; while the lease is
// set and has not passed, nobody claims it. Both a plain and a FIFO queue.
func TestClaimAfterLeasePassedAddsOneAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []inbox.Option
	}{
		{"Plain", nil},
		{"FIFO", []inbox.Option{inbox.FIFO()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				lease := time.Minute
				q := x.ib.Queue("jobs", append([]inbox.Option{inbox.Lease(lease)}, tc.opts...)...)
				for want := 1; want <= 3; want++ {
					ds := x.abandon(t, q)
					if len(ds) != 1 || ds[0].Attempt != want {
						t.Fatalf("claim %d: got %d rows (%+v), want one at attempt %d", want, len(ds), ds, want)
					}
					if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 || rows[0] != (row{attempt: want, group: "jobs", leased: true, payload: "p"}) {
						t.Fatalf("claim %d: rows %+v, want the row leased at attempt %d", want, rows, want)
					}
					x.clock.Advance(lease - time.Second)
					if again := x.abandon(t, q); len(again) != 0 {
						t.Fatalf("claim %d: the row was claimed again at %+v before its lease passed", want, again)
					}
					x.clock.Advance(time.Second + time.Millisecond)
				}
				ds := x.abandon(t, q)
				if len(ds) != 1 || ds[0].Attempt != 4 {
					t.Fatalf("claim after three crashes: got %+v, want the row at attempt 4", ds)
				}
			})
		})
	}
}

// TestSettledRetryCountsOnceNotTwice: a Retry (put back), a RetryAfter (park) and a
// retry after the heartbeat extended the lease each clear the lease, so the next claim
// sees the one attempt the settlement added and adds none of its own. Each runs in an
// App: its handler asks for the retry at attempt 1, and its next delivery of the row,
// the claim after the retry, must come at attempt 2.
func TestSettledRetryCountsOnceNotTwice(t *testing.T) {
	t.Parallel()
	lease := 30 * time.Second
	heartbeatTwice := func(t *testing.T, x *testBundle) {
		// The handler runs past two thirds of its lease; the heartbeat extends it twice
		// (the lease is set and has not passed), then the handler asks for a retry.
		for range 2 {
			x.clock.waitTimer(t, lease/3)
			before := leases(t, x.b, x.db, x.tb)
			x.clock.Advance(lease / 3)
			waitLeasesMoved(t, x.b, x.db, x.tb, before)
		}
	}
	for _, tc := range []struct {
		name string
		// retry is what the handler of attempt 1 returns, once during has run while it
		// waited; parked says the retry is not due until the clock moves a minute.
		retry  error
		during func(t *testing.T, x *testBundle)
		parked bool
	}{
		{name: "PutBack", retry: settle.Retry(errors.New("provider unavailable"))},
		{name: "Park", retry: settle.RetryAfter(time.Minute, errors.New("busy")), parked: true},
		{name: "PutBackAfterHeartbeat", retry: settle.Retry(errors.New("provider unavailable")), during: heartbeatTwice},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				first, second := make(chan struct{}, 1), make(chan int, 1)
				proceed, release := make(chan struct{}), make(chan struct{})
				x.run(t, x.ib.Queue("jobs", inbox.Lease(lease), inbox.Poll(10*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
					if m.Attempt == 1 {
						first <- struct{}{}
						<-proceed
						return tc.retry
					}
					second <- m.Attempt
					<-release
					return nil
				}))
				t.Cleanup(func() { close(release) }) // runs before the App stops
				select {
				case <-first:
				case <-time.After(waitLong):
					t.Fatal("the first claim did not reach the handler")
				}
				if tc.during != nil {
					tc.during(t, x)
				}
				close(proceed)
				evs := x.rec.WaitFor(t, waitLong, "the retry", func(evs []settle.Settled) bool {
					return count(evs, settle.ActionPutBack)+count(evs, settle.ActionPark) == 1
				})
				if evs[0].Attempt != 1 {
					t.Fatalf("settlements %+v, want the retry of attempt 1", evs)
				}
				if tc.parked {
					// Not due yet: the row waits unleased, its one attempt added.
					if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 || rows[0] != (row{attempt: 2, group: "jobs", payload: "p"}) {
						t.Fatalf("rows after the retry %+v, want the row unleased at attempt 2", rows)
					}
					x.clock.Advance(time.Minute)
				}
				select {
				case got := <-second:
					if got != 2 {
						t.Fatalf("claim after the retry: attempt %d, want 2, counted once", got)
					}
				case <-time.After(waitLong):
					t.Fatal("the row was not claimed again after the retry")
				}
				if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 || rows[0] != (row{attempt: 2, group: "jobs", leased: true, payload: "p"}) {
					t.Fatalf("rows while the claim after the retry runs %+v, want the row leased at attempt 2", rows)
				}
			})
		})
	}
}

// runs records the handler's runs as payload@attempt.
type runs struct {
	mu  sync.Mutex
	got []string
}

func (r *runs) add(m *settle.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf("%s@%d", m.Payload, m.Attempt))
}

func (r *runs) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// TestRowThatCrashesEveryWorkerIsDeadLetteredAtTheCap: a row whose every delivery
// crashes its worker spends one attempt per crash; once its delivery at the cap
// crashed too, the next claim (attempt cap + 1) is dead-lettered at the cap without
// running the handler, the dead row keeping its payload with attempt = the cap, while
// the other rows flow. Dead-letter group, dead-letter table and OnDeadLetter hook.
func TestRowThatCrashesEveryWorkerIsDeadLetteredAtTheCap(t *testing.T) {
	t.Parallel()
	const maxAttempts = 3
	lease := time.Minute
	for _, tc := range []struct {
		name string
		c    cols
		// queue returns the queue and the dead letter; dead reads the dead row back.
		queue func(t *testing.T, x *testBundle) (*inbox.Queue, string, func() []row)
	}{
		{"DeadLetterGroup", cols{}, func(t *testing.T, x *testBundle) (*inbox.Queue, string, func() []row) {
			return x.ib.Queue("jobs", inbox.Lease(lease)), "jobs.dead", func() []row { return readRows(t, x.b, x.db, x.tb) }
		}},
		{"DeadLetterTable", cols{noGroup: true}, func(t *testing.T, x *testBundle) (*inbox.Queue, string, func() []row) {
			dead := x.tb.Name + "_dead"
			createNamed(t, x.b, x.db, cols{noGroup: true}, dead)
			deadTb := x.tb
			deadTb.Name = dead
			return x.ib.Queue("", inbox.Lease(lease)), dead, func() []row { return readRows(t, x.b, x.db, deadTb) }
		}},
		{"OnDeadLetterHook", cols{}, func(t *testing.T, x *testBundle) (*inbox.Queue, string, func() []row) {
			var mu sync.Mutex
			var got []row
			hook := func(ctx context.Context, tx inbox.Tx, r inbox.DeadRow) error {
				q := quoteFor(x.b.d)
				ph := "?"
				if x.b.d == inbox.Postgres {
					ph = "$1"
				}
				if _, err := tx.ExecContext(ctx, "DELETE FROM "+q(r.Table)+" WHERE id = "+ph, r.ID); err != nil {
					return err
				}
				mu.Lock()
				got = append(got, row{attempt: r.Attempt, group: r.Dest, payload: string(r.Payload)})
				mu.Unlock()
				return nil
			}
			return x.ib.Queue("jobs", inbox.Lease(lease), inbox.OnDeadLetter(hook)), "archive", func() []row {
				mu.Lock()
				defer mu.Unlock()
				return append([]row(nil), got...)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, tc.c)
				group := "jobs"
				if tc.c.noGroup {
					group = ""
				}
				x.publish(t, group, "poison")
				q, dest, dead := tc.queue(t, x)
				// Each of the cap's deliveries crashes its worker.
				for want := 1; want <= maxAttempts; want++ {
					if ds := x.abandon(t, q); len(ds) != 1 || ds[0].Attempt != want {
						t.Fatalf("crashed delivery %d: got %+v, want the row at attempt %d", want, ds, want)
					}
					x.clock.Advance(lease + time.Millisecond)
				}
				x.publish(t, group, "ok")
				var r runs
				x.run(t, q, raw(func(ctx context.Context, m *settle.Message) error {
					r.add(m)
					return nil
				}), settle.MaxAttempts(maxAttempts), settle.DeadLetter(dest))

				evs := x.rec.WaitFor(t, waitLong, "the dead letter and the ack", finals(2))
				var deadEv *settle.Settled
				for i := range evs {
					if evs[i].Action == settle.ActionDeadLetter {
						deadEv = &evs[i]
					}
				}
				if deadEv == nil || deadEv.Attempt != maxAttempts || deadEv.Err != nil || !strings.Contains(errString(deadEv.HandlerErr), "never settled") {
					t.Fatalf("settlements %+v, want a dead letter at attempt %d saying the deliveries never settled", evs, maxAttempts)
				}
				if count(evs, settle.ActionAck) != 1 {
					t.Fatalf("settlements %+v, want the ordinary row acked", evs)
				}
				if got := r.all(); len(got) != 1 || got[0] != "ok@1" {
					t.Fatalf("handler runs %v, want only ok@1: the poison row's attempts were spent by crashes", got)
				}
				want := row{attempt: maxAttempts, payload: "poison"}
				if !tc.c.noGroup {
					want.group = dest
				}
				if rows := dead(); len(rows) != 1 || rows[0] != want {
					t.Fatalf("dead rows %+v, want %+v (payload kept, attempt = the cap, unleased)", rows, want)
				}
			})
		})
	}
}

// TestCrashesAndRetriesTogetherReachTheCapExactly: a crashed delivery counts like a
// Retry: one crash, then a handler failing every time runs at attempts 2 and 3 and the
// row is dead-lettered at the cap (3), never run past it.
func TestCrashesAndRetriesTogetherReachTheCapExactly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "flaky")
		lease := time.Minute
		q := x.ib.Queue("jobs", inbox.Lease(lease))
		if ds := x.abandon(t, q); len(ds) != 1 || ds[0].Attempt != 1 {
			t.Fatalf("crashed delivery: got %+v, want the row at attempt 1", ds)
		}
		x.clock.Advance(lease + time.Millisecond)
		var r runs
		x.run(t, q, raw(func(ctx context.Context, m *settle.Message) error {
			r.add(m)
			return errors.New("still failing")
		}), settle.MaxAttempts(3), settle.DeadLetter("jobs.dead"))
		evs := x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionDeadLetter || last.Attempt != 3 {
			t.Fatalf("settlements %+v, want a dead letter at attempt 3", evs)
		}
		if got := r.all(); len(got) != 2 || got[0] != "flaky@2" || got[1] != "flaky@3" {
			t.Fatalf("handler runs %v, want [flaky@2 flaky@3]: the crash spent attempt 1", got)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 || rows[0] != (row{attempt: 3, group: "jobs.dead", payload: "flaky"}) {
			t.Fatalf("rows %+v, want the row in jobs.dead at attempt 3", rows)
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
