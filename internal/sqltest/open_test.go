package sqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

func TestOpenNamesEveryMissingColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noRetryAfter: true, noAttempt: true})
		spec := cols{}.spec(tb.Name) // names attempt and retry_after, which the table lacks
		spec.Payload = "body"
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, spec).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		err := app.Run(context.Background())
		if err == nil {
			t.Fatal("Run: got nil, want the missing columns")
		}
		for _, col := range []string{"attempt", "retry_after", "body"} {
			if !strings.Contains(err.Error(), col) {
				t.Errorf("Run: got %q, want it to name column %s", err, col)
			}
		}
	})
}

func TestOpenChecksTheDeadLetterTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		tb := createTable(t, b, db, cols{noGroup: true})
		app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
		app.Mount(inbox.New(db, b.d, tb).Queue(""), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
			settle.MaxAttempts(2), settle.DeadLetter(tb.Name+"_missing"))
		err := app.Run(context.Background())
		if err == nil || !strings.Contains(err.Error(), tb.Name+"_missing") {
			t.Fatalf("Run: got %v, want an error naming the missing dead-letter table", err)
		}
	})
}

// TestOpenRefusesSQLiteTimeColumnsNotInTheTextForm: a SQLite time column whose values
// would not compare in time order with the inbox's text times stops the App at Run,
// naming the column and the form it needs: a DEFAULT CURRENT_TIMESTAMP (which writes
// '2026-12-01 09:44:00', so a row parked for an hour would be due at once), a numeric
// declared type, a DEFAULT writing a number, and a value already in the table.
func TestOpenRefusesSQLiteTimeColumnsNotInTheTextForm(t *testing.T) {
	t.Parallel()
	b := backends()[0] // SQLite: the other dialects' time columns have a time type
	for _, tc := range []struct {
		name       string
		retryAfter string // its column definition
		lease      string
		insert     string // a row the service inserted, if any
		want       []string
	}{
		{name: "DefaultCurrentTimestamp", retryAfter: "DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP", lease: "TEXT",
			want: []string{"column retry_after", "DEFAULT CURRENT_TIMESTAMP writes '2", "strftime('%Y-%m-%dT%H:%M:%f+00:00')", "DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))"}},
		{name: "DefaultDatetimeNow", retryAfter: "TEXT DEFAULT (datetime('now'))", lease: "TEXT",
			want: []string{"column retry_after", "datetime('now')", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
		{name: "IntegerLease", retryAfter: "TEXT", lease: "INTEGER",
			want: []string{"column locked_until is declared INTEGER", "as numbers", "declare it TEXT"}},
		{name: "DefaultUnixEpoch", retryAfter: "NUMERIC DEFAULT (unixepoch())", lease: "TEXT",
			want: []string{"column retry_after", "writes the number", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
		{name: "ValueInAnotherForm", retryAfter: "TEXT", lease: "TEXT",
			insert: `INSERT INTO %s (name, retry_after, payload) VALUES ('jobs', '2026-12-01 10:44:00', x'00')`,
			want:   []string{"column retry_after holds '2026-12-01 10:44:00' (row 1", "strftime('%Y-%m-%dT%H:%M:%f+00:00')"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			name := uniqueName("settle_inbox")
			ddl := fmt.Sprintf(`CREATE TABLE %q (id INTEGER PRIMARY KEY, name TEXT NOT NULL DEFAULT '', attempt INTEGER NOT NULL DEFAULT 1, retry_after %s, locked_until %s, payload BLOB NOT NULL)`,
				name, tc.retryAfter, tc.lease)
			if _, err := db.ExecContext(context.Background(), ddl); err != nil {
				t.Fatalf("create table: %v", err)
			}
			if tc.insert != "" {
				if _, err := db.ExecContext(context.Background(), fmt.Sprintf(tc.insert, fmt.Sprintf("%q", name))); err != nil {
					t.Fatalf("insert: %v", err)
				}
			}
			app, _ := settle.New(settle.Config{Logger: quietLogger(t)})
			app.Mount(inbox.New(db, b.d, cols{}.spec(name)).Queue("jobs"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
			err := app.Run(context.Background())
			if err == nil {
				t.Fatal("Run: got nil, want the time column refused")
			}
			t.Logf("refused: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Run: got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestOpenAcceptsSQLiteTimeColumnsInTheTextForm: the documented schema (TEXT columns,
// retry_after defaulting to strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')) holding rows in
// every state the inbox writes (parked, leased, due) opens, and its due row is handled.
func TestOpenAcceptsSQLiteTimeColumnsInTheTextForm(t *testing.T) {
	t.Parallel()
	x := setup(t, backends()[0], cols{})
	x.publish(t, "jobs", "parked", "leased", "due")
	tr := probe(t, x.ib.Queue("jobs"), nil)
	ds, err := tr.Fetch(context.Background(), 10, 0)
	if err != nil || len(ds) != 3 {
		t.Fatalf("claim: got %d rows, err %v; want 3", len(ds), err)
	}
	p := byPayload(ds) // "leased" stays leased to the probe, a worker that crashed
	if err := errors.Join(tr.Moves(context.Background(), []source.Move{
		{Action: source.ActionPark, Delivery: p["parked"], Delay: time.Hour},
		{Action: source.ActionRelease, Delivery: p["due"]},
	})...); err != nil {
		t.Fatalf("park and release: %v", err)
	}
	x.run(t, x.ib.Queue("jobs", inbox.Poll(5*time.Millisecond)), raw(func(context.Context, *settle.Message) error { return nil }))
	evs := x.rec.WaitFor(t, waitLong, "the due row's ack", finals(1))
	if evs[0].Action != settle.ActionAck || evs[0].Err != nil {
		t.Fatalf("got %+v, want the due row acked", evs)
	}
}
