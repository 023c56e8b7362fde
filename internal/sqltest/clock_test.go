package sqltest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/settletest"
)

// Publish writes the database's now, and a queue under a test clock reads the
// database's clock plus how far the test clock has moved: a row published before any
// queue exists is due at once whatever time the test clock stands at, and Advance(d)
// still brings a row delayed by d due.
func TestPublishedRowIsDueUnderATestClockStartedAnywhereAndAdvanceBringsDelaysDue(t *testing.T) {
	t.Parallel()
	starts := map[string]time.Time{
		"ClockInThePast":   time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC),
		"ClockAtRealNow":   time.Now().Truncate(time.Millisecond), // as settletest.New starts it, before the publish
		"ClockInTheFuture": time.Now().Add(48 * time.Hour),
	}
	forEachBackend(t, func(t *testing.T, b backend) {
		for name, start := range starts {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				clk := settletest.NewClock(start)
				x := setup(t, b, cols{})
				// Published before any queue of the inbox exists or any App runs.
				x.publish(t, "jobs", "p")
				app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: x.rec.OnSettled, Test: settle.TestConfig{Clock: clk}})
				if err != nil {
					t.Fatal(err)
				}
				app.Mount(x.ib.Queue("jobs", inbox.Poll(10*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
					if m.Attempt == 1 {
						return settle.RetryAfter(time.Hour, errors.New("busy"))
					}
					return nil
				}))
				startApp(t, app)
				x.rec.WaitFor(t, waitLong, "the first delivery's park", func(evs []settle.Settled) bool { return count(evs, settle.ActionPark) == 1 })

				// Not due until the clock passes the hour: a claim on the same clock
				// 59 minutes on finds nothing.
				clk.Advance(59 * time.Minute)
				tr := probe(t, x.ib.Queue("jobs"), clk)
				if ds, err := tr.Fetch(context.Background(), 10, 0); err != nil || len(ds) != 0 {
					t.Fatalf("fetch 59m into a 1h delay: got %d deliveries, err %v; want none", len(ds), err)
				}
				clk.Advance(time.Minute)
				evs := x.rec.WaitFor(t, waitLong, "the ack after the delay", finals(1))
				if last := evs[len(evs)-1]; last.Action != settle.ActionAck || last.Attempt != 2 {
					t.Fatalf("got %+v, want an ack at attempt 2", last)
				}
			})
		}
	})
}

// A row the service inserts with its own SQL, retry_after left to the column's
// DEFAULT (the database's now), is due at once under a test clock too.
func TestRowInsertedWithTheColumnDefaultNowIsDueUnderATestClock(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		clk := settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
		q := quoteFor(b.d)
		ph := "?"
		if b.d == inbox.Postgres {
			ph = "$1"
		}
		insert := fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES ('jobs', %s)", q(x.tb.Name), q(x.tb.Group), q(x.tb.Payload), ph)
		if _, err := x.db.ExecContext(context.Background(), insert, []byte("by the service")); err != nil {
			t.Fatalf("insert: %v", err)
		}
		app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: x.rec.OnSettled, Test: settle.TestConfig{Clock: clk}})
		if err != nil {
			t.Fatal(err)
		}
		app.Mount(x.ib.Queue("jobs", inbox.Poll(10*time.Millisecond)), raw(func(context.Context, *settle.Message) error { return nil }))
		startApp(t, app)
		evs := x.rec.WaitFor(t, waitLong, "the ack without advancing the clock", finals(1))
		if evs[0].Action != settle.ActionAck || evs[0].Attempt != 1 {
			t.Fatalf("got %+v, want an ack at attempt 1", evs[0])
		}
	})
}
