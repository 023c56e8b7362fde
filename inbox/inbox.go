// Package inbox consumes a SQL table whose rows are deliveries: the table inbox of
// settle. It is one more transport of settle's engine: a [Queue] is a settle.Source,
// mounted with settle.App.Mount like a Redis stream. Its settlements are written in
// batches: the acks, the retries, the delayed retries and the moves to a dead-letter
// group of many rows each take one statement.
//
// # Settlements
//
//	Ack, Drop       delete the row (fenced by the lease)
//	Retry           clear the lease, attempt + 1: due again at once
//	RetryAfter(d)   retry_after = now + d, clear the lease, attempt + 1
//	                (a table without retry_after: returned at once, with a warning)
//	at the cap      with a group column: group = the dead-letter group, payload and
//	                attempt kept; without one: moved into the dead-letter table
//	a reply         (settle.Reply with settle.ReplyTo) rows inserted into the ReplyTo
//	                group (or, without a group column, the ReplyTo table, same
//	                columns) and the row deleted, in one transaction
//
// Every settlement is fenced by the lease the claim wrote: a worker whose lease was
// taken over changes nothing, and its settlement reports [ErrLeaseLost].
//
// # Crashes
//
// Every settlement clears the lease or deletes the row, so a row claimed while its
// lease is set (and passed) was delivered to a worker that never settled it: it
// crashed, hung past its lease, or could not write its settlement. Such a claim adds
// one attempt in the same statement, so a delivery that crashed its worker counts
// toward the cap like a Retry. A row that arrives past the cap (its delivery at the
// cap never settled) is dead-lettered at the cap without running the handler again,
// with attempt = the cap: a row that kills every worker reaches the dead letter after
// exactly the cap's deliveries instead of coming back forever. A row past the cap whose
// last delivery settled (a cap lowered since, or an attempt another program wrote) is
// not blamed on a crash: it runs, and its first failure dead-letters it (a FIFO queue,
// whose one claim takes rows whether their lease is NULL or passed, cannot tell the two
// apart, and dead-letters it without running, as a crash).
//
// # Time
//
// "Now" is the database's clock (now(), NOW(6), SQLite's strftime): no host clock
// matters, and a row the service inserts itself (retry_after DEFAULT now()) is due at
// once. Under a test clock (settle.Config.Test.Clock, which settletest's Harness sets)
// a queue's "now" is the database's clock plus how far the test clock has moved since
// the first queue of the process ran on it, so Advance(d) brings a row delayed by d due
// without waiting, whatever time the test clock started at. Publish always writes the
// database's own now, so a row published before or after the App starts is due at once
// under any test clock. The database's clock still runs under a test clock: a row
// delayed by d also comes due after d of real time (use delays longer than the test
// runs to assert that a row is not yet due).
//
// Advance(d) passes d for the leases' heartbeats too: under a test clock, before each
// claim, the leases held by the Apps running on that clock (of rows running or waiting
// for a handler) are extended to the claim's "now", so advancing the clock past a lease
// never delivers a held row a second time. The rows of a worker that stopped without
// settling them still come back with one more attempt once Advance passes their lease.
//
// # Waking up
//
// An idle queue claims again when it is told a row of its group came due, when the
// earliest row parked by RetryAfter comes due, and every [Poll] otherwise. The rows
// an Inbox writes itself (Publish, a Retry's put-back, a release, Resend) wake its own
// queues at once. On PostgreSQL an Inbox whose queues run also holds one connection
// of its pool that LISTENs on the channel named after the table (Table.Name, as
// written), and wakes the queues of the group each notification's payload names:
// Publish, a graceful stop's release and Resend send one (pg_notify, just after their
// statement; the table's own trigger can send one for rows your code inserts, see the
// README), so a row published by any process is claimed at once whatever the Poll.
// While that connection is lost the queues poll, and it connects again. database/sql
// cannot wait for a notification, and this package imports no driver: the connection
// is reached with (*sql.Conn).Raw and recognised by the method set of pgx's stdlib
// connection (pgx v5 or v4); with another driver, or a pool limited to one connection,
// the queues poll only (logged once). [PollOnly] opts a queue out.
//
// # Publishing
//
// [Inbox.Publish] and its family insert rows as the service itself would, and return
// their ids: [Inbox.PublishTx] in the caller's transaction (the row exists if and when
// the business write beside it commits), [Inbox.PublishMany] many rows in one INSERT.
// They take settle.Header (a [Table.Headers] column), settle.After and settle.At
// (retry_after by the database's clock). [WithPublishHook] gives them a
// settle.PublishHook, as a Redis Publisher takes one (settleotel's, for traces).
//
// # Flow limits and Dedupe
//
// A queue takes settle.RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency and
// settle.Dedupe, their state in two tables of the inbox's database that the user's
// schema creates (the README's "Flow limits and Dedupe on the inbox";
// [DefaultLimitTable] and [DefaultMarkTable] unless [WithLimitTable] and [WithMarkTable]
// name others): a take is one transaction by the database's clock, a delivery that
// waits stays leased and heartbeated, and a completion's mark is written in the
// transaction that deletes its row.
//
// # Dialects
//
// [SQLite], [Postgres] and [MySQL] (MySQL 8 and MariaDB 10.6+). The package depends on
// database/sql only: bring your own driver and *sql.DB.
package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"

	"github.com/settlekit/settle"
)

// ErrLeaseLost is reported by a settlement whose row no longer holds the lease its claim
// wrote (another worker took the row over once the lease passed, or an operator or
// another program released, changed or deleted it): the row is not changed.
var ErrLeaseLost = errors.New("inbox: lease lost: the row no longer holds this worker's lease (another worker took it over once it passed, or someone else released, changed or deleted the row); nothing was changed")

// Inbox is one table of deliveries in one database. Make one with New; it is safe for
// concurrent use.
type Inbox struct {
	db      *sql.DB
	dialect Dialect
	hook    settle.PublishHook // see WithPublishHook
	table   Table

	limitTable string // see WithLimitTable ("": DefaultLimitTable)
	markTable  string // see WithMarkTable ("": DefaultMarkTable)

	once  sync.Once // builds stmts, the statements of Publish and Resend
	stmts *statements

	mu       sync.Mutex
	pending  map[string]bool          // PostgreSQL: the groups to announce (see announce)
	sending  bool                     // an announcer goroutine runs
	listener *listener                // PostgreSQL: the LISTEN connection of the inbox's queues
	wake     map[string]chan struct{} // per group: closed when a row of it may have come due
}

// New returns the inbox of table t in db, spoken in dialect d, with opts
// (WithPublishHook). Nothing is checked here: App.Validate checks the spec, and
// App.Run checks the table's columns.
func New(db *sql.DB, d Dialect, t Table, opts ...InboxOption) *Inbox {
	ib := &Inbox{db: db, dialect: d, table: t}
	for _, o := range opts {
		if o != nil {
			o.applyInbox(ib)
		}
	}
	return ib
}

// Table returns the inbox's table spec.
func (ib *Inbox) Table() Table { return ib.table }

// Resend moves every row of the dead-letter group from back to the group to with its
// attempt reset to 1 and its lease cleared, in one statement, and returns how many rows
// moved. It needs a group column (a dead-letter table's rows are the operator's to move).
func (ib *Inbox) Resend(ctx context.Context, from, to string) (int64, error) {
	d, err := ib.checked("")
	if err != nil {
		return 0, err
	}
	if ib.table.Group == "" {
		return 0, fmt.Errorf("inbox: resend: table %s has no group column", ib.table.Name)
	}
	s := ib.statements(d)
	args := s.resend.bind(map[string]any{"from": from, "to": to})
	res, err := retry(ctx, d, ib.db, func() (sql.Result, error) { return ib.db.ExecContext(ctx, s.resend.text, args...) })
	if err != nil {
		return 0, fmt.Errorf("inbox: resend %q to %q: %w", from, to, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("inbox: resend %q to %q: %w", from, to, err)
	}
	if n > 0 {
		ib.announce(ctx, s, to)
	}
	return n, nil
}

// statements returns the statements of Publish and Resend, built once.
func (ib *Inbox) statements(d dialect) *statements {
	ib.once.Do(func() { ib.stmts = d.build(ib.table, queueSpec{}) })
	return ib.stmts
}

// checked returns the dialect after checking what a direct call needs.
func (ib *Inbox) checked(group string) (dialect, error) {
	if ib == nil || ib.db == nil {
		return nil, errors.New("inbox: nil inbox or *sql.DB")
	}
	d, ok := ib.dialect.(dialect)
	if !ok {
		return nil, errors.New("inbox: no dialect: use inbox.SQLite, inbox.Postgres or inbox.MySQL")
	}
	if errs := ib.table.problems(); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ib.table.Group == "" && group != "" {
		return nil, fmt.Errorf("inbox: table %s has no group column: publish with group \"\"", ib.table.Name)
	}
	return d, nil
}

// notify wakes the queues of group waiting for a row.
func (ib *Inbox) notify(group string) {
	ib.mu.Lock()
	if ch, ok := ib.wake[group]; ok {
		close(ch)
		delete(ib.wake, group)
	}
	ib.mu.Unlock()
}

// notifyAll wakes every queue of the inbox waiting for a row.
func (ib *Inbox) notifyAll() {
	ib.mu.Lock()
	for group, ch := range ib.wake {
		close(ch)
		delete(ib.wake, group)
	}
	ib.mu.Unlock()
}

// woken returns a channel closed at the next notify of group.
func (ib *Inbox) woken(group string) <-chan struct{} {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ch, ok := ib.wake[group]
	if !ok {
		if ib.wake == nil {
			ib.wake = map[string]chan struct{}{}
		}
		ch = make(chan struct{})
		ib.wake[group] = ch
	}
	return ch
}
