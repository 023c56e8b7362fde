package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// SQLite is the SQLite dialect (any database/sql driver; settle's tests and examples
// use modernc.org/sqlite). SQLite has one writer at a time: a claim is one
// UPDATE … RETURNING statement (atomic on its own), a dead-letter move one
// BEGIN IMMEDIATE transaction, and the inbox orders its own writes on one *sql.DB
// behind a lock and retries a statement that meets SQLITE_BUSY from another process,
// so the error never reaches the user. Open the database with a busy timeout all the
// same, e.g. "file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)" with
// modernc.org/sqlite. Time columns hold text as strftime('%Y-%m-%dT%H:%M:%f+00:00')
// writes it; "now" is the host's clock, read by SQLite.
var SQLite Dialect = sqlite{}

type sqlite struct{}

func (sqlite) String() string { return "sqlite" }
func (sqlite) sealed()        {}

const (
	sqliteFormat = `'%Y-%m-%dT%H:%M:%f+00:00'`
	// sqliteNow is the statements' "now": SQLite's clock plus the skew a test clock
	// adds (a strftime modifier; "+0.000 seconds" in production).
	sqliteNow = `strftime(` + sqliteFormat + `, 'now', :skew)`
)

func (sqlite) build(t Table, q queueSpec) *statements {
	c := t.quoted('"')
	c.attemptMax = q.attemptMax
	s := &statements{}
	groupIs := func(alias string) string {
		if c.group == "" {
			return "1"
		}
		return alias + c.group + " = :group"
	}
	attempt := "1"
	if c.attempt != "" {
		attempt = c.attempt
	}
	due, passed := c.claimLease(sqliteNow, q.fifo), c.takeoverLease(sqliteNow)
	if c.retryAfter != "" {
		ready := fmt.Sprintf(" AND (%s IS NULL OR %s <= %s)", c.retryAfter, c.retryAfter, sqliteNow)
		due, passed = due+ready, passed+ready
	}
	order, limit := c.claimOrder(q), ":n"
	if q.fifo {
		limit = "1"
		// One statement is atomic on SQLite: no lock beyond its own is needed.
		due += fmt.Sprintf(" AND NOT EXISTS (SELECT 1 FROM %s o WHERE %s AND o.%s > %s)", c.table, groupIs("o."), c.lease, sqliteNow)
	}
	leaseUntil := fmt.Sprintf("strftime(%s, %s, :lease)", sqliteFormat, sqliteNow)
	claim := func(due string) stmt {
		return compile(fmt.Sprintf(
			`UPDATE %[1]s SET %[11]s%[2]s = %[3]s WHERE %[4]s IN (SELECT %[4]s FROM %[1]s WHERE %[5]s AND %[6]s ORDER BY %[7]s LIMIT %[8]s) RETURNING %[4]s, %[9]s, %[10]s, CAST(%[2]s AS TEXT), %[12]s`,
			c.table, c.lease, leaseUntil, c.id, groupIs(""), due, order, limit, attempt, c.payload, c.claimCount(), c.headersOut(untyped)), questionNumbered)
	}
	s.claim = claim(due)
	if !q.fifo {
		s.takeover = claim(passed)
	}
	s.columns = func(table string) string {
		return fmt.Sprintf(`SELECT * FROM %s WHERE 0`, quoteWith(table, '"'))
	}
	fence := fmt.Sprintf("%s = :id AND %s = :token", c.id, c.lease)
	if c.group != "" {
		reset := ""
		if c.attempt != "" {
			reset = fmt.Sprintf(", %s = 1", c.attempt)
		}
		s.resend = compile(fmt.Sprintf(`UPDATE %s SET %s = :to, %s = NULL%s WHERE %s = :from`, c.table, c.group, c.lease, reset, c.group), questionNumbered)
	}
	if q.deadTable != "" {
		cols, vals := c.rowColumns(":attempt", ":error", sqliteNow)
		s.deadInsert = compile(fmt.Sprintf(`INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s`,
			quoteWith(q.deadTable, '"'), strings.Join(cols, ", "), strings.Join(vals, ", "), c.table, fence), questionNumbered)
		s.deadDelete = compile(fmt.Sprintf(`DELETE FROM %s WHERE %s`, c.table, fence), questionNumbered)
	}
	if c.retryAfter != "" {
		s.nextDue = compile(fmt.Sprintf(`SELECT CAST((julianday(MIN(%[1]s)) - julianday(%[2]s)) * 86400000000 AS INTEGER) FROM %[3]s WHERE %[4]s AND %[1]s > %[2]s`, c.retryAfter, sqliteNow, c.table, groupIs("")), questionNumbered)
	}
	// BEGIN IMMEDIATE already holds the only write lock.
	s.lockLeased = compile(fmt.Sprintf(`SELECT %s FROM %s WHERE %s`, c.id, c.table, fence), questionNumbered)
	c.batched(s, batchSpec{lease: "CAST(" + c.lease + " AS TEXT)", leaseUntil: leaseUntil, returning: true, retryAt: func(delay string) string { return fmt.Sprintf("strftime(%s, %s, %s)", sqliteFormat, sqliteNow, delay) }, atMicros: sqliteAt, style: questionNumbered, typed: untyped, typedText: untyped, now: sqliteNow})
	return s
}

// sqliteTx is a connection inside BEGIN IMMEDIATE: database/sql cannot begin one.
type sqliteTx struct {
	*sql.Conn
	ctx  context.Context // the begin's context, without its cancel: an ending is not skipped
	done bool
}

func (tx *sqliteTx) Commit() error {
	if tx.done {
		return sql.ErrTxDone
	}
	tx.done = true
	defer tx.Conn.Close()
	_, err := tx.ExecContext(tx.ctx, `COMMIT`)
	if err != nil {
		_, _ = tx.ExecContext(tx.ctx, `ROLLBACK`)
	}
	return err
}

func (tx *sqliteTx) Rollback() error {
	if tx.done {
		return sql.ErrTxDone
	}
	tx.done = true
	defer tx.Conn.Close()
	_, err := tx.ExecContext(tx.ctx, `ROLLBACK`)
	return err
}

func (sqlite) begin(ctx context.Context, db *sql.DB) (txn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		_ = conn.Close()
		return nil, err
	}
	return &sqliteTx{Conn: conn, ctx: context.WithoutCancel(ctx)}, nil
}

func (sqlite) claim(ctx context.Context, db *sql.DB, s *statements, skew any, lease time.Duration, n int, takeover bool) ([]claimedRow, error) {
	vals := map[string]any{"skew": skew, "lease": sqliteModifier(lease), "n": int64(n), "group": s.group}
	st := s.claim
	if takeover {
		st = s.takeover
	}
	return queryClaimed(ctx, db, st.text, st.bind(vals))
}

func (sqlite) checkServer(context.Context, *sql.DB) error { return nil }

// sqliteTimeGlob matches the text of a time as sqliteFormat writes it.
const sqliteTimeGlob = `'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9].[0-9][0-9][0-9]+00:00'`

// sqliteTimeForm says what a SQLite time column must hold, for the errors that refuse one.
const sqliteTimeForm = `a SQLite time column of the inbox holds text in the form strftime('%Y-%m-%dT%H:%M:%f+00:00') writes (UTC, e.g. '2026-12-01T09:44:00.000+00:00'), the only one that compares in time order with the inbox's own times`

// checkTimes refuses a retry_after, locked_until or dead_at column whose values would not compare
// in time order with the statements' text times (a row parked for an hour would be due at
// once): one declared with a numeric type (INTEGER or REAL affinity), one whose DEFAULT
// writes anything but the text form (CURRENT_TIMESTAMP writes '2026-12-01 09:44:00'),
// and one holding a value not in it (the first found, with its row's id).
func (sqlite) checkTimes(ctx context.Context, db *sql.DB, t Table) []error {
	schema, name, qualified := strings.Cut(t.Name, ".")
	if !qualified {
		schema, name = "main", t.Name
	}
	rows, err := db.QueryContext(ctx, `SELECT name, type, dflt_value FROM pragma_table_info(?1, ?2)`, name, schema)
	if err != nil {
		return []error{fmt.Errorf("inbox: table %s: read its column types: %w", t.Name, err)}
	}
	type column struct {
		declared string
		dflt     sql.NullString
	}
	declared := map[string]column{}
	for rows.Next() {
		var col string
		var c column
		if err := rows.Scan(&col, &c.declared, &c.dflt); err != nil {
			_ = rows.Close()
			return []error{fmt.Errorf("inbox: table %s: read its column types: %w", t.Name, err)}
		}
		declared[strings.ToLower(col)] = c
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return []error{fmt.Errorf("inbox: table %s: read its column types: %w", t.Name, err)}
	}
	var errs []error
	for _, col := range []struct{ name, dflt string }{
		{t.RetryAfter, "DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))"},
		{t.LockedUntil, "no DEFAULT (NULL: not leased)"},
		{t.DeadAt, "no DEFAULT (NULL: not dead)"},
	} {
		c, ok := declared[strings.ToLower(col.name)]
		if col.name == "" || !ok {
			continue // no such column (checkColumns names a missing one)
		}
		if a := sqliteAffinity(c.declared); a == "INTEGER" || a == "REAL" {
			errs = append(errs, fmt.Errorf("inbox: table %s: column %s is declared %s, so SQLite compares its values as numbers, not as the inbox's times; %s: declare it TEXT",
				t.Name, col.name, c.declared, sqliteTimeForm))
			continue
		}
		if c.dflt.Valid {
			var inForm bool
			var wrote any
			q := fmt.Sprintf(`SELECT x IS NULL OR (typeof(x) = 'text' AND x GLOB %s), x FROM (SELECT (%s) AS x)`, sqliteTimeGlob, c.dflt.String)
			if err := db.QueryRowContext(ctx, q).Scan(&inForm, &wrote); err != nil {
				errs = append(errs, fmt.Errorf("inbox: table %s: column %s: evaluate its DEFAULT %s: %w", t.Name, col.name, c.dflt.String, err))
			} else if !inForm {
				errs = append(errs, fmt.Errorf("inbox: table %s: column %s: its DEFAULT %s writes %s; %s: give it %s",
					t.Name, col.name, c.dflt.String, sqliteShow(wrote), sqliteTimeForm, col.dflt))
			}
		}
		var id, bad any
		q := fmt.Sprintf(`SELECT %[1]s, %[2]s FROM %[3]s WHERE %[2]s IS NOT NULL AND NOT (typeof(%[2]s) = 'text' AND %[2]s GLOB %[4]s) LIMIT 1`,
			`"`+t.ID+`"`, `"`+col.name+`"`, quoteWith(t.Name, '"'), sqliteTimeGlob)
		switch err := db.QueryRowContext(ctx, q).Scan(&id, &bad); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			errs = append(errs, fmt.Errorf("inbox: table %s: column %s: read its values: %w", t.Name, col.name, err))
		default:
			errs = append(errs, fmt.Errorf("inbox: table %s: column %s holds %s (row %s, and maybe others); %s: rewrite such values, e.g. with strftime('%%Y-%%m-%%dT%%H:%%M:%%f+00:00', %s) for text SQLite reads as UTC",
				t.Name, col.name, sqliteShow(bad), idString(ownValue(id)), sqliteTimeForm, col.name))
		}
	}
	return errs
}

// sqliteAffinity is the type affinity SQLite gives a column declared decl (the rules of
// its "Determination Of Column Affinity").
func sqliteAffinity(decl string) string {
	d := strings.ToUpper(decl)
	switch {
	case strings.Contains(d, "INT"):
		return "INTEGER"
	case strings.Contains(d, "CHAR"), strings.Contains(d, "CLOB"), strings.Contains(d, "TEXT"):
		return "TEXT"
	case d == "", strings.Contains(d, "BLOB"):
		return "BLOB"
	case strings.Contains(d, "REAL"), strings.Contains(d, "FLOA"), strings.Contains(d, "DOUB"):
		return "REAL"
	default:
		return "NUMERIC"
	}
}

// sqliteShow shows a column value in an error: text quoted, anything else with its type.
func sqliteShow(v any) string {
	switch v := v.(type) {
	case string:
		return "'" + v + "'"
	case []byte:
		return fmt.Sprintf("the blob %q", v)
	case nil:
		return "NULL"
	default:
		return fmt.Sprintf("the number %v", v)
	}
}

func (sqlite) indexes(ctx context.Context, db *sql.DB, table string) ([][]string, error) {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "main", table
	}
	return splitIndexes(db.QueryContext(ctx, `SELECT l.name, COALESCE((SELECT group_concat(name, ',') FROM (SELECT name FROM pragma_index_info(l.name, ?2) ORDER BY seqno)), '')
FROM pragma_index_list(?1, ?2) AS l`, name, schema))
}

// sqliteModifier is a strftime modifier adding d.
func sqliteModifier(d time.Duration) string { return fmt.Sprintf("%+.3f seconds", d.Seconds()) }

func (sqlite) insertIDs(ctx context.Context, q Tx, st stmt, n int, vals map[string]any) ([]int64, error) {
	return returnedIDs(ctx, q, st, n, vals)
}

func (sqlite) durArg(d time.Duration) any { return sqliteModifier(d) }

func (sqlite) extendMany(ctx context.Context, db *sql.DB, s *statements, n int, vals map[string]any) (map[string]any, error) {
	write := s.extendN(n)
	return queryLeases(ctx, db, write.text, write.bind(vals))
}

func (sqlite) fencedMany(ctx context.Context, db *sql.DB, _ *statements, write stmt, _ int, vals map[string]any) ([]any, error) {
	return queryIDs(ctx, db, write.text, write.bind(vals))
}

func (d sqlite) moveToTable(ctx context.Context, db *sql.DB, s *statements, vals map[string]any) (bool, error) {
	return moveInTx(ctx, d, db, s, vals)
}

func (sqlite) skewArg(d time.Duration) any { return sqliteModifier(d) }

// retryable: SQLITE_BUSY (5) or SQLITE_LOCKED (6), extended codes included.
func (sqlite) retryable(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		c := coded.Code() & 0xff
		return c == 5 || c == 6
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// unready: SQLite has no connection to lose (a database locked by another process is
// retryable).
func (sqlite) unready(error) bool { return false }

// sqliteLocks orders the inbox's writes per *sql.DB within the process.
var sqliteLocks sync.Map // *sql.DB -> *sync.Mutex

func (sqlite) serialize(db *sql.DB) func() {
	m, _ := sqliteLocks.LoadOrStore(db, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (sqlite) admin() adminSpec {
	return adminSpec{
		// The text of sqliteFormat: whole seconds, then the milliseconds at 21.
		micros: func(x string) string {
			return fmt.Sprintf("(CAST(strftime('%%s', %[1]s) AS INTEGER) * 1000000 + CAST(substr(%[1]s, 21, 3) AS INTEGER) * 1000)", x)
		},
		now: sqliteNow, quote: '"', style: questionNumbered,
		text: func(x string) string { return "CAST(" + x + " AS TEXT)" },
	}
}
