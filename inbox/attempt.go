package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"

	"github.com/settlekit/settle/internal/source"
)

// The attempt column's range. A row that fails forever (no cap) or crashes its worker
// forever would otherwise reach its column's maximum (32,767 for the SMALLINT the README's
// schema uses): its put-back would then fail ("smallint out of range"), and once its
// lease passed every claim of its queue would fail with it, since a claim adds an attempt
// to the rows whose lease passed. So Open reads the column's largest value (attemptMax)
// and every statement that adds an attempt holds it there (quotedTable.bump): no claim
// and no settlement can overflow. A row at the maximum is dead-lettered where the mount
// declares a cap (the cap may not exceed the maximum: Open refuses it), else delivered
// and held at the maximum, with one error logged per mount (transport.atMax).

// Values below 1. An attempt column may hold NULL, 0 or a negative number (a row another
// program inserted; a column without NOT NULL; MySQL in non-strict mode stores 0 for the
// NULL some statements write into a NOT NULL column), which would otherwise escape the
// cap: NULL + 1 stays NULL (a row was run 344 times in 12 s under a cap of 3), and a row
// at -7 was delivered 9 times at attempt 1 before it counted up (11 runs under a cap of
// 3). So every reader reads such a value as 1 (attemptOf: the delivery, the operator's
// views) and every statement adding an attempt writes 2 after it (bump): the row is
// counted from 1 like any other and reaches the dead letter after exactly the cap's
// deliveries. Open accepts a nullable column: refusing it would leave 0 and -7 to the
// same rule all the same, and stop every table whose column lacks NOT NULL for a value
// the rule serves.

// bump is the value expression of the attempt after x: x + 1, held at the attempt
// column's maximum (when known), and 2 for an x below 1 or NULL, which reads as 1.
func (c quotedTable) bump(x string) string {
	if c.attemptMax <= 0 {
		return fmt.Sprintf("CASE WHEN %[1]s >= 1 THEN %[1]s + 1 ELSE 2 END", x)
	}
	return fmt.Sprintf("CASE WHEN %[1]s >= %[2]d THEN %[2]d WHEN %[1]s >= 1 THEN %[1]s + 1 ELSE 2 END", x, c.attemptMax)
}

// attemptOf reads an attempt column leniently: a positive integer (as the driver returns
// it: an integer, or text on a dynamically typed SQLite column) is the attempt; NULL, a
// number below 1 or anything else reads as 1 (and bump writes 2 after it), so one
// garbled row is delivered (and settled) instead of failing the whole claim and
// stalling its batch behind an expired lease forever.
func attemptOf(v any) int64 {
	var n int64
	switch v := v.(type) {
	case int64:
		n = v
	case int32:
		n = int64(v)
	case float64:
		n = int64(v)
	case []byte:
		n, _ = strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
	case string:
		n, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	}
	if n < 1 {
		return 1
	}
	return n
}

// readAttemptMax reads the largest value the table's attempt column holds (0: no attempt
// column, or a type without a known bound) and refuses a cap beyond it: a row could never
// reach it.
func (t *transport) readAttemptMax(ctx context.Context) (int64, error) {
	tb := t.q.ib.table
	if tb.Attempt == "" {
		return 0, nil
	}
	maxValue, err := t.d.attemptMax(ctx, t.q.ib.db, tb)
	if err != nil {
		return 0, fmt.Errorf("inbox: table %s: read the type of its attempt column %s: %w", tb.Name, tb.Attempt, err)
	}
	if capped := int64(t.env.Policy.MaxAttempts); maxValue > 0 && capped > maxValue {
		return 0, fmt.Errorf("inbox: MaxAttempts(%d) on table %s, whose attempt column %s holds at most %d: a row would never reach the cap; lower it or widen the column",
			capped, tb.Name, tb.Attempt, maxValue)
	}
	return maxValue, nil
}

// atMax logs, once per mount, a row claimed at the attempt column's maximum on a mount
// without a cap: it is delivered, and every retry holds it there (a cap would
// dead-letter it).
func (t *transport) atMax(ctx context.Context, r claimedRow) {
	if t.attemptMax <= 0 || r.attempt < t.attemptMax || t.env.Policy.MaxAttempts > 0 {
		return
	}
	t.maxOnce.Do(func() {
		t.env.Logger.ErrorContext(ctx, "settle: inbox: a row reached the largest attempt its column holds; it is still delivered and its retries hold it there: settle it, widen the column, or declare MaxAttempts and DeadLetter (logged once per mount)",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, t.q.ib.table.Name), slog.String(source.AttrMsgID, idString(r.id)), slog.Int64(source.AttrAttempt, r.attempt))
	})
}

// integerMax is the largest value of an integer column type named typ (lower case, as
// information_schema or a declaration names it), unsigned or not; 0 for a type that is
// not a bounded integer.
func integerMax(typ string, unsigned bool) int64 {
	bits := map[string]uint{"tinyint": 8, "int1": 8, "smallint": 16, "int2": 16, "mediumint": 24, "int3": 24,
		"int": 32, "integer": 32, "int4": 32, "bigint": 64, "int8": 64}[typ]
	switch {
	case bits == 0:
		return 0
	case bits == 64:
		return math.MaxInt64 // unsigned too: the attempt is read as an int64
	case unsigned:
		return 1<<bits - 1
	default:
		return 1<<(bits-1) - 1
	}
}

// decimalMax is the largest integer a decimal of precision digits, scale of them after
// the point, holds (0: unbounded, or too wide to matter).
func decimalMax(precision, scale int64) int64 {
	digits := precision - scale
	if precision <= 0 || digits >= 19 {
		return 0
	}
	n := int64(1)
	for range digits {
		n *= 10
	}
	return n - 1
}

// attemptMax reads the attempt column's type from pg_attribute (the table as its name
// resolves on the search path).
func (postgres) attemptMax(ctx context.Context, db *sql.DB, t Table) (int64, error) {
	var typ string
	var mod int64
	err := db.QueryRowContext(ctx, `SELECT a.atttypid::regtype::text, a.atttypmod FROM pg_attribute a WHERE a.attrelid = $1::regclass AND a.attname = $2 AND NOT a.attisdropped`,
		quoteWith(t.Name, '"'), t.Attempt).Scan(&typ, &mod)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // checkColumns names a missing column
	}
	if err != nil {
		return 0, err
	}
	if typ == "numeric" && mod >= 4 {
		return decimalMax((mod-4)>>16&0xffff, (mod-4)&0xffff), nil
	}
	return integerMax(typ, false), nil
}

// attemptMax reads the attempt column's type from information_schema.COLUMNS.
func (mysql) attemptMax(ctx context.Context, db *sql.DB, t Table) (int64, error) {
	schema, name, qualified := strings.Cut(t.Name, ".")
	if !qualified {
		schema, name = "", t.Name
	}
	var typ, full string
	var precision, scale sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT DATA_TYPE, COLUMN_TYPE, NUMERIC_PRECISION, NUMERIC_SCALE FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND TABLE_NAME = ? AND COLUMN_NAME = ?`, schema, name, t.Attempt).Scan(&typ, &full, &precision, &scale)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	typ = strings.ToLower(typ)
	if typ == "decimal" {
		return decimalMax(precision.Int64, scale.Int64), nil
	}
	return integerMax(typ, strings.Contains(strings.ToLower(full), "unsigned")), nil
}

// attemptMax is SQLite's: an INTEGER value is 64-bit whatever the column's declared type
// (SMALLINT included), so a column of INTEGER affinity holds up to math.MaxInt64; one of
// another affinity has no bound the inbox can rely on (0).
func (sqlite) attemptMax(ctx context.Context, db *sql.DB, t Table) (int64, error) {
	schema, name, qualified := strings.Cut(t.Name, ".")
	if !qualified {
		schema, name = "main", t.Name
	}
	var declared string
	err := db.QueryRowContext(ctx, `SELECT type FROM pragma_table_info(?1, ?2) WHERE lower(name) = lower(?3)`, name, schema, t.Attempt).Scan(&declared)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if sqliteAffinity(declared) == "INTEGER" {
		return math.MaxInt64, nil
	}
	return 0, nil
}
