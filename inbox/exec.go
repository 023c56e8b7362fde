package inbox

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"
)

// querier is what a claim reads through: the *sql.DB or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryClaimed runs a claim statement and scans its rows (id, attempt, payload, lease).
func queryClaimed(ctx context.Context, q querier, text string, args []any) ([]claimedRow, error) {
	rows, err := q.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []claimedRow
	for rows.Next() {
		var r claimedRow
		var attempt any
		if err := rows.Scan(&r.id, &attempt, &r.payload, &r.token); err != nil {
			return nil, err
		}
		r.id = ownValue(r.id)
		r.token = ownValue(r.token)
		r.attempt = attemptOf(attempt)
		out = append(out, r)
	}
	return out, rows.Err()
}

// queryIDs runs a statement selecting ids.
func queryIDs(ctx context.Context, q querier, text string, args []any) ([]any, error) {
	rows, err := q.QueryContext(ctx, text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id any
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, ownValue(id))
	}
	return ids, rows.Err()
}

// ownValue copies bytes a driver may reuse after the next scan.
func ownValue(v any) any {
	if b, ok := v.([]byte); ok {
		return append([]byte(nil), b...)
	}
	return v
}

// affectedOne reports whether a fenced write changed its row.
func affectedOne(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// moveInTx moves a leased row into the dead-letter table, its attempt set to attempt,
// with two statements in one transaction (SQLite, MySQL/MariaDB); a lease taken over
// changes nothing.
func moveInTx(ctx context.Context, d dialect, db *sql.DB, s *statements, id, token any, attempt int64) (bool, error) {
	vals := map[string]any{"id": id, "token": token, "attempt": attempt}
	tx, err := d.begin(ctx, db)
	if err != nil {
		return false, err
	}
	defer func() { _ = tx.Rollback() }()
	ok, err := affectedOne(tx.ExecContext(ctx, s.deadInsert.text, s.deadInsert.bind(vals)...))
	if err != nil || !ok {
		return false, err
	}
	ok, err = affectedOne(tx.ExecContext(ctx, s.deadDelete.text, s.deadDelete.bind(vals)...))
	if err != nil || !ok {
		return false, err
	}
	return true, tx.Commit()
}

// retry runs fn again while it fails with a transient lock conflict, until ctx ends,
// with the dialect's in-process write order held around each try.
func retry[T any](ctx context.Context, d dialect, db *sql.DB, fn func() (T, error)) (T, error) {
	wait := time.Millisecond
	for {
		unlock := d.serialize(db)
		v, err := fn()
		unlock()
		if err == nil || !d.retryable(err) {
			return v, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
		if wait < 100*time.Millisecond {
			wait *= 2
		}
	}
}

// attemptOf reads an attempt column leniently: a positive integer (as the driver returns
// it: an integer, or text on a dynamically typed SQLite column) is the attempt; NULL or
// anything else reads as 1, so one garbled row is delivered (and settled) instead of
// failing the whole claim and stalling its batch behind an expired lease forever.
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
