package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/settlekit/settle/internal/source"
)

// settle.Dedupe's completion marks live in the inbox's mark table (WithMarkTable): one
// row per dedup key of a queue (its key a hash of the table, the group and the dedup
// key), holding when the mark ends in µs of the database's clock. A mark is written in
// the transaction that deletes its row (an ack) or writes its replies and deletes it.

var _ source.Deduper = (*transport)(nil)

// Completed reports which of keys have a mark that has not ended (source.Deduper), in
// one SELECT that writes nothing.
func (t *transport) Completed(ctx context.Context, keys []string) ([]bool, error) {
	f := flowSQLOf(t.d)
	nowExpr, vals := t.flowClock(f)
	index := make(map[string][]int, len(keys))
	for i, k := range keys {
		m := t.flowKey("mark", k)
		vals[fmt.Sprintf("m%d", i)] = m
		index[m] = append(index[m], i)
	}
	seen := make([]bool, len(keys))
	if len(keys) == 0 {
		return seen, nil
	}
	st := compile(fmt.Sprintf("SELECT mark FROM %s WHERE mark IN (%s) AND until_us > %s", t.markTable(), list("m", len(keys)), nowExpr), f.style)
	var mark string
	err := queryEach(ctx, t.q.ib.db, st.text, st.bind(vals), []any{&mark}, func() {
		for _, i := range index[mark] {
			seen[i] = true
		}
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: Dedupe marks in table %s: %w", t.markTable(), err)
	}
	return seen, nil
}

// dedupKeys returns the dedup keys of ds to mark on their completion, one per delivery
// ("" for none), or nil when the mount has no Dedupe or none of ds carries a key.
func (t *transport) dedupKeys(ds []*source.Delivery) []string {
	if t.env.Policy.DedupWindow <= 0 {
		return nil
	}
	var keys []string
	for i, d := range ds {
		if d.DedupKey != "" && keys == nil {
			keys = make([]string, len(ds))
		}
		if keys != nil {
			keys[i] = d.DedupKey
		}
	}
	return keys
}

// writeMarks marks keys ("" skipped) completed until now + the mount's window, in tx:
// a mark written again ends later.
func (t *transport) writeMarks(ctx context.Context, tx txn, keys []string) error {
	f := flowSQLOf(t.d)
	nowExpr, vals := t.flowClock(f)
	vals["window"] = t.env.Policy.DedupWindow.Microseconds()
	var rows []string
	done := map[string]bool{}
	for _, k := range keys {
		if k == "" {
			continue
		}
		m := t.flowKey("mark", k)
		if done[m] {
			continue // one row once: an upsert may not touch a row twice
		}
		done[m] = true
		vals[fmt.Sprintf("m%d", len(rows))] = m
		rows = append(rows, fmt.Sprintf("(:m%d, %s + :window)", len(rows), nowExpr))
	}
	if len(rows) == 0 {
		return nil
	}
	st := compile(fmt.Sprintf("INSERT INTO %s (mark, until_us) VALUES %s%s", t.markTable(), strings.Join(rows, ", "), f.upsert), f.style)
	if _, err := tx.ExecContext(ctx, st.text, st.bind(vals)...); err != nil {
		return fmt.Errorf("write Dedupe marks in table %s: %w", t.markTable(), err)
	}
	return nil
}

// ackMarked deletes the rows hs (each fenced by its lease) and marks the dedup keys of
// those it deleted (keys, one per row), in one transaction: it first locks the rows
// whose lease still holds, so that only what is deleted is marked. It returns how many
// rows it deleted.
func (t *transport) ackMarked(ctx context.Context, hs []*held, keys []string) (int64, error) {
	tx, err := t.beginFlow(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	f := flowSQLOf(t.d)
	c := t.q.ib.table.quoted(f.quote)
	vals := map[string]any{}
	bindFences(vals, hs)
	lock := compile(fmt.Sprintf("SELECT %s FROM %s WHERE %s%s", c.id, c.table, c.fences(len(hs)), f.forUpdate), f.style)
	ids, err := queryIDs(ctx, tx, lock.text, lock.bind(vals))
	if err != nil {
		return 0, err
	}
	locked := make(map[string]bool, len(ids))
	for _, id := range ids {
		locked[idString(id)] = true
	}
	args := make([]any, 0, 2*len(hs))
	for _, h := range hs {
		args = append(args, h.id, h.token)
	}
	res, err := tx.ExecContext(ctx, t.s.ackN(len(hs)), args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	marked := make([]string, len(hs))
	for i, h := range hs {
		if locked[idString(h.id)] {
			marked[i] = keys[i]
		}
	}
	if err := t.writeMarks(ctx, tx, marked); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return n, nil
}

// ackRows deletes the rows hs, each fenced by its lease, marking keys (nil: none) in the
// same transaction, and returns how many it deleted.
func (t *transport) ackRows(ctx context.Context, hs []*held, keys []string) (int64, error) {
	db := t.q.ib.db
	if keys != nil {
		n, err := retry(ctx, t.d, db, func() (int64, error) { return t.ackMarked(ctx, hs, keys) })
		if err == nil && t.markOps.Add(1)%flowCleanupEvery == 1 {
			t.flowCleanup(ctx, t.markTable(), []string{"mark"}, 0)
		}
		return n, err
	}
	args := make([]any, 0, 2*len(hs))
	for _, h := range hs {
		args = append(args, h.id, h.token)
	}
	text := t.s.ackN(len(hs))
	res, err := retry(ctx, t.d, db, func() (sql.Result, error) { return db.ExecContext(ctx, text, args...) })
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
