package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Dialect is the SQL dialect of an inbox's database: SQLite, Postgres or MySQL (which
// also serves MariaDB 10.6+). It is sealed: only this package implements it.
type Dialect interface {
	// String names the dialect.
	String() string

	sealed()
}

// dialect is what a Dialect does. Every SQL text of the package lives in the dialect
// files (dialect_*.go); the rest of the package only runs their statements.
type dialect interface {
	Dialect
	// build returns the statements of one queue of table t.
	build(t Table, q queueSpec) *statements
	// begin starts a write transaction (BEGIN IMMEDIATE on SQLite).
	begin(ctx context.Context, db *sql.DB) (txn, error)
	// claim leases up to n due rows of the queue and returns them.
	// skew is skewArg's value (see testSkew).
	claim(ctx context.Context, db *sql.DB, s *statements, skew any, lease time.Duration, n int) ([]claimedRow, error)
	// durArg is how a duration is passed to the statements.
	durArg(d time.Duration) any
	// extend moves a held lease to now + lease and returns the new token, or ok false
	// when the lease was taken over.
	extend(ctx context.Context, db *sql.DB, s *statements, id, token, skew any, lease time.Duration) (newToken any, ok bool, err error)
	// moveToTable moves the leased row into the dead-letter table, its attempt set to
	// attempt, in one transaction and reports whether the lease still held.
	moveToTable(ctx context.Context, db *sql.DB, s *statements, id, token any, attempt int64) (bool, error)
	// skewArg is how the statements take the skew their "now" adds to the database's
	// clock: zero in production, how far a test clock has moved under a test (see
	// testSkew).
	skewArg(d time.Duration) any
	// retryable reports whether err is a transient lock conflict (SQLITE_BUSY, a
	// deadlock) that the same statement may retry.
	retryable(err error) bool
	// serialize returns a lock that orders this process's writes on db (SQLite has one
	// writer); other dialects return a no-op.
	serialize(db *sql.DB) func()
}

// queueSpec is what a queue adds to its table for its statements.
type queueSpec struct {
	deadTable string // dead-letter table (a table without a group column)
	fifo      bool
}

// txn is a write transaction: *sql.Tx, or a connection inside BEGIN IMMEDIATE.
type txn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	Commit() error
	Rollback() error
}

// claimedRow is one row a claim leased.
type claimedRow struct {
	attempt int64
	id      any
	payload []byte
	token   any // the lease as stored: the fence of every later write
}

// statements are one queue's SQL, compiled for its dialect.
type statements struct {
	// ack deletes n leased rows; built per n (see ackN).
	ackN func(n int) string
	// claim leases due rows (one statement where the dialect allows it), adding one
	// attempt to a row whose lease passed (see claimCount).
	claim stmt
	// claimLock, when set, serializes FIFO claims of one group (an advisory lock).
	claimLock stmt
	// claimSelect, claimUpdate, claimRead: the three steps of a dialect whose claim is
	// a transaction (MySQL); claimUpdate and claimRead take an id list (see inN).
	claimSelect stmt
	claimUpdate func(n int) stmt
	claimRead   func(n int) stmt
	claimUnlock stmt
	// columns selects no row of a table, to read its column names.
	columns func(table string) string
	// deadGroup moves a leased row to the dead-letter group, its attempt set to :attempt.
	deadGroup stmt
	// deadInsert and deadDelete move a leased row into the dead-letter table, its attempt
	// set to :attempt.
	deadInsert stmt
	deadDelete stmt
	// deadMove does both in one statement where the dialect can (Postgres).
	deadMove stmt
	// group is the queue's group (empty for a table without a group column) and lockKey
	// names its FIFO lock.
	group   string
	lockKey string
	// extend moves a held lease forward (returning the new lease where the dialect can).
	extend     stmt
	extendLock stmt
	extendRead stmt
	// lockLeased locks a leased row for a user hook's transaction.
	lockLeased stmt
	// park hides a leased row until now + delay, clears its lease, adds one attempt.
	park stmt
	// publish inserts a row as the service would.
	publish stmt
	// putBack clears a leased row's lease and adds one attempt.
	putBack stmt
	// release clears a leased row's lease, its attempt unchanged: a row read and never
	// started, handed back at a graceful stop.
	release stmt
	// resend moves every row of one group to another, attempt reset.
	resend stmt
}

// stmt is one compiled statement: its text and the names of its arguments in order.
type stmt struct {
	args []string
	text string
}

// bind returns st's arguments in order from named values.
func (st stmt) bind(vals map[string]any) []any {
	out := make([]any, len(st.args))
	for i, name := range st.args {
		v, ok := vals[name]
		if !ok {
			panic(fmt.Sprintf("inbox: statement argument %q missing", name))
		}
		out[i] = v
	}
	return out
}

// placeholderStyle is how a dialect writes a statement's arguments.
type placeholderStyle int

const (
	dollarNumbered   placeholderStyle = iota // $1, $2: Postgres
	questionNumbered                         // ?1, ?2: SQLite
	questionRepeated                         // ?, ?: MySQL (a repeated argument is passed again)
)

// compile turns a template with :name markers into a statement of the style.
func compile(tmpl string, style placeholderStyle) stmt {
	var b strings.Builder
	var args []string
	index := map[string]int{}
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		if c != ':' || i+1 >= len(tmpl) || !isNameStart(tmpl[i+1]) || (i > 0 && tmpl[i-1] == ':') {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		for j < len(tmpl) && isNameChar(tmpl[j]) {
			j++
		}
		name := tmpl[i+1 : j]
		i = j - 1
		switch style {
		case questionRepeated:
			args = append(args, name)
			b.WriteByte('?')
		default:
			n, ok := index[name]
			if !ok {
				args = append(args, name)
				n = len(args)
				index[name] = n
			}
			if style == dollarNumbered {
				fmt.Fprintf(&b, "$%d", n)
			} else {
				fmt.Fprintf(&b, "?%d", n)
			}
		}
	}
	return stmt{args: args, text: b.String()}
}

func isNameStart(c byte) bool { return c == '_' || (c >= 'a' && c <= 'z') }
func isNameChar(c byte) bool  { return isNameStart(c) || (c >= '0' && c <= '9') }

// list returns ":prefix0, :prefix1, …" for n arguments.
func list(prefix string, n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(":%s%d", prefix, i)
	}
	return strings.Join(parts, ", ")
}

// quoteWith quotes a possibly schema-qualified name, each dot-separated part on its own.
func quoteWith(name string, q byte) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = string(q) + p + string(q)
	}
	return strings.Join(parts, ".")
}

// quotedTable is a Table with every name quoted for one dialect; an empty column
// stays empty.
type quotedTable struct {
	attempt, group, id, lease, payload, retryAfter, table string
}

func (t Table) quoted(q byte) quotedTable {
	qc := func(s string) string {
		if s == "" {
			return ""
		}
		return string(q) + s + string(q)
	}
	return quotedTable{
		attempt: qc(t.Attempt), group: qc(t.Group), id: qc(t.ID), lease: qc(t.LockedUntil),
		payload: qc(t.Payload), retryAfter: qc(t.RetryAfter), table: quoteWith(t.Name, q),
	}
}

// claimCount is the assignment a claim puts before its new lease: one more attempt for a
// row whose lease is set (a claimed row is due, so its lease has passed: the worker it
// was leased to never settled it, as every settlement clears the lease or deletes the
// row). A NULL attempt, read as 1, becomes 2. Empty for a table without an attempt
// column. It comes first because MySQL
// assigns left to right, each assignment seeing the ones before it.
func (c quotedTable) claimCount() string {
	if c.attempt == "" {
		return ""
	}
	return fmt.Sprintf("%s = CASE WHEN %s IS NULL THEN %s ELSE COALESCE(%s, 1) + 1 END, ", c.attempt, c.lease, c.attempt, c.attempt)
}

// setAttempt is the assignment a dead-letter move to a group adds: the attempt column
// becomes the attempts the engine counted (the cap, for a row whose last claims
// crashed). Empty for a table without an attempt column.
func (c quotedTable) setAttempt(value string) string {
	if c.attempt == "" {
		return ""
	}
	return fmt.Sprintf(", %s = %s", c.attempt, value)
}

// rowColumns returns the columns a dead-letter move copies and the values it writes
// for them: the lease cleared, the attempt the engine counted (attempt, an expression
// of the dialect taking :attempt).
func (c quotedTable) rowColumns(attempt string) (cols, vals []string) {
	for _, col := range []string{c.id, c.group, c.attempt, c.retryAfter, c.lease, c.payload} {
		if col == "" {
			continue
		}
		cols = append(cols, col)
		switch col {
		case c.lease:
			vals = append(vals, "NULL")
		case c.attempt:
			vals = append(vals, attempt)
		default:
			vals = append(vals, col)
		}
	}
	return cols, vals
}

// publishInsert is the INSERT of Publish: group and payload, attempt 1 and due now.
func (c quotedTable) publishInsert(now string) string {
	var cols, vals []string
	if c.group != "" {
		cols, vals = append(cols, c.group), append(vals, ":group")
	}
	cols, vals = append(cols, c.payload), append(vals, ":payload")
	if c.attempt != "" {
		cols, vals = append(cols, c.attempt), append(vals, "1")
	}
	if c.retryAfter != "" {
		cols, vals = append(cols, c.retryAfter), append(vals, now)
	}
	return fmt.Sprintf(`INSERT INTO %s (%s) VALUES (%s)`, c.table, strings.Join(cols, ", "), strings.Join(vals, ", "))
}
