package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// MySQL is the MySQL 8 and MariaDB 10.6+ dialect (go-sql-driver/mysql; add
// parseTime=true to the DSN). A claim is one transaction: SELECT … FOR UPDATE SKIP
// LOCKED, UPDATE the lease (adding one attempt to a row whose lease passed), read the
// rows back; FIFO claims also hold GET_LOCK on the group. A dead-letter move to a table
// is two statements in one transaction. Claims and batched settlements run at READ
// COMMITTED, so that none holds a lock another program's INSERT waits for (see
// readCommitted); a server whose binary log is in STATEMENT format refuses such writes,
// and Open refuses it. Time columns are DATETIME(6); "now" is NOW(6), the database's
// clock in the session's time zone (keep it the same for every session, e.g.
// time_zone='+00:00' in the DSN).
var MySQL Dialect = mysql{}

type mysql struct{}

func (mysql) String() string { return "mysql" }
func (mysql) sealed()        {}

// myNow is the statements' "now": the database's clock plus the skew a test clock
// adds (microseconds; 0 in production).
const myNow = `(NOW(6) + INTERVAL :skew MICROSECOND)`

func (mysql) build(t Table, q queueSpec) *statements {
	c := t.quoted('`')
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
	due, passed := c.claimLease(myNow, q.fifo), c.takeoverLease(myNow)
	if c.retryAfter != "" {
		ready := fmt.Sprintf(" AND (%s IS NULL OR %s <= %s)", c.retryAfter, c.retryAfter, myNow)
		due, passed = due+ready, passed+ready
	}
	order, limit := c.claimOrder(q), ":n"
	if q.fifo {
		limit = "1"
		due += fmt.Sprintf(" AND NOT EXISTS (SELECT 1 FROM %s o WHERE %s AND o.%s > %s)", c.table, groupIs("o."), c.lease, myNow)
		s.claimLock = compile(`SELECT GET_LOCK(:lock_key, 30)`, questionRepeated)
		s.claimUnlock = compile(`SELECT RELEASE_LOCK(:lock_key)`, questionRepeated)
	}
	leaseUntil := myNow + " + INTERVAL :lease MICROSECOND"
	claimSelect := func(due string) stmt {
		return compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s AND %s ORDER BY %s LIMIT %s FOR UPDATE SKIP LOCKED`,
			c.id, c.table, groupIs(""), due, order, limit), questionRepeated)
	}
	s.claimSelect = claimSelect(due)
	if !q.fifo {
		s.takeoverSelect = claimSelect(passed)
	}
	s.claimUpdate = func(n int) stmt {
		return compile(fmt.Sprintf(`UPDATE %s SET %s%s = %s WHERE %s IN (%s)`, c.table, c.claimCount(), c.lease, leaseUntil, c.id, list("id", n)), questionRepeated)
	}
	s.claimRead = func(n int) stmt {
		return compile(fmt.Sprintf(`SELECT %s, %s, %s, %s, %s FROM %s WHERE %s IN (%s) ORDER BY %s`,
			c.id, attempt, c.payload, c.lease, c.headersOut(untyped), c.table, c.id, list("id", n), order), questionRepeated)
	}
	s.columns = func(table string) string {
		return fmt.Sprintf(`SELECT * FROM %s WHERE FALSE`, quoteWith(table, '`'))
	}
	fence := fmt.Sprintf("%s = :id AND %s = :token", c.id, c.lease)
	if c.group != "" {
		reset := ""
		if c.attempt != "" {
			reset = fmt.Sprintf(", %s = 1", c.attempt)
		}
		s.resend = compile(fmt.Sprintf(`UPDATE %s SET %s = :to, %s = NULL%s WHERE %s = :from`, c.table, c.group, c.lease, reset, c.group), questionRepeated)
	}
	if q.deadTable != "" {
		cols, vals := c.rowColumns(":attempt", ":error", myNow)
		s.deadInsert = compile(fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s`,
			quoteWith(q.deadTable, '`'), strings.Join(cols, ", "), strings.Join(vals, ", "), c.table, fence), questionRepeated)
		s.deadDelete = compile(fmt.Sprintf(`DELETE FROM %s WHERE %s`, c.table, fence), questionRepeated)
	}
	if c.retryAfter != "" {
		s.nextDue = compile(fmt.Sprintf(`SELECT TIMESTAMPDIFF(MICROSECOND, %[2]s, MIN(%[1]s)) FROM %[3]s WHERE %[4]s AND %[1]s > %[2]s`, c.retryAfter, myNow, c.table, groupIs("")), questionRepeated)
	}
	s.lockLeased = compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s FOR UPDATE`, c.id, c.table, fence), questionRepeated)
	c.batched(s, batchSpec{lease: c.lease, leaseUntil: leaseUntil, returning: false, retryAt: func(delay string) string { return fmt.Sprintf("%s + INTERVAL (%s) MICROSECOND", myNow, delay) }, atMicros: myAt, style: questionRepeated, typed: untyped, typedText: untyped, now: myNow})
	return s
}

// readCommitted is the isolation level of a queue's claims and batched settlements on
// MySQL. At the default, REPEATABLE READ, InnoDB's locking reads and writes take
// next-key locks: the record and the gap before it, up to the index's supremum at the
// end of a scan. A claim's SELECT … FOR UPDATE SKIP LOCKED walks the group's index
// (the README's (group, retry_after, id), or one on the group): a producer's INSERT then
// waits for its insert intention lock in a gap the claim holds, having already written
// its new row into the primary key; and the claim's UPDATE … WHERE id IN (…), which the
// optimizer runs as a scan of the primary key on a small table, waits for that new row.
// Each waited for the other and InnoDB rolled the producer's INSERT back (error 1213: in
// every one of 10 runs of TestClaimsNeverMakeAProducersInsertFail on a table with the
// README's indexes, 993 INSERTs in all; see RELIABILITY.md). At READ COMMITTED
// InnoDB takes no gap locks for searches and scans (only for foreign-key and duplicate-
// key checks), so a producer's INSERT, whose waits are for gaps, never waits for these
// transactions; and an UPDATE reads a row another transaction locked in its last
// committed version instead of waiting for it (a semi-consistent read), so a claim never
// waits for a producer's uncommitted row either. SKIP LOCKED keeps its meaning.
//
// The batched settlements (lockedWrite: SELECT … FOR UPDATE of n fenced rows, then
// UPDATE) scan the primary key the same way, and run at READ COMMITTED too. The other
// writes keep the session's level: an ack's DELETE by ids is one autocommitted
// statement, a Publish locks no row but its own, and a move into the dead-letter table,
// a reply and an OnDeadLetter hook (whose SQL is the user's) lock one row by its primary
// key. None holds a gap of a secondary index while it waits for a row, which is what a
// producer's INSERT, past writing its row into the primary key, would be waiting for.
//
// A server that writes its binary log in STATEMENT format refuses the writes of a READ
// COMMITTED transaction (error 1665): Open refuses it (checkServer).
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

func (mysql) begin(ctx context.Context, db *sql.DB) (txn, error) {
	return db.BeginTx(ctx, nil)
}

func (mysql) claim(ctx context.Context, db *sql.DB, s *statements, skew any, lease time.Duration, n int, takeover bool) (rows []claimedRow, err error) {
	vals := map[string]any{"skew": skew, "lease": lease.Microseconds(), "n": int64(n), "group": s.group, "lock_key": s.lockKey}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if s.claimLock.text != "" {
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, s.claimLock.text, s.claimLock.bind(vals)...).Scan(&got); err != nil {
			return nil, err
		}
		if got.Int64 != 1 {
			return nil, nil // another worker holds the group: nothing for us now
		}
		defer func() {
			_, uerr := conn.ExecContext(context.WithoutCancel(ctx), s.claimUnlock.text, s.claimUnlock.bind(vals)...)
			if err == nil && uerr != nil {
				err = uerr
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	sel := s.claimSelect
	if takeover {
		sel = s.takeoverSelect
	}
	ids, err := queryIDs(ctx, tx, sel.text, sel.bind(vals))
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	for i, id := range ids {
		vals[fmt.Sprintf("id%d", i)] = id
	}
	up := s.claimUpdate(len(ids))
	if _, err := tx.ExecContext(ctx, up.text, up.bind(vals)...); err != nil {
		return nil, err
	}
	read := s.claimRead(len(ids))
	rows, err = queryClaimed(ctx, tx, read.text, read.bind(vals))
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		// The database may have committed before the connection failed: the rows may
		// be leased to us (see claimUncertain).
		return nil, &claimUncertain{err: err, rows: rows}
	}
	return rows, nil
}

// checkServer refuses a server that logs statements: with binary logging on and
// binlog_format=STATEMENT, InnoDB refuses every write of a READ COMMITTED transaction
// (error 1665, the locking SELECT of a claim included), and a queue's claims and batched
// settlements are such transactions (see readCommitted). ROW and MIXED, the defaults of
// MySQL 8 and MariaDB, log them.
func (mysql) checkServer(ctx context.Context, db *sql.DB) error {
	var logBin, sessionLog sql.NullInt64
	var format sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT @@log_bin, @@sql_log_bin, @@binlog_format`).Scan(&logBin, &sessionLog, &format); err != nil {
		return fmt.Errorf("inbox: read the server's binary log format: %w", err)
	}
	if logBin.Int64 != 0 && sessionLog.Int64 != 0 && strings.EqualFold(format.String, "STATEMENT") {
		return errors.New("inbox: the server writes its binary log in STATEMENT format (binlog_format=STATEMENT), in which InnoDB refuses the writes of the READ COMMITTED transactions a queue claims and settles in (so that no claim holds a lock another program's INSERT waits for): set binlog_format to ROW or MIXED on the server, or on the inbox's connections (binlog_format=ROW in the DSN; the user needs the privilege to set it)")
	}
	return nil
}

func (mysql) checkTimes(context.Context, *sql.DB, Table) []error { return nil }

func (mysql) indexes(ctx context.Context, db *sql.DB, table string) ([][]string, error) {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	}
	return splitIndexes(db.QueryContext(ctx, `SELECT INDEX_NAME, COALESCE(GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX SEPARATOR ','), '')
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? GROUP BY INDEX_NAME`, schema, name))
}

// insertIDs reads the ids of an INSERT of n rows from LastInsertId, the first row's:
// one multi-row INSERT ("simple insert") gets consecutive values from InnoDB in every
// lock mode, a step of the session's auto_increment_increment apart.
func (mysql) insertIDs(ctx context.Context, q Tx, st stmt, n int, vals map[string]any) ([]int64, error) {
	res, err := q.ExecContext(ctx, st.text, st.bind(vals)...)
	if err != nil {
		return nil, err
	}
	first, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	if first == 0 {
		return nil, errors.New("the rows were written, but LastInsertId is 0: the id column is not AUTO_INCREMENT, and Publish returns a generated integer id")
	}
	step := int64(1)
	if n > 1 {
		if err := q.QueryRowContext(ctx, `SELECT @@SESSION.auto_increment_increment`).Scan(&step); err != nil {
			return nil, err
		}
	}
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = first + int64(i)*step
	}
	return ids, nil
}

func (mysql) durArg(d time.Duration) any { return d.Microseconds() }

// extendMany writes the leases as fencedMany writes, then reads back the new leases of
// the rows it locked, in the same transaction.
func (d mysql) extendMany(ctx context.Context, db *sql.DB, s *statements, n int, vals map[string]any) (map[string]any, error) {
	var leases map[string]any
	_, err := d.lockedWrite(ctx, db, s, s.extendN(n), n, vals, func(tx *sql.Tx, ids []any) (err error) {
		read := s.leasesN(len(ids))
		byID := make(map[string]any, len(ids))
		for i, id := range ids {
			byID[fmt.Sprintf("id%d", i)] = id
		}
		leases, err = queryLeases(ctx, tx, read.text, read.bind(byID))
		return err
	})
	return leases, err
}

// fencedMany locks the rows whose leases still hold, then writes them, in one
// transaction (lockedWrite).
func (d mysql) fencedMany(ctx context.Context, db *sql.DB, s *statements, write stmt, n int, vals map[string]any) ([]any, error) {
	return d.lockedWrite(ctx, db, s, write, n, vals, nil)
}

// lockedWrite locks the rows of a batched write whose leases still hold (lockN), writes
// them, runs then (when set) on the ids it locked, and commits: MySQL's UPDATE cannot
// return the rows it changed. It returns the ids locked.
func (mysql) lockedWrite(ctx context.Context, db *sql.DB, s *statements, write stmt, n int, vals map[string]any, then func(tx *sql.Tx, ids []any) error) ([]any, error) {
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	lock := s.lockN(n)
	ids, err := queryIDs(ctx, tx, lock.text, lock.bind(vals))
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, write.text, write.bind(vals)...); err != nil {
		return nil, err
	}
	if then != nil {
		if err := then(tx, ids); err != nil {
			return nil, err
		}
	}
	return ids, tx.Commit()
}

func (d mysql) moveToTable(ctx context.Context, db *sql.DB, s *statements, vals map[string]any) (bool, error) {
	return moveInTx(ctx, d, db, s, vals)
}

func (mysql) skewArg(d time.Duration) any { return d.Microseconds() }

// retryable: a deadlock (1213) or a lock wait timeout (1205).
func (mysql) retryable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Error 1213") || strings.Contains(msg, "Error 1205")
}

// unready: the driver's "invalid connection" (the connection failed during a statement:
// killed, or cut by the network), and the server's 1927 (the connection was killed),
// 1053 (shutting down) and 1040 (too many connections).
func (mysql) unready(err error) bool {
	msg := err.Error()
	for _, s := range []string{"invalid connection", "Error 1927", "Error 1053", "Error 1040"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

func (mysql) serialize(*sql.DB) func() { return func() {} }

func (mysql) admin() adminSpec {
	return adminSpec{
		forUpdate: " FOR UPDATE",
		// DATETIME holds no zone: the epoch is read in the session's, as NOW(6) is.
		micros: func(x string) string { return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + x + ")" },
		now:    myNow, quote: '`', style: questionRepeated,
		text: func(x string) string { return "CAST(" + x + " AS CHAR)" },
	}
}
