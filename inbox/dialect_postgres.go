package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Postgres is the PostgreSQL dialect (pgx v5 through database/sql: pgx/v5/stdlib).
// Claims are one UPDATE over a SELECT … FOR UPDATE SKIP LOCKED (adding one attempt to a
// row whose lease passed) in a transaction of its own, so that a claim whose commit's
// reply was lost can release its rows; FIFO claims also take a transaction-scoped
// advisory lock on the group. Time columns are timestamptz; "now" is now(), the database's clock.
var Postgres Dialect = postgres{}

type postgres struct{}

func (postgres) String() string { return "postgres" }
func (postgres) sealed()        {}

// pgNow is the statements' "now": the database's clock plus the skew a test clock
// adds (microseconds; 0 in production).
const pgNow = `(now() + :skew::bigint * interval '1 microsecond')`

func (postgres) build(t Table, q queueSpec) *statements {
	c := t.quoted('"')
	c.attemptMax = q.attemptMax
	s := &statements{}
	groupIs := func(alias string) string {
		if c.group == "" {
			return "TRUE"
		}
		return alias + c.group + " = :group"
	}
	attempt := "1"
	if c.attempt != "" {
		attempt = c.attempt
	}
	due, passed := c.claimLease(pgNow, q.fifo), c.takeoverLease(pgNow)
	if c.retryAfter != "" {
		ready := fmt.Sprintf(" AND (%s IS NULL OR %s <= %s)", c.retryAfter, c.retryAfter, pgNow)
		due, passed = due+ready, passed+ready
	}
	order, limit := c.claimOrder(q), ":n::bigint"
	if q.fifo {
		limit = "1"
		due += fmt.Sprintf(" AND NOT EXISTS (SELECT 1 FROM %s o WHERE %s AND o.%s > %s)",
			c.table, groupIs("o."), c.lease, pgNow)
		s.claimLock = compile(`SELECT pg_advisory_xact_lock(hashtextextended(:lock_key, 0))`, dollarNumbered)
	}
	leaseUntil := pgNow + " + :lease::bigint * interval '1 microsecond'"
	claim := func(due string) stmt {
		return compile(fmt.Sprintf(
			`UPDATE %[1]s SET %[11]s%[2]s = %[3]s WHERE %[4]s IN (SELECT %[4]s FROM %[1]s WHERE %[5]s AND %[6]s ORDER BY %[7]s LIMIT %[8]s FOR UPDATE SKIP LOCKED) RETURNING %[4]s, %[9]s, %[10]s, %[2]s, %[12]s`,
			c.table, c.lease, leaseUntil, c.id, groupIs(""), due, order, limit, attempt, c.payload, c.claimCount(), c.headersOut(pgText)), dollarNumbered)
	}
	s.claim = claim(due)
	if !q.fifo {
		s.takeover = claim(passed)
	}
	s.columns = func(table string) string {
		return fmt.Sprintf(`SELECT * FROM %s WHERE FALSE`, quoteWith(table, '"'))
	}
	fence := fmt.Sprintf("%s = :id AND %s = :token", c.id, c.lease)
	if c.group != "" {
		reset := ""
		if c.attempt != "" {
			reset = fmt.Sprintf(", %s = 1", c.attempt)
		}
		s.resend = compile(fmt.Sprintf(`UPDATE %s SET %s = :to, %s = NULL%s WHERE %s = :from`, c.table, c.group, c.lease, reset, c.group), dollarNumbered)
	}
	if q.deadTable != "" {
		cols, vals := c.rowColumns(":attempt::bigint", ":error::text", pgNow)
		s.deadMove = compile(fmt.Sprintf(`WITH moved AS (DELETE FROM %s WHERE %s RETURNING %s) INSERT INTO %s (%s) SELECT %s FROM moved`,
			c.table, fence, strings.Join(cols, ", "), quoteWith(q.deadTable, '"'), strings.Join(cols, ", "), strings.Join(vals, ", ")), dollarNumbered)
	}
	if c.retryAfter != "" {
		s.nextDue = compile(fmt.Sprintf(`SELECT CAST(EXTRACT(EPOCH FROM MIN(%[1]s) - %[2]s) * 1000000 AS BIGINT) FROM %[3]s WHERE %[4]s AND %[1]s > %[2]s`, c.retryAfter, pgNow, c.table, groupIs("")), dollarNumbered)
	}
	s.lockLeased = compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s FOR UPDATE`, c.id, c.table, fence), dollarNumbered)
	s.notify = compile(`SELECT pg_notify(:channel, :group)`, dollarNumbered)
	c.batched(s, batchSpec{lease: c.lease, leaseUntil: leaseUntil, returning: true, retryAt: func(delay string) string { return fmt.Sprintf("%s + (%s) * interval '1 microsecond'", pgNow, delay) }, atMicros: pgAt, style: dollarNumbered, typed: func(arg string) string { return arg + "::bigint" }, typedText: func(arg string) string { return arg + "::text" }, now: pgNow})
	return s
}

// pgText casts a column to text (a jsonb headers column too).
func pgText(col string) string { return "CAST(" + col + " AS TEXT)" }

func (postgres) begin(ctx context.Context, db *sql.DB) (txn, error) {
	return db.BeginTx(ctx, nil)
}

func (d postgres) claim(ctx context.Context, db *sql.DB, s *statements, skew any, lease time.Duration, n int, takeover bool) ([]claimedRow, error) {
	vals := map[string]any{"skew": skew, "lease": lease.Microseconds(), "n": int64(n), "group": s.group, "lock_key": s.lockKey}
	// One transaction, not an autocommitted UPDATE: a connection lost before COMMIT
	// rolls the claim back, and one lost at COMMIT leaves rows this claim read, to
	// release (see claimUncertain), where an autocommitted claim whose reply was lost
	// left its rows leased to no one until their leases passed.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	claim := s.claim
	switch {
	case takeover:
		claim = s.takeover
	case s.claimLock.text != "":
		if _, err := tx.ExecContext(ctx, s.claimLock.text, s.claimLock.bind(vals)...); err != nil {
			return nil, err
		}
	}
	rows, err := queryClaimed(ctx, tx, claim.text, claim.bind(vals))
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, &claimUncertain{err: err, rows: rows}
	}
	return rows, nil
}

func (postgres) checkServer(context.Context, *sql.DB) error { return nil }

func (postgres) checkTimes(context.Context, *sql.DB, Table) []error { return nil }

func (postgres) indexes(ctx context.Context, db *sql.DB, table string) ([][]string, error) {
	return splitIndexes(db.QueryContext(ctx, `SELECT i.indexrelid::regclass::text, COALESCE(string_agg(a.attname, ',' ORDER BY k.n), '')
FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1::regclass GROUP BY i.indexrelid`, quoteWith(table, '"')))
}

func (postgres) insertIDs(ctx context.Context, q Tx, st stmt, n int, vals map[string]any) ([]int64, error) {
	return returnedIDs(ctx, q, st, n, vals)
}

func (postgres) durArg(d time.Duration) any { return d.Microseconds() }

func (postgres) extendMany(ctx context.Context, db *sql.DB, s *statements, n int, vals map[string]any) (map[string]any, error) {
	write := s.extendN(n)
	return queryLeases(ctx, db, write.text, write.bind(vals))
}

func (postgres) fencedMany(ctx context.Context, db *sql.DB, _ *statements, write stmt, _ int, vals map[string]any) ([]any, error) {
	return queryIDs(ctx, db, write.text, write.bind(vals))
}

func (postgres) moveToTable(ctx context.Context, db *sql.DB, s *statements, vals map[string]any) (bool, error) {
	res, err := db.ExecContext(ctx, s.deadMove.text, s.deadMove.bind(vals)...)
	return affectedOne(res, err)
}

func (postgres) skewArg(d time.Duration) any { return d.Microseconds() }

// retryable: a deadlock (40P01) or a serialization failure (40001).
func (postgres) retryable(err error) bool {
	var coded interface{ SQLState() string }
	if errors.As(err, &coded) {
		return coded.SQLState() == "40P01" || coded.SQLState() == "40001"
	}
	return false
}

// unready: a connection exception (class 08), a backend terminated by an operator, a
// failover or a crash (57P01, 57P02), a server starting up (57P03), or one out of
// connections (53300).
func (postgres) unready(err error) bool {
	var coded interface{ SQLState() string }
	if !errors.As(err, &coded) {
		return false
	}
	switch code := coded.SQLState(); code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	default:
		return strings.HasPrefix(code, "08")
	}
}

func (postgres) serialize(*sql.DB) func() { return func() {} }

func (postgres) admin() adminSpec {
	return adminSpec{
		forUpdate: " FOR UPDATE",
		micros:    func(x string) string { return "CAST(EXTRACT(EPOCH FROM " + x + ") * 1000000 AS BIGINT)" },
		now:       pgNow, quote: '"', style: dollarNumbered,
		text: pgText,
	}
}
