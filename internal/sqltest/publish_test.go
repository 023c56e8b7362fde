package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/settletest"
)

// business creates a table of the service's own (an order per row) beside the inbox,
// dropped after the test, and returns its quoted name.
func business(t *testing.T, x *testBundle) string {
	t.Helper()
	q := quoteFor(x.b.d)
	name := q(uniqueName("settle_orders"))
	if _, err := x.db.ExecContext(context.Background(), "CREATE TABLE "+name+" (ref VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = x.db.ExecContext(context.Background(), "DROP TABLE "+name) })
	return name
}

// placeOrder writes an order and its message in one transaction, committed or rolled
// back, and returns the message's row id.
func placeOrder(t *testing.T, x *testBundle, orders string, commit bool) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := x.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+orders+" (ref) VALUES ("+placeholder(x.b.d, 1)+")", "order-7"); err != nil {
		t.Fatal(err)
	}
	id, err := x.ib.PublishTx(ctx, tx, "jobs", "order-7 placed")
	if err != nil || id <= 0 {
		t.Fatalf("PublishTx = %d, %v", id, err)
	}
	if commit {
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	} else if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestPublishTxInARolledBackBusinessTransactionLeavesNoRow(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		orders := business(t, x)
		placeOrder(t, x, orders, false)
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("after the rollback the inbox holds %+v, want no row", rows)
		}
		if n := column(t, x.db, "SELECT COUNT(*) FROM "+orders); fmt.Sprint(n[0]) != "0" {
			t.Fatalf("after the rollback %v orders, want 0", n[0])
		}
	})
}

func TestPublishTxInACommittedBusinessTransactionIsDelivered(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		orders := business(t, x)
		id := placeOrder(t, x, orders, true)
		got := make(chan string, 1)
		x.run(t, x.ib.Queue("jobs", inbox.Poll(10*time.Millisecond)), raw(func(_ context.Context, m *settle.Message) error {
			got <- m.ID
			return nil
		}))
		x.rec.WaitFor(t, waitLong, "the ack", finals(1))
		if delivered := <-got; delivered != strconv.FormatInt(id, 10) {
			t.Fatalf("delivered row %s, want the id PublishTx returned, %d", delivered, id)
		}
	})
}

func TestPublishTxOnAConnectionWritesOnIt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		ctx := context.Background()
		conn, err := x.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var _ inbox.Tx = conn
		var _ inbox.Tx = (*sql.Tx)(nil)
		if _, err := x.ib.PublishTx(ctx, conn, "jobs", 1); err != nil {
			t.Fatal(err)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 1 {
			t.Fatalf("rows %+v, want the one published on the connection", rows)
		}
	})
}

func TestPublishReturnsTheRowIDAndPublishManyReturnsTheIDsInOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{headers: true})
		ctx := context.Background()
		first, err := x.ib.PublishBytes(ctx, "jobs", []byte("first"))
		if err != nil {
			t.Fatal(err)
		}
		// More than one statement's worth: several INSERTs in one transaction.
		vs := make([]any, 1203)
		for i := range vs {
			vs[i] = i
		}
		ids, err := x.ib.PublishMany(ctx, "jobs", vs, settle.Header("batch", "b1"))
		if err != nil || len(ids) != len(vs) {
			t.Fatalf("PublishMany = %d ids, %v; want %d", len(ids), err, len(vs))
		}
		q := quoteFor(b.d)
		stored := column(t, x.db, fmt.Sprintf("SELECT %s FROM %s ORDER BY %s", q("id"), q(x.tb.Name), q("id")))
		want := []string{strconv.FormatInt(first, 10)}
		for _, id := range ids {
			want = append(want, strconv.FormatInt(id, 10))
		}
		var got []string
		for _, v := range stored {
			got = append(got, fmt.Sprint(v))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("the table's ids %v…, want the ids returned %v…", got[:min(5, len(got))], want[:min(5, len(want))])
		}
		// Each id names the row of its value, with the headers given.
		row, err := x.ib.Peek(ctx, strconv.FormatInt(ids[1202], 10), nil)
		if err != nil || row.Shown != "1202" || row.Headers["batch"] != "b1" {
			t.Fatalf("row %d = %+v, %v; want value 1202 with header batch=b1", ids[1202], row, err)
		}
	})
}

func TestPublishAfterAndAtSetRetryAfterByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			name string
			opt  func(clk *settletest.Clock) settle.PublishOption
		}{
			{"After", func(*settletest.Clock) settle.PublishOption { return settle.After(time.Hour) }},
			{"At", func(*settletest.Clock) settle.PublishOption { return settle.At(time.Now().Add(time.Hour)) }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				clk := settletest.NewClock(time.Now())
				x := setup(t, b, cols{})
				if _, err := x.ib.PublishBytes(context.Background(), "jobs", []byte("later"), tc.opt(clk)); err != nil {
					t.Fatal(err)
				}
				app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: x.rec.OnSettled, Test: settle.TestConfig{Clock: clk}})
				if err != nil {
					t.Fatal(err)
				}
				app.Mount(x.ib.Queue("jobs", inbox.Poll(10*time.Millisecond)), raw(func(context.Context, *settle.Message) error { return nil }))
				startApp(t, app)
				tr := probe(t, x.ib.Queue("jobs"), clk) // fixes the clock's origin (see inbox.testOrigin) before it moves
				clk.Advance(59 * time.Minute)
				if ds, err := tr.Fetch(context.Background(), 10, 0); err != nil || len(ds) != 0 {
					t.Fatalf("fetch 59m into a 1h delay: %d deliveries, %v; want none", len(ds), err)
				}
				clk.Advance(2 * time.Minute)
				evs := x.rec.WaitFor(t, waitLong, "the delayed row's ack", finals(1))
				if evs[0].Action != settle.ActionAck || evs[0].Attempt != 1 {
					t.Fatalf("got %+v, want an ack of the first delivery", evs[0])
				}
			})
		}
	})
}

func TestPublishRefusesADelayWithoutARetryAfterColumnAndOptionsOfRedis(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{noRetryAfter: true})
		ctx := context.Background()
		for _, tc := range []struct {
			opt  settle.PublishOption
			want string
		}{
			{settle.After(time.Minute), "RetryAfter column"},
			{settle.MinID("1-0"), "MinID"},
			{settle.DelaySet(delayed.DurableZset{Key: "d"}), "DelaySet"},
		} {
			if _, err := x.ib.PublishBytes(ctx, "jobs", []byte("p"), tc.opt); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PublishBytes = %v, want a refusal naming %s", err, tc.want)
			}
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("refused publishes wrote %+v", rows)
		}
	})
}

// TestPublishAtWritesEveryTimeUpTo9999AndRefusesLater: settle.At names the row's
// retry_after exactly on every dialect, 2040 included (MariaDB refused it: FROM_UNIXTIME
// stops at 2038), up to the last instant of 9999, which MySQL's DATETIME and SQLite's
// date functions hold; a time long passed (1960) is due at once; a later time is refused
// with an error naming At and the bound, where it was written as NULL (refused by the
// NOT NULL column) or, past time.Time's microseconds (year 146,140,482), as 1970 and
// delivered at once.
func TestPublishAtWritesEveryTimeUpTo9999AndRefusesLater(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		ctx := context.Background()
		for _, at := range []time.Time{
			time.Date(2040, 1, 1, 12, 30, 0, 250_000_000, time.UTC),
			time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		} {
			id, err := x.ib.PublishBytes(ctx, "jobs", []byte("later"), settle.At(at))
			if err != nil {
				t.Fatalf("At(%s): %v", at, err)
			}
			row, err := x.ib.Peek(ctx, strconv.FormatInt(id, 10), nil)
			if err != nil || !row.RetryAfter.Equal(at) {
				t.Fatalf("At(%s): retry_after %s (err %v), want the time given", at, row.RetryAfter, err)
			}
		}
		for _, at := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.UnixMilli(1 << 62)} {
			if _, err := x.ib.PublishBytes(ctx, "jobs", []byte("refused"), settle.At(at)); err == nil || !strings.Contains(err.Error(), "At(") || !strings.Contains(err.Error(), "9999-12-31") {
				t.Fatalf("At(%s) = %v, want a refusal naming At and 9999-12-31", at, err)
			}
		}
		if _, err := x.ib.PublishBytes(ctx, "jobs", []byte("passed"), settle.At(time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))); err != nil {
			t.Fatalf("At(1960): %v", err)
		}
		x.run(t, x.ib.Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(ctx context.Context, m *settle.Message) error {
			if string(m.Payload) != "passed" {
				t.Errorf("delivered %q, want only the row due at once", m.Payload)
			}
			return nil
		}))
		x.rec.WaitFor(t, waitLong, "the passed row's ack", finals(1))
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 2 {
			t.Fatalf("rows %+v, want the two rows due later (none refused written)", rows)
		}
	})
}
