package inbox

import (
	"context"
	"database/sql"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/source"
)

// Queue defaults.
const (
	// DefaultBatch is the most rows one claim leases.
	DefaultBatch = 100
	// DefaultLease is how long a claimed row stays hidden from other workers; a
	// handler running longer has its lease extended while it runs.
	DefaultLease = 30 * time.Second
	// DefaultPoll is how often an idle queue looks for due rows it was not told of (see
	// Poll).
	DefaultPoll = 200 * time.Millisecond
)

// Option configures a Queue.
type Option interface {
	applyQueue(*queueConfig)
}

type queueConfig struct {
	batch      int
	deadLetter DeadLetterFunc
	fifo       bool
	lease      time.Duration
	poll       time.Duration
	pollOnly   bool
}

type optionFunc func(*queueConfig)

func (f optionFunc) applyQueue(c *queueConfig) { f(c) }

// Batch sets the most rows one claim leases. The engine asks for a full batch whenever
// the mount has room for one (see settle.Prefetch): the rows claimed and not yet started
// stay leased, their leases extended like those of the rows running. Defaults to
// DefaultBatch.
func Batch(n int) Option { return optionFunc(func(c *queueConfig) { c.batch = n }) }

// FIFO makes the queue's group first-in first-out: at most one row of the group is in
// flight at a time, taken in (retry_after, id) order. Retry keeps a row at the head of
// its group; RetryAfter(d) lets rows due before it pass. Defaults to off (rows are
// claimed in batches by any number of workers: earliest due first where an index led by
// the group and retry_after columns serves that order, else in id order).
func FIFO() Option { return optionFunc(func(c *queueConfig) { c.fifo = true }) }

// Lease sets how long a claimed row stays hidden from other workers. While a handler
// runs its lease is extended every third of it, so only a worker that stopped
// (crashed, cut off from the database) lets its rows come back; such a row comes back
// with one more attempt (the delivery that never settled counts toward the cap).
// Defaults to DefaultLease.
func Lease(d time.Duration) Option { return optionFunc(func(c *queueConfig) { c.lease = d }) }

// PollOnly keeps the queue from listening for PostgreSQL notifications: it finds the
// rows of other processes by polling only. Use it where LISTEN cannot work (a pooler in
// transaction mode). Defaults to listening on PostgreSQL (see the package doc).
func PollOnly() Option { return optionFunc(func(c *queueConfig) { c.pollOnly = true }) }

// Poll sets how often an idle queue looks for due rows it was not told of. A queue is
// woken at once by the rows its own Inbox writes (Publish, a Retry's put-back, a
// release, Resend) for its group, on PostgreSQL by those any process announces (see
// the package doc), and claims a row parked by RetryAfter as it comes due (the idle
// queue asks the database when the next one does), so Poll bounds only how soon it
// sees rows inserted without a notification and leases that passed. Defaults to
// DefaultPoll.
func Poll(d time.Duration) Option { return optionFunc(func(c *queueConfig) { c.poll = d }) }

// OnDeadLetter replaces the dead-letter move with the user's own SQL: at the cap, fn
// runs inside a write transaction in which the row is locked and still leased to this
// worker, and must move or delete it (leaving it in place lets it come back when its
// lease passes). The transaction commits when fn returns nil. The mount still declares
// settle.MaxAttempts and settle.DeadLetter; dest is the latter. Defaults to the move
// described in the package doc.
func OnDeadLetter(fn DeadLetterFunc) Option {
	return optionFunc(func(c *queueConfig) { c.deadLetter = fn })
}

// DeadLetterFunc moves a dead row with its own SQL: see OnDeadLetter.
type DeadLetterFunc func(ctx context.Context, tx Tx, row DeadRow) error

// Tx is the transaction a DeadLetterFunc writes in (*sql.Tx, or on SQLite a connection
// inside BEGIN IMMEDIATE), and what Inbox.PublishTx writes in: *sql.Tx and *sql.Conn
// satisfy it.
type Tx interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// DeadRow is the row a DeadLetterFunc moves.
type DeadRow struct {
	// Attempt is the row's attempt: the attempts spent.
	Attempt int
	// Dest is the mount's settle.DeadLetter destination.
	Dest string
	// Err is the handler's last error, as text.
	Err string
	// Group is the queue's group ("" for a table without a group column).
	Group string
	// Headers are the row's headers (Table.Headers; empty without the column), with
	// the dead letter's hook headers (settle.HeaderHookPrefix: a tracer's link).
	Headers map[string]string
	// ID is the row's id as the driver returned it.
	ID any
	// Payload is the row's payload.
	Payload []byte
	// Table is the inbox table's name.
	Table string
}

// Queue is a settle.Source reading one group of an inbox table (or the whole table,
// when it has no group column). Make one with Inbox.Queue.
type Queue struct {
	cfg   queueConfig
	group string
	ib    *Inbox
}

var _ settle.Source = (*Queue)(nil)

// Queue returns the source of group's rows; group is "" for a table without a group
// column. Mount it with settle.App.Mount: settle.MaxAttempts(n) and
// settle.DeadLetter(dest) are declared together (either alone stops startup), dest
// being the dead-letter group, or, for a table without a group column, the dead-letter
// table (same columns).
func (ib *Inbox) Queue(group string, opts ...Option) *Queue {
	cfg := queueConfig{batch: DefaultBatch, lease: DefaultLease, poll: DefaultPoll}
	for _, o := range opts {
		if o != nil {
			o.applyQueue(&cfg)
		}
	}
	return &Queue{cfg: cfg, group: group, ib: ib}
}

// Transport is for settle's own use and may change in any release.
func (q *Queue) Transport(env source.Env) source.Transport { return newTransport(q, env) }
