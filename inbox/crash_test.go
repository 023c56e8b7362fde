package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/source"
)

// abandon claims the queue's due rows with a transport of its own and abandons them as
// a worker that crashed would: nothing settles them and no heartbeat extends their
// leases, which stay until they pass.
func (x *testBundle) abandon(t *testing.T, q *Queue) []*source.Delivery {
	t.Helper()
	tr := x.transport(t, q)
	ds, err := tr.Fetch(context.Background(), 10, 0)
	if err != nil {
		t.Fatalf("claim by the worker that crashes: %v", err)
	}
	tr.mu.Lock()
	for _, d := range ds {
		delete(tr.inflight, d.Raw.(*held))
	}
	tr.mu.Unlock()
	return ds
}

// TestClaimAfterLeasePassedAddsOneAttempt: a row claimed again after its lease passed
// (its worker crashed) comes back with one more attempt, each time; while the lease is
// set and has not passed, nobody claims it. Both a plain and a FIFO queue.
func TestClaimAfterLeasePassedAddsOneAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"Plain", nil},
		{"FIFO", []Option{FIFO()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				lease := time.Minute
				q := x.ib.Queue("jobs", append([]Option{Lease(lease)}, tc.opts...)...)
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
// sees the one attempt the settlement added and adds none of its own.
func TestSettledRetryCountsOnceNotTwice(t *testing.T) {
	t.Parallel()
	lease := 30 * time.Second
	for _, tc := range []struct {
		name  string
		retry func(t *testing.T, x *testBundle, tr *transport, passes <-chan struct{}, d *source.Delivery) error
	}{
		{"PutBack", func(_ *testing.T, _ *testBundle, tr *transport, _ <-chan struct{}, d *source.Delivery) error {
			return tr.Moves(context.Background(), []source.Move{{Action: source.ActionPutBack, Delivery: d}})[0]
		}},
		{"Park", func(_ *testing.T, x *testBundle, tr *transport, _ <-chan struct{}, d *source.Delivery) error {
			if err := tr.Moves(context.Background(), []source.Move{{Action: source.ActionPark, Delay: time.Second, Delivery: d}})[0]; err != nil {
				return err
			}
			x.clock.Advance(time.Second)
			return nil
		}},
		{"PutBackAfterHeartbeat", func(t *testing.T, x *testBundle, tr *transport, passes <-chan struct{}, d *source.Delivery) error {
			// The handler runs past two thirds of its lease; the heartbeat extends it twice
			// (the lease is set and has not passed), then the handler asks for a retry.
			for range 2 {
				x.clock.waitTimers(t, 1)
				x.clock.Advance(lease / 3)
				select {
				case <-passes:
				case <-time.After(waitLong):
					t.Fatal("the heartbeat did not run")
				}
			}
			return tr.Moves(context.Background(), []source.Move{{Action: source.ActionPutBack, Delivery: d}})[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, cols{})
				x.publish(t, "jobs", "p")
				q := x.ib.Queue("jobs", Lease(lease))
				a := x.transport(t, q)
				passes := make(chan struct{}, 4)
				a.extended = func() { passes <- struct{}{} }
				first, err := a.Fetch(context.Background(), 10, 0)
				if err != nil || len(first) != 1 || first[0].Attempt != 1 {
					t.Fatalf("first claim: got %+v, %v; want one row at attempt 1", first, err)
				}
				if err := tc.retry(t, x, a, passes, first[0]); err != nil {
					t.Fatalf("retry: %v", err)
				}
				if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 || rows[0] != (row{attempt: 2, group: "jobs", payload: "p"}) {
					t.Fatalf("rows after the retry %+v, want the row unleased at attempt 2", rows)
				}
				second, err := x.transport(t, q).Fetch(context.Background(), 10, 0)
				if err != nil || len(second) != 1 || second[0].Attempt != 2 {
					t.Fatalf("claim after the retry: got %+v, %v; want the row at attempt 2, counted once", second, err)
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
		queue func(t *testing.T, x *testBundle) (*Queue, string, func() []row)
	}{
		{"DeadLetterGroup", cols{}, func(t *testing.T, x *testBundle) (*Queue, string, func() []row) {
			return x.ib.Queue("jobs", Lease(lease)), "jobs.dead", func() []row { return readRows(t, x.b, x.db, x.tb) }
		}},
		{"DeadLetterTable", cols{noGroup: true}, func(t *testing.T, x *testBundle) (*Queue, string, func() []row) {
			dead := x.tb.Name + "_dead"
			createNamed(t, x.b, x.db, cols{noGroup: true}, dead)
			deadTb := x.tb
			deadTb.Name = dead
			return x.ib.Queue("", Lease(lease)), dead, func() []row { return readRows(t, x.b, x.db, deadTb) }
		}},
		{"OnDeadLetterHook", cols{}, func(t *testing.T, x *testBundle) (*Queue, string, func() []row) {
			var mu sync.Mutex
			var got []row
			hook := func(ctx context.Context, tx Tx, r DeadRow) error {
				q := quoteFor(x.b.d)
				ph := "?"
				if x.b.d == Postgres {
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
			return x.ib.Queue("jobs", Lease(lease), OnDeadLetter(hook)), "archive", func() []row {
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
		q := x.ib.Queue("jobs", Lease(lease))
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
