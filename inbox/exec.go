package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// querier is what a claim reads through: the *sql.DB or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryEach runs a statement and, for each row it selects, reads the row's columns into
// dest and calls each.
func queryEach(ctx context.Context, q querier, text string, args []any, dest []any, each func()) error {
	rows, err := q.QueryContext(ctx, text, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		each()
	}
	return rows.Err()
}

// queryClaimed runs a claim statement and scans its rows (id, attempt, payload, lease,
// headers: NULL for a table without a headers column).
func queryClaimed(ctx context.Context, q querier, text string, args []any) ([]claimedRow, error) {
	var out []claimedRow
	var id, attempt, token, headers any
	var payload []byte
	err := queryEach(ctx, q, text, args, []any{&id, &attempt, &payload, &token, &headers}, func() {
		out = append(out, claimedRow{attempt: attemptOf(attempt), headers: ownValue(headers), id: ownValue(id), payload: payload, token: ownValue(token)})
	})
	return out, err
}

// queryIDs runs a statement selecting ids.
func queryIDs(ctx context.Context, q querier, text string, args []any) ([]any, error) {
	var ids []any
	var id any
	err := queryEach(ctx, q, text, args, []any{&id}, func() { ids = append(ids, ownValue(id)) })
	return ids, err
}

// queryLeases runs a statement selecting ids and leases, and returns each lease by its
// row's id (idString).
func queryLeases(ctx context.Context, q querier, text string, args []any) (map[string]any, error) {
	leases := map[string]any{}
	var id, lease any
	err := queryEach(ctx, q, text, args, []any{&id, &lease}, func() { leases[idString(id)] = ownValue(lease) })
	return leases, err
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

// moveInTx moves a leased row into the dead-letter table (vals: see
// dialect.moveToTable) with two statements in one transaction (SQLite, MySQL/MariaDB);
// a lease taken over changes nothing.
func moveInTx(ctx context.Context, d dialect, db *sql.DB, s *statements, vals map[string]any) (bool, error) {
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

// checkColumns returns one error naming every column of want that table lacks (s: any
// statements of the dialect).
func checkColumns(ctx context.Context, db *sql.DB, s *statements, table string, want []string) error {
	rows, err := db.QueryContext(ctx, s.columns(table))
	if err != nil {
		return fmt.Errorf("inbox: table %s: read its columns: %w", table, err)
	}
	have, err := rows.Columns()
	_ = rows.Close()
	if err != nil {
		return fmt.Errorf("inbox: table %s: read its columns: %w", table, err)
	}
	var missing []string
	for _, w := range want {
		found := false
		for _, h := range have {
			if strings.EqualFold(h, w) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, w)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("inbox: table %s lacks the columns %s named by the table spec", table, strings.Join(missing, ", "))
	}
	return nil
}
