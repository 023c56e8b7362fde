package sqltest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/sourcetest"
	"github.com/settlekit/settle/settletest"
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
// of its clock on a 30 s lease; every 10 s the heartbeat extends the lease, so a worker
// elsewhere (a transport on a clock of its own that moves with the App's) finds nothing
// to claim, and the handler's ack, after it all, applies.
func TestHeartbeatExtendsLeaseOfLongRunningHandler(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		const lease = 30 * time.Second
		h, runs, unblock := blocking(t)
		x.run(t, x.ib.Queue("jobs", inbox.Lease(lease), inbox.Poll(10*time.Millisecond)), h)
		receive(t, runs, "the claim")
		x.heartbeatsPass(t, lease, 12) // two minutes
		unblock()
		evs := x.rec.WaitFor(t, waitLong, "the ack after the heartbeats", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 1 {
			t.Fatalf("got %+v, want the ack of attempt 1 applied", last)
		}
	})
}

// TestHeartbeatCoversRowsClaimedAndNotStarted: with Concurrency(1) a claim reads ahead
// (three rows, one running, two waiting in memory); the heartbeat extends all three
// leases, so a worker elsewhere claims none of them through two leases of the App's
// clock, and each row runs once, at attempt 1.
func TestHeartbeatCoversRowsClaimedAndNotStarted(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "a", "b", "c")
		const lease = 30 * time.Second
		h, runs, unblock := blocking(t)
		x.run(t, x.ib.Queue("jobs", inbox.Lease(lease), inbox.Poll(5*time.Millisecond)), h, settle.Concurrency(1))
		receive(t, runs, "the first row's start")
		if got := leases(t, b, x.db, x.tb); len(got) != 3 || slices.Contains(got, "<nil>") {
			t.Fatalf("got leases %v, want all three rows leased by the one claim", got)
		}
		x.heartbeatsPass(t, lease, 6) // two leases
		unblock()
		evs := x.rec.WaitFor(t, waitLong, "the three acks", finals(3))
		for _, ev := range evs {
			if ev.Action != settle.ActionAck || ev.Attempt != 1 || ev.Err != nil {
				t.Fatalf("got %+v, want three acks at attempt 1", evs)
			}
		}
	})
}

// TestHeartbeatExtendsLeasesInBatchesAndReportsATakeoverOnce: a worker holds 205 rows;
// another takes one over once its lease passed; each heartbeat of the first then extends
// the other 204 leases in one statement per batch of up to 200 rows (so at most two new
// lease values, each a statement's "now" plus the lease), and reports the row taken over
// once, however many heartbeats pass, never writing its lease.
func TestHeartbeatExtendsLeasesInBatchesAndReportsATakeoverOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		const n, lease = 205, time.Minute
		payloads := make([]string, n)
		for i := range payloads {
			payloads[i] = fmt.Sprint(i)
		}
		x.publish(t, "jobs", payloads...)
		q := x.ib.Queue("jobs", inbox.Lease(lease))
		logs := &warnings{}
		// The worker's "now" follows its heartbeat's clock, as an App's would: each
		// heartbeat moves the leases a third of the lease on.
		aClock := newFakeClock()
		a := q.Transport(source.Env{Clock: aClock, Logger: slog.New(logs), Mount: "a", TestClock: aClock})
		if errs := a.Validate(source.Policy{}); len(errs) > 0 {
			t.Fatalf("validate: %v", errs)
		}
		if err := a.Open(context.Background()); err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = a.Close(context.Background()) })
		if ds, err := a.Fetch(context.Background(), n, 0); err != nil || len(ds) != n {
			t.Fatalf("the worker claimed %d rows (err %v), want %d", len(ds), err, n)
		}
		bClock := newFakeClock()
		other := probe(t, q, bClock)
		bClock.Advance(lease + time.Millisecond)
		taken, err := other.Fetch(context.Background(), 1, 0)
		if err != nil || len(taken) != 1 || taken[0].Attempt != 2 {
			t.Fatalf("the other worker claimed %+v (err %v), want one row at attempt 2", taken, err)
		}
		ids := column(t, x.db, fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", quoteFor(b.d)(x.tb.ID), quoteFor(b.d)(x.tb.Name), quoteFor(b.d)(x.tb.ID)))
		for beat := 1; beat <= 3; beat++ {
			aClock.waitTimer(t, lease/3)
			before := leases(t, b, x.db, x.tb)
			aClock.Advance(lease / 3)
			aClock.waitTimer(t, lease/3) // the next heartbeat waits: this one is done
			after := leases(t, b, x.db, x.tb)
			values := map[string]bool{}
			for i, id := range ids {
				switch {
				case fmt.Sprint(id) == taken[0].ID && after[i] != before[i]:
					t.Fatalf("heartbeat %d wrote the lease of row %s, taken over by the other worker", beat, taken[0].ID)
				case fmt.Sprint(id) != taken[0].ID && after[i] == before[i]:
					t.Fatalf("heartbeat %d left the lease of row %v at %s", beat, id, before[i])
				case fmt.Sprint(id) != taken[0].ID:
					values[after[i]] = true
				}
			}
			if len(values) > 2 {
				t.Fatalf("heartbeat %d wrote %d distinct leases on %d rows, want at most 2 (one statement per batch of up to 200 rows)", beat, len(values), n-1)
			}
		}
		if got, want := logs.messages(), []string{"taken over: " + taken[0].ID}; !slices.Equal(got, want) {
			t.Fatalf("warnings %q, want %q (the row taken over, once)", got, want)
		}
	})
}

// warnings is a slog handler keeping the warnings about rows that no longer hold their
// leases (a takeover, in the tests), each as "taken over: <msg_id>".
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "no longer holds its lease") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "msg_id" {
			w.mu.Lock()
			w.msgs = append(w.msgs, "taken over: "+a.Value.String())
			w.mu.Unlock()
		}
		return true
	})
	return nil
}

func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (w *warnings) messages() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.msgs)
}

// blocking returns a handler that sends each delivery's attempt on runs and returns nil
// once unblock is called (at the latest as the test ends, before its App stops).
func blocking(t *testing.T) (h settle.Handler, runs chan int, unblock func()) {
	runs, release := make(chan int, 16), make(chan struct{})
	unblock = sync.OnceFunc(func() { close(release) })
	t.Cleanup(unblock)
	return raw(func(ctx context.Context, m *settle.Message) error {
		runs <- m.Attempt
		<-release
		return nil
	}), runs, unblock
}

// heartbeatsPass moves the bundle's clock a third of lease at a time, steps times,
// waiting each time for the App's heartbeat to extend every lease of the table. After
// each step a worker elsewhere (a transport whose test clock is its own, moved alike,
// so that no claim of the App's brings the App's leases up to date: only its heartbeat
// does) must find nothing to claim.
func (x *testBundle) heartbeatsPass(t *testing.T, lease time.Duration, steps int) {
	t.Helper()
	elsewhere := newFakeClock()
	other := probe(t, x.ib.Queue("jobs", inbox.Lease(lease)), elsewhere)
	for i := range steps {
		x.clock.waitTimer(t, lease/3) // the heartbeat waits
		before := leases(t, x.b, x.db, x.tb)
		x.clock.Advance(lease / 3)
		elsewhere.Advance(lease / 3)
		waitLeasesMoved(t, x.b, x.db, x.tb, before)
		if ds, err := other.Fetch(context.Background(), 10, 0); err != nil || len(ds) != 0 {
			t.Fatalf("after %s: a worker elsewhere claimed %d rows (err %v); want none", time.Duration(i+1)*lease/3, len(ds), err)
		}
	}
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

// TestAdvancePastTheLeaseNeverRunsAHandlerTwice: under a test clock, Advance(1 min)
// moves the queue's "now" past the lease (30 s) of a row whose handler is still
// running; the queue's own claims after each Advance (each takes a row published after
// it) must not take the running row again: advancing the clock passes the time for the
// heartbeat too. Twenty runs per backend, each with three Advances, under -race in CI.
func TestAdvancePastTheLeaseNeverRunsAHandlerTwice(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for run := range 20 {
			t.Run(fmt.Sprintf("Run%d", run), func(t *testing.T) {
				x := setup(t, b, cols{})
				clk := settletest.NewClock(time.Now().Truncate(time.Millisecond))
				x.publish(t, "jobs", "long")
				var runs atomic.Int32
				started, release := make(chan struct{}, 1), make(chan struct{})
				runApp(t, clk, x.rec, x.ib.Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(_ context.Context, m *settle.Message) error {
					if string(m.Payload) == "long" {
						runs.Add(1)
						select {
						case started <- struct{}{}:
						default: // a second run: counted, and it must not block the App's stop
						}
						<-release
					}
					return nil
				}))
				unblock := sync.OnceFunc(func() { close(release) })
				t.Cleanup(unblock) // runs before the App stops
				select {
				case <-started:
				case <-time.After(waitLong):
					t.Fatal("the handler did not start")
				}
				for i := 1; i <= 3; i++ {
					clk.Advance(time.Minute)
					// A row published after the Advance is handled only by a claim that saw it.
					x.publish(t, "jobs", fmt.Sprintf("after-%d", i))
					x.rec.WaitFor(t, waitLong, "the ack of the row published after the Advance", func(evs []settle.Settled) bool { return count(evs, settle.ActionAck) == i })
				}
				unblock()
				evs := x.rec.WaitFor(t, waitLong, "the long row's ack", finals(4))
				if n := runs.Load(); n != 1 {
					t.Fatalf("the long row's handler ran %d times, want once; settlements %+v", n, evs)
				}
				for _, ev := range evs {
					if ev.Err != nil {
						t.Fatalf("settlement %+v failed, want every one applied", ev)
					}
				}
			})
		}
	})
}
