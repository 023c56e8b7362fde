package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/sourcetest"
)

const waitLong = 15 * time.Second

type testBundle struct {
	b     backend
	clock *fakeClock
	db    *sql.DB
	ib    *inbox.Inbox
	rec   *sourcetest.Recorder
	tb    inbox.Table
}

func setup(t *testing.T, b backend, c cols) *testBundle {
	t.Helper()
	db := b.open(t)
	tb := createTable(t, b, db, c)
	x := &testBundle{b: b, clock: newFakeClock(), db: db, ib: inbox.New(db, b.d, tb), rec: sourcetest.NewRecorder(), tb: tb}
	return x
}

// run starts an App with one mount on the bundle's fake clock; it stops after the test.
func (x *testBundle) run(t *testing.T, src settle.Source, h settle.Handler, opts ...settle.MountOption) {
	t.Helper()
	runApp(t, x.clock, x.rec, src, h, opts...)
}

// runApp starts an App with one mount on clk, its settlements recorded by rec; it stops
// after the test.
func runApp(t *testing.T, clk clock.Clock, rec *sourcetest.Recorder, src settle.Source, h settle.Handler, opts ...settle.MountOption) {
	t.Helper()
	app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: rec.OnSettled, Test: settle.TestConfig{Clock: clk}})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(src, h, opts...)
	startApp(t, app)
}

func startApp(t *testing.T, app *settle.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func (x *testBundle) publish(t *testing.T, group string, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		if _, err := x.ib.PublishBytes(context.Background(), group, []byte(p)); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
}

func finals(n int) func([]settle.Settled) bool {
	return func(evs []settle.Settled) bool { return sourcetest.Finals(evs) >= n }
}

func count(evs []settle.Settled, a settle.Action) int {
	n := 0
	for _, e := range evs {
		if e.Action == a && e.Err == nil {
			n++
		}
	}
	return n
}

func raw(fn func(ctx context.Context, m *settle.Message) error) settle.Handler {
	return settle.HandlerFunc(fn)
}

func TestAckAndDropDeleteTheRow(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "ok", "bad")
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			if string(m.Payload) == "bad" {
				return settle.Drop(errors.New("no such mailbox"))
			}
			return nil
		}))
		evs := x.rec.WaitFor(t, waitLong, "two final settlements", finals(2))
		if count(evs, settle.ActionAck) != 1 || count(evs, settle.ActionDrop) != 1 {
			t.Fatalf("got %+v, want one ack and one drop", evs)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("got rows %+v, want none", rows)
		}
	})
}

func TestRetryClearsLeaseAndAddsOneAttempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		var mu sync.Mutex
		var attempts []int
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			mu.Lock()
			attempts = append(attempts, m.Attempt)
			mu.Unlock()
			if m.Attempt < 3 {
				return settle.Retry(errors.New("provider unavailable"))
			}
			return nil
		}))
		evs := x.rec.WaitFor(t, waitLong, "the ack", finals(1))
		if got := count(evs, settle.ActionPutBack); got != 2 {
			t.Fatalf("got %d put-backs, want 2: %+v", got, evs)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 3 || attempts[0] != 1 || attempts[1] != 2 || attempts[2] != 3 {
			t.Fatalf("got attempts %v, want [1 2 3]", attempts)
		}
	})
}

func TestRetryUnderCapIsTheSameInPlaceUpdate(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			if m.Attempt < 2 {
				return settle.Retry(errors.New("later"))
			}
			return nil
		}), settle.MaxAttempts(5), settle.DeadLetter("jobs.dead"))
		evs := x.rec.WaitFor(t, waitLong, "the ack", finals(1))
		if count(evs, settle.ActionPutBack) != 1 || count(evs, settle.ActionCopy) != 0 || evs[len(evs)-1].Attempt != 2 {
			t.Fatalf("got %+v, want one put_back (no copy: a table retries in place) then an ack at attempt 2", evs)
		}
	})
}

func TestRetryAfterHidesRowUntilTheClockPassesIt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		var calls atomic.Int32
		x.run(t, x.ib.Queue("jobs", inbox.Poll(10*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			if calls.Add(1) == 1 {
				return settle.RetryAfter(time.Minute, errors.New("busy"))
			}
			return nil
		}))
		x.rec.WaitFor(t, waitLong, "the park", func(evs []settle.Settled) bool { return count(evs, settle.ActionPark) == 1 })
		rows := readRows(t, b, x.db, x.tb)
		if len(rows) != 1 || rows[0].attempt != 2 || rows[0].leased {
			t.Fatalf("got rows %+v, want one unleased row at attempt 2", rows)
		}
		// Not due yet: a claim at now + 59s finds nothing.
		x.clock.Advance(59 * time.Second)
		tr := probe(t, x.ib.Queue("jobs"), x.clock)
		if ds, err := tr.Fetch(context.Background(), 10, 0); err != nil || len(ds) != 0 {
			t.Fatalf("fetch before due: got %d deliveries, err %v; want none", len(ds), err)
		}
		x.clock.Advance(time.Second)
		evs := x.rec.WaitFor(t, waitLong, "the ack after the delay", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 2 {
			t.Fatalf("got %+v, want an ack at attempt 2", last)
		}
	})
}

func TestRetryAfterWithoutRetryAfterColumnReturnsRowAtOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{noRetryAfter: true})
		x.publish(t, "jobs", "p")
		x.run(t, x.ib.Queue("jobs"), raw(func(ctx context.Context, m *settle.Message) error {
			if m.Attempt == 1 {
				return settle.RetryAfter(time.Hour, errors.New("busy"))
			}
			return nil
		}))
		evs := x.rec.WaitFor(t, waitLong, "the ack without advancing the clock", finals(1))
		if last := evs[len(evs)-1]; last.Attempt != 2 {
			t.Fatalf("got %+v, want the ack at attempt 2", last)
		}
	})
}

func TestCapMovesRowToDeadLetterGroupKeepingPayloadAndAttempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "emails", "to-nobody")
		x.run(t, x.ib.Queue("emails"), raw(func(ctx context.Context, m *settle.Message) error {
			return settle.RetryAfter(time.Millisecond, errors.New("busy"))
		}), settle.MaxAttempts(3), settle.DeadLetter("emails.dead"))
		// A delayed retry counts like an immediate one: advance until the cap.
		for i := 1; i <= 2; i++ {
			x.rec.WaitFor(t, waitLong, "a park", func(evs []settle.Settled) bool { return count(evs, settle.ActionPark) == i })
			x.clock.Advance(time.Millisecond)
		}
		evs := x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if last := evs[len(evs)-1]; last.Action != settle.ActionDeadLetter || last.Attempt != 3 {
			t.Fatalf("got %+v, want a dead letter at attempt 3", last)
		}
		rows := readRows(t, b, x.db, x.tb)
		if len(rows) != 1 || rows[0] != (row{attempt: 3, group: "emails.dead", payload: "to-nobody"}) {
			t.Fatalf("got rows %+v, want the row in emails.dead at attempt 3, unleased", rows)
		}
	})
}

func TestCapMovesRowIntoDeadLetterTableWithoutGroupColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{noGroup: true})
		dead := x.tb.Name + "_dead"
		createNamed(t, b, x.db, cols{noGroup: true}, dead)
		x.publish(t, "", "declined")
		x.run(t, x.ib.Queue(""), raw(func(ctx context.Context, m *settle.Message) error {
			return errors.New("card declined")
		}), settle.MaxAttempts(2), settle.DeadLetter(dead))
		x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("got rows %+v in the queue table, want none", rows)
		}
		deadTb := x.tb
		deadTb.Name = dead
		rows := readRows(t, b, x.db, deadTb)
		if len(rows) != 1 || rows[0] != (row{attempt: 2, payload: "declined"}) {
			t.Fatalf("got dead rows %+v, want one at attempt 2, unleased", rows)
		}
	})
}

func TestDeadLetterHookMovesRowWithItsOwnSQL(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "p")
		q := quoteFor(b.d)
		var got inbox.DeadRow
		hook := func(ctx context.Context, tx inbox.Tx, r inbox.DeadRow) error {
			got = r
			ph := "?"
			if b.d == inbox.Postgres {
				ph = "$1"
			}
			_, err := tx.ExecContext(ctx, "DELETE FROM "+q(r.Table)+" WHERE id = "+ph, r.ID)
			return err
		}
		x.run(t, x.ib.Queue("jobs", inbox.OnDeadLetter(hook)), raw(func(ctx context.Context, m *settle.Message) error {
			return errors.New("always")
		}), settle.MaxAttempts(1), settle.DeadLetter("archive"))
		evs := x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if evs[0].Action != settle.ActionDeadLetter {
			t.Fatalf("got %+v, want a dead letter", evs)
		}
		if got.Dest != "archive" || got.Attempt != 1 || string(got.Payload) != "p" || !strings.Contains(got.Err, "always") {
			t.Fatalf("hook got %+v", got)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("got rows %+v, want the hook to have deleted the row", rows)
		}
	})
}

func TestResendMovesDeadRowsBackWithAttemptReset(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "emails", "a", "b")
		var failing atomic.Bool
		failing.Store(true)
		var attempts sync.Map
		x.run(t, x.ib.Queue("emails"), raw(func(ctx context.Context, m *settle.Message) error {
			if failing.Load() {
				return errors.New("down")
			}
			attempts.Store(string(m.Payload), m.Attempt)
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter("emails.dead"))
		x.rec.WaitFor(t, waitLong, "two dead letters", finals(2))
		failing.Store(false)
		n, err := x.ib.Resend(context.Background(), "emails.dead", "emails")
		if err != nil || n != 2 {
			t.Fatalf("Resend: got %d, %v; want 2 rows", n, err)
		}
		x.rec.WaitFor(t, waitLong, "two acks", finals(4))
		for _, p := range []string{"a", "b"} {
			if a, _ := attempts.Load(p); a != 1 {
				t.Fatalf("row %s re-delivered at attempt %v, want 1", p, a)
			}
		}
	})
}

func TestFIFOKeepsOneRowInFlightAndRetryAtTheHead(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "orders", "1", "2", "3")
		var mu sync.Mutex
		var seen []string
		var inFlight, maxInFlight atomic.Int32
		x.run(t, x.ib.Queue("orders", inbox.FIFO(), inbox.Poll(5*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			if n > maxInFlight.Load() {
				maxInFlight.Store(n)
			}
			mu.Lock()
			seen = append(seen, string(m.Payload))
			mu.Unlock()
			if string(m.Payload) == "1" && m.Attempt == 1 {
				return settle.Retry(errors.New("retry keeps me first"))
			}
			return nil
		}), settle.Concurrency(5))
		x.rec.WaitFor(t, waitLong, "three acks", finals(3))
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(seen, ",") != "1,1,2,3" {
			t.Fatalf("got order %v, want [1 1 2 3]", seen)
		}
		if maxInFlight.Load() != 1 {
			t.Fatalf("got %d rows in flight at once, want 1", maxInFlight.Load())
		}
	})
}

func TestFIFORetryAfterLetsRowsDueBeforeItPass(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "orders", "1", "2", "3")
		var mu sync.Mutex
		var seen []string
		x.run(t, x.ib.Queue("orders", inbox.FIFO(), inbox.Poll(5*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			mu.Lock()
			seen = append(seen, string(m.Payload))
			mu.Unlock()
			if string(m.Payload) == "1" && m.Attempt == 1 {
				return settle.RetryAfter(time.Minute, errors.New("later"))
			}
			return nil
		}))
		x.rec.WaitFor(t, waitLong, "two acks", finals(2))
		x.clock.Advance(time.Minute)
		x.rec.WaitFor(t, waitLong, "three acks", finals(3))
		mu.Lock()
		defer mu.Unlock()
		if strings.Join(seen, ",") != "1,2,3,1" {
			t.Fatalf("got order %v, want [1 2 3 1]", seen)
		}
	})
}
