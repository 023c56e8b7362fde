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
	// admin returns what the operator's statements differ in (see dialect_admin.go).
	admin() adminSpec
	// attemptMax returns the largest value table t's attempt column holds, 0 for a type
	// without a known bound (see attempt.go).
	attemptMax(ctx context.Context, db *sql.DB, t Table) (int64, error)
	// begin starts a write transaction (BEGIN IMMEDIATE on SQLite).
	begin(ctx context.Context, db *sql.DB) (txn, error)
	// checkTimes returns a problem for each time column of table t whose values would not
	// compare in time order with the statements' "now" (SQLite, whose columns take any
	// type); nil elsewhere, where the columns have a time type.
	checkTimes(ctx context.Context, db *sql.DB, t Table) []error
	// checkServer returns a problem of the server's configuration that the queue's
	// statements cannot run under (MySQL: a binary log in STATEMENT format, see
	// readCommitted); nil elsewhere.
	checkServer(ctx context.Context, db *sql.DB) error
	// claim leases up to n due rows of the queue and returns them: with takeover, rows
	// whose lease passed (the takeover claim, see takeover.go), else the main claim's.
	// skew is skewArg's value (see testSkew).
	claim(ctx context.Context, db *sql.DB, s *statements, skew any, lease time.Duration, n int, takeover bool) ([]claimedRow, error)
	// indexes returns the column names of each index of table, in index order.
	indexes(ctx context.Context, db *sql.DB, table string) ([][]string, error)
	// insertIDs runs st, a publishN of n rows, in q and returns the rows' generated ids
	// in the order of the rows.
	insertIDs(ctx context.Context, q Tx, st stmt, n int, vals map[string]any) ([]int64, error)
	// durArg is how a duration is passed to the statements.
	durArg(d time.Duration) any
	// extendMany moves the leases of n held rows (extendN: each row's :id<i> fenced by
	// its :token<i>) to now + :lease in one write and returns the new lease of each row
	// it moved, by id (idString); a row whose lease was taken over is not moved.
	extendMany(ctx context.Context, db *sql.DB, s *statements, n int, vals map[string]any) (map[string]any, error)
	// fencedMany runs write, a batched write of n leased rows fenced by their leases
	// (see batched), and returns the ids of the rows it changed.
	fencedMany(ctx context.Context, db *sql.DB, s *statements, write stmt, n int, vals map[string]any) ([]any, error)
	// moveToTable moves the leased row into the dead-letter table in one transaction and
	// reports whether the lease still held. vals holds :id and :token (the fence),
	// :attempt (the dead row's), :error (its last error) and :skew.
	moveToTable(ctx context.Context, db *sql.DB, s *statements, vals map[string]any) (bool, error)
	// skewArg is how the statements take the skew their "now" adds to the database's
	// clock: zero in production, how far a test clock has moved under a test (see
	// testSkew).
	skewArg(d time.Duration) any
	// retryable reports whether err is a transient lock conflict (SQLITE_BUSY, a
	// deadlock) that the same statement may retry.
	retryable(err error) bool
	// unready reports whether err says the connection failed or was killed, or the server
	// is starting, shutting down or out of connections: what a later try, on another
	// connection, may not meet (see openError).
	unready(err error) bool
	// serialize returns a lock that orders this process's writes on db (SQLite has one
	// writer); other dialects return a no-op.
	serialize(db *sql.DB) func()
}

// queueSpec is what a queue adds to its table for its statements.
type queueSpec struct {
	// attemptMax is the largest value the attempt column holds (0: unknown): every
	// statement adding an attempt stops there (see quotedTable.bump).
	attemptMax int64
	deadTable  string // dead-letter table (a table without a group column)
	// dueOrder: claim in (retry_after, id) order, for a table with an index led by
	// (group, retry_after) (see claimOrder); else in id order.
	dueOrder bool
	fifo     bool
}

// txn is a write transaction: *sql.Tx, or a connection inside BEGIN IMMEDIATE.
type txn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	Commit() error
	Rollback() error
}

// statements are one queue's SQL, compiled for its dialect.
type statements struct {
	// ackN deletes n leased rows, each fenced by its lease; its arguments are each
	// row's id and lease, in turn.
	ackN func(n int) string
	// claim leases due rows (one statement where the dialect allows it): a plain
	// queue's, those whose lease is NULL; a FIFO queue's, also one whose lease passed
	// (see claimLease), adding one attempt to it (see claimCount).
	claim stmt
	// claimLock, when set, serializes FIFO claims of one group (an advisory lock).
	claimLock stmt
	// claimSelect, claimUpdate, claimRead: the three steps of a dialect whose claim is
	// a transaction (MySQL); claimUpdate and claimRead take an id list (see inN).
	claimSelect stmt
	claimUpdate func(n int) stmt
	claimRead   func(n int) stmt
	claimUnlock stmt
	// takeover (takeoverSelect on MySQL, the first step in place of claimSelect) leases
	// due rows whose lease passed, adding one attempt to each (see claimCount): a plain
	// queue's takeover claim (see takeover.go); empty for a FIFO queue.
	takeover       stmt
	takeoverSelect stmt
	// columns selects no row of a table, to read its column names.
	columns func(table string) string
	// deadGroupN moves n leased rows to the dead-letter group :dest, each row's attempt
	// set to its :attempt<i> (see batched).
	deadGroupN func(n int) stmt
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
	// extendN moves n leased rows' leases to now + :lease, each fenced by its lease,
	// returning their ids and new leases where the dialect can (see batched).
	extendN func(n int) stmt
	// leasesN selects the ids and leases of n rows by id (:id<i>): what extendN wrote,
	// on a dialect whose UPDATE cannot return it (MySQL).
	leasesN func(n int) stmt
	// nextDue selects how long until the queue's earliest row that waits for its
	// retry_after comes due, in microseconds (NULL: none waits); empty for a table
	// without a retry_after column.
	nextDue stmt
	// lockLeased locks a leased row for a user hook's transaction.
	lockLeased stmt
	// lockN locks n leased rows, each fenced by its lease, and selects their ids: what a
	// batched write changes, on a dialect whose UPDATE cannot return them (MySQL).
	lockN func(n int) stmt
	// parkN hides n leased rows, each until now + its :delay<i>, clears their leases and
	// adds one attempt. It, putBackN and deadGroupN also write each row's :error<i> (a
	// last-error column) and :headers<i> (a headers column; NULL keeps them).
	parkN func(n int) stmt
	// notify announces to the processes listening that rows of :group came due on the
	// table's :channel (PostgreSQL's pg_notify); empty elsewhere.
	notify stmt
	// publishN inserts n rows of :group, each row's payload :payload<i>, as the service
	// would: attempt 1, not leased, headers :headers, due as due says (see publishRows).
	publishN func(n int, due dueKind) stmt
	// putBackN clears n leased rows' leases and adds one attempt.
	putBackN func(n int) stmt
	// releaseN clears n leased rows' leases, their attempts unchanged: rows read and never
	// started, handed back at a graceful stop.
	releaseN func(n int) stmt
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
	attempt, deadAt, group, headers, id, lastError, lease, payload, retryAfter, table string
	attemptMax                                                                        int64 // see queueSpec.attemptMax
}

func (t Table) quoted(q byte) quotedTable {
	qc := func(s string) string {
		if s == "" {
			return ""
		}
		return string(q) + s + string(q)
	}
	return quotedTable{
		attempt: qc(t.Attempt), deadAt: qc(t.DeadAt), group: qc(t.Group), headers: qc(t.Headers), id: qc(t.ID), lastError: qc(t.LastError),
		lease: qc(t.LockedUntil), payload: qc(t.Payload), retryAfter: qc(t.RetryAfter), table: quoteWith(t.Name, q),
	}
}

// claimOrder is the order a claim takes due rows in. A FIFO queue takes them in
// (retry_after, id) order, its promise. A plain queue does so too where an index led by
// (group, retry_after) can hand them out in that order (q.dueOrder), without reading
// past the rows parked for later; else in id order, which the primary key serves
// (walking past parked rows, but never sorting the whole group per claim, as the
// earliest-due order would without its index).
func (c quotedTable) claimOrder(q queueSpec) string {
	if c.retryAfter == "" || (!q.fifo && !q.dueOrder) {
		return c.id
	}
	return c.retryAfter + ", " + c.id
}

// dueIndex reports whether one of the indexes (each its column names, in order) is led
// by the group column (when the table has one) then retry_after: what dueOrder needs.
func (t Table) dueIndex(indexes [][]string) bool {
	lead := []string{t.RetryAfter}
	if t.Group != "" {
		lead = []string{t.Group, t.RetryAfter}
	}
	for _, cols := range indexes {
		if len(cols) < len(lead) {
			continue
		}
		ok := true
		for i, c := range lead {
			ok = ok && strings.EqualFold(cols[i], c)
		}
		if ok {
			return true
		}
	}
	return false
}

// claimCount is the assignment a claim puts before its new lease: one more attempt for a
// row whose lease is set (a claimed row is due, so its lease has passed: the worker it
// was leased to never settled it, as every settlement clears the lease or deletes the
// row). A NULL attempt or one below 1, read as 1, becomes 2; the column's maximum stays
// (see bump). Empty for a table without an attempt column. It comes first because MySQL
// assigns left to right, each assignment seeing the ones before it.
func (c quotedTable) claimCount() string {
	if c.attempt == "" {
		return ""
	}
	return fmt.Sprintf("%s = CASE WHEN %s IS NULL THEN %s ELSE %s END, ", c.attempt, c.lease, c.attempt, c.bump(c.attempt))
}

// rowColumns returns the columns a dead-letter move copies and the values it writes
// for them: the lease cleared, the attempt the engine counted (attempt, an expression
// of the dialect taking :attempt), the last error (lastError, taking :error), the
// dead-at time now and the headers (:headers, or when NULL the row's: see headersArg),
// when the table has those columns.
func (c quotedTable) rowColumns(attempt, lastError, now string) (cols, vals []string) {
	for _, col := range []string{c.id, c.group, c.attempt, c.retryAfter, c.lease, c.payload, c.lastError, c.deadAt, c.headers} {
		if col == "" {
			continue
		}
		cols = append(cols, col)
		switch col {
		case c.lease:
			vals = append(vals, "NULL")
		case c.attempt:
			vals = append(vals, attempt)
		case c.lastError:
			vals = append(vals, lastError)
		case c.deadAt:
			vals = append(vals, now)
		case c.headers:
			vals = append(vals, "COALESCE(:headers, "+col+")")
		default:
			vals = append(vals, col)
		}
	}
	return cols, vals
}

// headersOut is the headers column as a claim returns it (text, asText its cast), or
// NULL for a table without one: a claim always returns five columns (see
// queryClaimed).
func (c quotedTable) headersOut(asText func(string) string) string {
	if c.headers == "" {
		return "NULL"
	}
	return asText(c.headers)
}

// batchSpec is what the batched writes of a dialect differ in (see batched).
type batchSpec struct {
	// lease is the lease column as the statements return it: the value a claim returns,
	// which fences the row's later writes.
	lease string
	// leaseUntil is a new lease's value, now + :lease.
	leaseUntil string
	// now is the statements' "now" (a dead-at time).
	now string
	// returning: the dialect's UPDATE returns the ids it changed (RETURNING); else a
	// batch first locks and selects its rows with lockN, in the same transaction.
	returning bool
	// retryAt is retry_after's value delay from now (delay: an expression of the
	// dialect's duration argument, see dialect.durArg).
	retryAt func(delay string) string
	// atMicros is the time value of a statement argument holding microseconds since
	// the Unix epoch (At), in the form the time columns hold.
	atMicros func(arg string) string
	style    placeholderStyle
	// typed casts a statement argument whose type the dialect cannot infer (Postgres),
	// an integer; typedText, a text.
	typed     func(arg string) string
	typedText func(arg string) string
}

// batched sets the statements that settle n leased rows, or extend their leases, in one
// write, each row fenced by its own lease (:id<i>, :token<i>): a row whose lease was
// taken over is not changed, and the ids the write returns (or lockN selects) say which
// rows were.
func (c quotedTable) batched(s *statements, b batchSpec) {
	// update sets set(n) on n fenced rows, returning their ids (and the columns more
	// names) where the dialect can.
	update := func(more string, set func(n int) string) func(n int) stmt {
		ret := ""
		if b.returning {
			ret = " RETURNING " + c.id + more
		}
		return func(n int) stmt {
			return compile(fmt.Sprintf(`UPDATE %s SET %s WHERE %s%s`, c.table, set(n), c.fences(n), ret), b.style)
		}
	}
	plusOne := ""
	if c.attempt != "" {
		plusOne = fmt.Sprintf(", %s = %s", c.attempt, c.bump(c.attempt))
	}
	// failed is what a failed attempt also sets: each row's last error (:error<i>).
	failed := func(int) string { return "" }
	if c.lastError != "" {
		failed = func(n int) string { return fmt.Sprintf(", %s = %s", c.lastError, c.byID(n, "error", b.typedText)) }
	}
	// kept is what a settlement leaving the row in the table also sets: each row's
	// headers, :headers<i> or, when NULL, as they are (see headersArg).
	kept := func(int) string { return "" }
	if c.headers != "" {
		kept = func(n int) string {
			return fmt.Sprintf(", %s = %s", c.headers, c.byID(n, "headers", func(arg string) string { return "COALESCE(" + arg + ", " + c.headers + ")" }))
		}
	}
	s.publishN = c.publishRows(b)
	s.ackN = func(n int) string {
		return compile(fmt.Sprintf(`DELETE FROM %s WHERE %s`, c.table, c.fences(n)), b.style).text
	}
	s.extendN = update(", "+b.lease, func(int) string { return c.lease + " = " + b.leaseUntil })
	s.putBackN = update("", func(n int) string { return c.lease + " = NULL" + plusOne + failed(n) + kept(n) })
	s.releaseN = update("", func(int) string { return c.lease + " = NULL" })
	if c.retryAfter != "" {
		s.parkN = update("", func(n int) string {
			return fmt.Sprintf("%s = NULL, %s = %s%s%s%s", c.lease, c.retryAfter, b.retryAt(c.byID(n, "delay", b.typed)), plusOne, failed(n), kept(n))
		})
	}
	if c.group != "" {
		s.deadGroupN = update("", func(n int) string {
			set := fmt.Sprintf("%s = :dest, %s = NULL", c.group, c.lease)
			if c.attempt != "" {
				set += fmt.Sprintf(", %s = %s", c.attempt, c.byID(n, "attempt", b.typed))
			}
			if c.deadAt != "" {
				set += fmt.Sprintf(", %s = %s", c.deadAt, b.now)
			}
			return set + failed(n) + kept(n)
		})
	}
	if !b.returning {
		s.lockN = func(n int) stmt {
			return compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s FOR UPDATE`, c.id, c.table, c.fences(n)), b.style)
		}
		s.leasesN = func(n int) stmt {
			return compile(fmt.Sprintf(`SELECT %s, %s FROM %s WHERE %s IN (%s)`, c.id, b.lease, c.table, c.id, list("id", n)), b.style)
		}
	}
}

// fences returns the condition matching n leased rows, each by its id and its lease:
// "(id = :id0 AND lease = :token0) OR …".
func (c quotedTable) fences(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("(%s = :id%d AND %s = :token%d)", c.id, i, c.lease, i)
	}
	return strings.Join(parts, " OR ")
}

// byID returns the value of the argument name<i> of the row whose id is :id<i>, for n
// rows: "CASE id WHEN :id0 THEN :name0 … END".
func (c quotedTable) byID(n int, name string, typed func(string) string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CASE %s", c.id)
	for i := range n {
		fmt.Fprintf(&b, " WHEN :id%d THEN %s", i, typed(fmt.Sprintf(":%s%d", name, i)))
	}
	b.WriteString(" END")
	return b.String()
}

// untyped leaves an argument as it is (a dialect that infers its type).
func untyped(arg string) string { return arg }

// splitIndexes turns rows of (index, comma-separated columns) into column lists.
func splitIndexes(rows *sql.Rows, err error) ([][]string, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][]string
	for rows.Next() {
		var name, cols string
		if err := rows.Scan(&name, &cols); err != nil {
			return nil, err
		}
		out = append(out, strings.Split(cols, ","))
	}
	return out, rows.Err()
}
