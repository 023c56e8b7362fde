package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// The inbox's flow limits and Dedupe marks, in the README's flow tables (the conformance
// suite runs their scenarios: see conformance_test.go).

// byK is the tests' key function: the "k" header.
func byK(m *settle.Message) string { return m.Headers["k"] }

// publishKeyed publishes payload with the headers k (the limit's key) and id (the dedup
// key).
func publishKeyed(t *testing.T, ib *inbox.Inbox, payload, k, id string) {
	t.Helper()
	if _, err := ib.PublishBytes(context.Background(), "jobs", []byte(payload), settle.Header("k", k), settle.Header("id", id)); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// runRefused runs an App mounting ib's queue with opts and returns Run's error, which
// must come without waiting (a missing table stops Run at once).
func runRefused(t *testing.T, ib *inbox.Inbox, opts ...settle.MountOption) error {
	t.Helper()
	app, err := settle.New(settle.Config{Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	app.Mount(ib.Queue("jobs", inbox.Poll(never)), raw(func(context.Context, *settle.Message) error { return nil }), opts...)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	err = app.Run(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Run did not stop within %s: a missing table must stop it at once (err %v)", waitLong, err)
	}
	return err
}

// TestAMissingFlowTableStopsStartupNamingTheTable: a mount with a flow limit and no
// limit table, or with Dedupe and no mark table, does not start, and the error names the
// table and the README's schema.
func TestAMissingFlowTableStopsStartupNamingTheTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{headers: true})
		for _, c := range []struct {
			name string
			opt  func(string) inbox.InboxOption
			use  settle.MountOption
		}{
			{"settle_limits_missing", inbox.WithLimitTable, settle.RateLimitBy(byK, 1, time.Second)},
			{"settle_marks_missing", inbox.WithMarkTable, settle.Dedupe(time.Hour, byK)},
		} {
			missing := uniqueName(c.name)
			err := runRefused(t, inbox.New(db, b.d, tb, c.opt(missing)), c.use)
			if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "README") {
				t.Fatalf("Run returned %v, want an error naming the table %s and the README's schema", err, missing)
			}
		}
	})
}

// flowRows returns the until_us of table's rows by key (the limit table's: lim and slot
// joined by "/").
func flowRows(t *testing.T, b backend, db *sql.DB, table, key string) map[string]int64 {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), fmt.Sprintf("SELECT %s, until_us FROM %s", key, quoteFor(b.d)(table)))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var until int64
		var dest []any
		if strings.Contains(key, ",") {
			var slot string
			dest = []any{&k, &slot, &until}
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
			out[k+"/"+slot] = until
			continue
		}
		if err := rows.Scan(&k, &until); err != nil {
			t.Fatal(err)
		}
		out[k] = until
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeFlowTablesKeepLimitsAndMarksAndDropIdleRows: on the README's flow tables, a
// key's second delivery within its rate limit's period waits leased, unstarted, with its
// attempt unspent, while a duplicate of a completed key is acked without running; the
// limit's row holds its next start (by the test clock) and the mark its end; a limit's
// row that ended long ago and a mark that ended are deleted by the first take and the
// first marked ack.
func TestReadmeFlowTablesKeepLimitsAndMarksAndDropIdleRows(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{headers: true})
		names := flowTables(t, b, x.db)
		x.ib = inbox.New(x.db, b.d, x.tb, names.opts()...)
		limits, marks := names.limits, names.marks
		ctx := context.Background()
		q := quoteFor(b.d)
		if _, err := x.db.ExecContext(ctx, "INSERT INTO "+q(limits)+" (lim, slot, until_us) VALUES ('stale', '', 1)"); err != nil {
			t.Fatal(err)
		}
		if _, err := x.db.ExecContext(ctx, "INSERT INTO "+q(marks)+" (mark, until_us) VALUES ('stale', 1)"); err != nil {
			t.Fatal(err)
		}
		calls := make(chan string, 8)
		x.run(t, x.ib.Queue("jobs", inbox.Poll(20*time.Millisecond)), raw(func(_ context.Context, m *settle.Message) error {
			calls <- fmt.Sprintf("%s@%d", m.Payload, m.Attempt)
			return nil
		}), settle.RateLimitBy(byK, 1, time.Hour), settle.Dedupe(time.Hour, func(m *settle.Message) string { return m.Headers["id"] }))
		publishKeyed(t, x.ib, "first", "a", "order-1")
		x.rec.WaitFor(t, waitLong, "the first ack", finals(1))
		publishKeyed(t, x.ib, "duplicate", "b", "order-1")
		evs := x.rec.WaitFor(t, waitLong, "the duplicate's ack", finals(2))
		if !evs[1].Deduplicated {
			t.Fatalf("the second settlement is not deduplicated: %+v", evs[1])
		}
		publishKeyed(t, x.ib, "later", "a", "order-2")
		// The later row of key a is claimed (leased) and waits an hour for its start.
		eventually(t, "the later row leased at attempt 1, waiting for its limit", func() bool {
			rs := readRows(t, b, x.db, x.tb)
			return len(rs) == 1 && rs[0].leased && rs[0].attempt == 1
		})
		if got := strings.Join(received(calls), ","); got != "first@1" {
			t.Fatalf("handler calls %s, want first@1 only: the duplicate is acked without running, the later row waits", got)
		}
		now := x.clock.Now().UnixMicro()
		lim := flowRows(t, b, x.db, limits, "lim, slot")
		if _, ok := lim["stale/"]; ok {
			t.Fatalf("the stale limit row is still there: %v", lim)
		}
		if len(lim) != 2 {
			t.Fatalf("limit rows %v, want two: key a's and key b's (the engine passes the limits before it reads the mark)", lim)
		}
		for k, until := range lim {
			if until < now+int64(59*time.Minute/time.Microsecond) {
				t.Fatalf("limit row %s ends at %d, want about an hour after the test clock's now %d", k, until, now)
			}
		}
		mk := flowRows(t, b, x.db, marks, "mark")
		if _, ok := mk["stale"]; ok {
			t.Fatalf("the ended mark is still there: %v", mk)
		}
		if len(mk) != 1 {
			t.Fatalf("marks %v, want one: order-1's", mk)
		}
	})
}

// received returns what ch holds now.
func received(ch chan string) []string {
	var out []string
	for {
		select {
		case s := <-ch:
			out = append(out, s)
		default:
			return out
		}
	}
}

// TestASlotWhoseLeaseEndedIsLostAndItsOldHolderCannotFreeTheNewOnes: a concurrency slot
// is leased and fenced by its token: once its lease ends (the test clock passes it) a
// renewal reports it lost, another delivery takes the slot, and the first holder's
// release frees nothing of the second's (a third take still waits).
func TestASlotWhoseLeaseEndedIsLostAndItsOldHolderCannotFreeTheNewOnes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		clk := newFakeClock()
		lim := limiter(t, b)(clk)
		ctx := context.Background()
		gate := []source.Gate{{Name: "slots", Slots: 1, Lease: time.Second, Value: "acct"}}
		take := func(token string) source.Take {
			t.Helper()
			tk, err := lim.LimitTake(ctx, gate, token, time.Second)
			if err != nil {
				t.Fatalf("take %s: %v", token, err)
			}
			return tk
		}
		if tk := take("one"); tk.Wait != 0 {
			t.Fatalf("the first take waits %s, want a slot at once", tk.Wait)
		}
		if tk := take("two"); tk.Wait == 0 || tk.Reserved || tk.Which != 0 {
			t.Fatalf("the second take: %+v, want a wait for the slot (limit 0), nothing reserved", tk)
		}
		held := []source.Held{{Name: "slots", Token: "one", Value: "acct"}}
		if lost, err := lim.LimitRenew(ctx, held, time.Second); err != nil || len(lost) != 0 {
			t.Fatalf("renew within the lease: lost %v, err %v; want none lost", lost, err)
		}
		clk.Advance(2 * time.Second)
		if lost, err := lim.LimitRenew(ctx, held, time.Second); err != nil || len(lost) != 1 || lost[0] != 0 {
			t.Fatalf("renew past the lease: lost %v, err %v; want slot 0 lost", lost, err)
		}
		if tk := take("two"); tk.Wait != 0 {
			t.Fatalf("a take once the lease ended waits %s, want the slot", tk.Wait)
		}
		if err := lim.LimitRelease(ctx, held); err != nil {
			t.Fatalf("release by the old holder: %v", err)
		}
		if tk := take("three"); tk.Wait == 0 {
			t.Fatal("a third take got the slot: the old holder's release freed the new holder's slot")
		}
		if err := lim.LimitRelease(ctx, []source.Held{{Name: "slots", Token: "two", Value: "acct"}}); err != nil {
			t.Fatalf("release by the holder: %v", err)
		}
		if tk := take("three"); tk.Wait != 0 {
			t.Fatalf("a take after the holder's release waits %s, want the slot", tk.Wait)
		}
	})
}

// TestARateLimitReservesAStartWithinTheHorizonAndWaitsBeyondIt: GCRA on the table, by
// the test clock: with one start per second and no burst, the first take starts at
// once, the second reserves its start a second later, the third (two seconds away,
// beyond the one-second horizon) reserves nothing and asks again in a second.
func TestARateLimitReservesAStartWithinTheHorizonAndWaitsBeyondIt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		on := limiter(t, b)
		want := []source.Take{{Which: -1}, {Reserved: true, Wait: time.Second, Which: 0}, {Wait: time.Second, Which: 0}}
		gate := []source.Gate{{Name: "rate", Burst: 1, Interval: time.Second}}
		lim := on(newFakeClock())
		for i, w := range want {
			got, err := lim.LimitTake(context.Background(), gate, fmt.Sprint(i), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got != w {
				t.Fatalf("take %d: %+v, want %+v", i+1, got, w)
			}
		}
		// On the database's clock (no test clock), the same limit under another name:
		// the waits are as long less the time the takes took.
		gate[0].Name = "rate2"
		lim = on(nil)
		for i, w := range want {
			got, err := lim.LimitTake(context.Background(), gate, fmt.Sprint(i), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got.Reserved != w.Reserved || got.Which != w.Which || got.Wait > w.Wait || got.Wait < w.Wait-waitLong/30 {
				t.Fatalf("take %d on the database's clock: %+v, want about %+v", i+1, got, w)
			}
		}
	})
}

// limiter returns, for a queue on a fresh table of b with the README's flow tables, the
// flow limits' storage of a probe on a test clock (nil: the database's clock).
func limiter(t *testing.T, b backend) func(clk clock.Clock) source.Limiter {
	t.Helper()
	db := b.open(t)
	tb := createTable(t, b, db, cols{})
	ib := inbox.New(db, b.d, tb, flowTables(t, b, db).opts()...)
	return func(clk clock.Clock) source.Limiter {
		lim, ok := probe(t, ib.Queue("jobs"), clk).(source.Limiter)
		if !ok {
			t.Fatal("the inbox's transport is not a source.Limiter")
		}
		return lim
	}
}

// TestAnAckWhoseLeaseWasLostWritesNoDedupeMark: the mark is written in the transaction
// that deletes the row, and only for a row it deleted: a row whose lease was taken over
// is neither deleted nor marked (ErrLeaseLost), while the row acked beside it is both.
func TestAnAckWhoseLeaseWasLostWritesNoDedupeMark(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		ib := inbox.New(x.db, b.d, x.tb, flowTables(t, b, x.db).opts()...)
		x.publish(t, "jobs", "kept", "taken")
		p := source.Policy{DedupWindow: time.Hour}
		tr := ib.Queue("jobs").Transport(source.Env{Clock: newFakeClock(), Logger: quietLogger(t), Mount: "marks", Policy: p, TestClock: x.clock})
		ctx := context.Background()
		if err := tr.Open(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(ctx) })
		ds, err := tr.Fetch(ctx, 2, 0)
		if err != nil || len(ds) != 2 {
			t.Fatalf("fetch: %d deliveries, err %v; want 2", len(ds), err)
		}
		var taken *source.Delivery
		for _, d := range ds {
			d.DedupKey = "key-" + string(d.Payload)
			if string(d.Payload) == "taken" {
				taken = d
			}
		}
		// Another worker's lease on the taken row (as a takeover writes one).
		q := quoteFor(b.d)
		if _, err := x.db.ExecContext(ctx, "UPDATE "+q(x.tb.Name)+" SET locked_until = "+futureTime(b.d)+" WHERE id = "+taken.ID); err != nil {
			t.Fatal(err)
		}
		if err := tr.Ack(ctx, ds); !errors.Is(err, inbox.ErrLeaseLost) {
			t.Fatalf("ack: %v, want ErrLeaseLost for the taken row", err)
		}
		seen, err := tr.(source.Deduper).Completed(ctx, []string{"key-kept", "key-taken"})
		if err != nil {
			t.Fatal(err)
		}
		if !seen[0] || seen[1] {
			t.Fatalf("marks (kept, taken) = %v, want (true, false): only the row deleted is marked", seen)
		}
		if rs := readRows(t, b, x.db, x.tb); len(rs) != 1 || rs[0].payload != "taken" {
			t.Fatalf("rows %+v, want the taken row only", rs)
		}
	})
}

// futureTime is a time literal of b's lease column a year ahead.
func futureTime(d inbox.Dialect) string {
	switch d {
	case inbox.Postgres:
		return "now() + interval '1 year'"
	case inbox.MySQL:
		return "NOW(6) + INTERVAL 1 YEAR"
	}
	return "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+1 year')"
}
