package inbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/settlekit/settle/internal/source"
)

func TestSettlementAfterLeaseTakenOverChangesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		ctx := context.Background()
		a := x.transport(t, x.ib.Queue("jobs", Lease(time.Minute)))
		first, err := a.Fetch(ctx, 10, 0)
		if err != nil || len(first) != 1 {
			t.Fatalf("first claim: got %d rows, %v", len(first), err)
		}
		// A's lease passes (A stopped extending it: a crashed worker) and B claims the row.
		a.mu.Lock()
		delete(a.inflight, first[0].Raw.(*held))
		a.mu.Unlock()
		x.clock.Advance(time.Minute + time.Millisecond)
		bq := x.transport(t, x.ib.Queue("jobs", Lease(time.Minute)))
		second, err := bq.Fetch(ctx, 10, 0)
		if err != nil || len(second) != 1 {
			t.Fatalf("second claim: got %d rows, %v", len(second), err)
		}
		if second[0].Attempt != 2 {
			t.Fatalf("B's claim at attempt %d, want 2 (A's delivery never settled and counts)", second[0].Attempt)
		}
		for name, settle := range map[string]func() error{
			"Ack": func() error { return a.Ack(ctx, first) },
			"PutBack": func() error {
				return a.Moves(ctx, []source.Move{{Action: source.ActionPutBack, Delivery: first[0]}})[0]
			},
			"Park": func() error {
				return a.Moves(ctx, []source.Move{{Action: source.ActionPark, Delay: time.Hour, Delivery: first[0]}})[0]
			},
		} {
			if err := settle(); !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("%s by the worker that lost its lease: got %v, want ErrLeaseLost", name, err)
			}
		}
		rows := readRows(t, b, x.db, x.tb)
		if len(rows) != 1 || rows[0].attempt != 2 || !rows[0].leased {
			t.Fatalf("got rows %+v, want the row as B claimed it (attempt 2, leased)", rows)
		}
		if err := bq.Ack(ctx, second); err != nil {
			t.Fatalf("ack by the lease holder: %v", err)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("got rows %+v after B's ack, want none", rows)
		}
	})
}

func TestHeartbeatExtendsLeaseOfLongRunningHandler(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		ctx := context.Background()
		a := x.transport(t, x.ib.Queue("jobs", Lease(30*time.Second)))
		passes := make(chan struct{}, 1)
		a.extended = func() { passes <- struct{}{} }
		held, err := a.Fetch(ctx, 10, 0)
		if err != nil || len(held) != 1 {
			t.Fatalf("claim: got %d rows, %v", len(held), err)
		}
		other := x.transport(t, x.ib.Queue("jobs", Lease(30*time.Second)))
		// Two minutes pass while A's handler runs; every 10 s the heartbeat extends.
		for i := 0; i < 12; i++ {
			x.clock.waitTimers(t, 2) // both heartbeats wait
			x.clock.Advance(10 * time.Second)
			select {
			case <-passes:
			case <-time.After(waitLong):
				t.Fatal("the heartbeat did not run")
			}
			if ds, err := other.Fetch(ctx, 10, 0); err != nil || len(ds) != 0 {
				t.Fatalf("after %ds: another worker claimed %d rows (err %v); want none", (i+1)*10, len(ds), err)
			}
		}
		if err := a.Ack(ctx, held); err != nil {
			t.Fatalf("ack after the heartbeats: %v", err)
		}
	})
}
