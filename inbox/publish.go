package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/publish"
)

// publishChunk bounds the rows one INSERT of PublishMany writes; more go in several
// statements of one transaction.
const publishChunk = 500

// Publish encodes v with msgpack (settle's default codec) and inserts it as a row of
// group, as PublishBytes does, returning the row's id.
func (ib *Inbox) Publish(ctx context.Context, group string, v any, opts ...settle.PublishOption) (int64, error) {
	return ib.PublishTx(ctx, nil, group, v, opts...)
}

// PublishBytes inserts payload as a new row of group, as the service itself would:
// attempt 1, due now (the database's now, under a test clock too), not leased, and
// returns the row's id (RETURNING on PostgreSQL and SQLite, LastInsertId on MySQL: the
// id column must be an integer the database generates). group must be empty for a
// table without a group column. It takes settle.Header and settle.Headers (written to
// the Table.Headers column), and settle.After or settle.At (retry_after = the
// database's now + d, or the time given: the row is first delivered then). It wakes
// the idle queues of group: this Inbox's at once, and on PostgreSQL every process's,
// with a pg_notify sent just after the insert from a goroutine of the Inbox that ends
// within about 25 ms of the last Publish (see "Waking up" in the package doc).
func (ib *Inbox) PublishBytes(ctx context.Context, group string, payload []byte, opts ...settle.PublishOption) (int64, error) {
	return ib.PublishBytesTx(ctx, nil, group, payload, opts...)
}

// PublishTx is Publish inside the caller's transaction tx (a *sql.Tx, or a *sql.Conn
// in a transaction of its own, e.g. SQLite's BEGIN IMMEDIATE): the row exists if and
// when tx commits, with the business rows it writes beside it (a transactional
// outbox). A nil tx publishes on the Inbox's *sql.DB. tx must be of the Inbox's
// database. On PostgreSQL the pg_notify that wakes the queues is sent in tx too
// (delivered at its commit, dropped by its rollback); elsewhere the queues find the
// row at their next Poll.
func (ib *Inbox) PublishTx(ctx context.Context, tx Tx, group string, v any, opts ...settle.PublishOption) (int64, error) {
	b, err := settle.Msgpack.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("inbox: publish: encode: %w", err)
	}
	return ib.PublishBytesTx(ctx, tx, group, b, opts...)
}

// PublishBytesTx is PublishBytes inside the caller's transaction tx; see PublishTx.
func (ib *Inbox) PublishBytesTx(ctx context.Context, tx Tx, group string, payload []byte, opts ...settle.PublishOption) (int64, error) {
	ids, err := ib.publish(ctx, tx, group, [][]byte{payload}, opts)
	if err != nil {
		return 0, err
	}
	return ids[0], nil
}

// PublishMany encodes each of vs with msgpack and inserts them all as rows of group in
// one multi-row INSERT (up to 500 rows a statement, more in one transaction: all or
// none), and returns their ids in the order of vs. The options apply to every row.
func (ib *Inbox) PublishMany(ctx context.Context, group string, vs []any, opts ...settle.PublishOption) ([]int64, error) {
	return ib.PublishManyTx(ctx, nil, group, vs, opts...)
}

// PublishManyTx is PublishMany inside the caller's transaction tx; see PublishTx.
func (ib *Inbox) PublishManyTx(ctx context.Context, tx Tx, group string, vs []any, opts ...settle.PublishOption) ([]int64, error) {
	payloads := make([][]byte, len(vs))
	for i, v := range vs {
		b, err := settle.Msgpack.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("inbox: publish: encode value %d: %w", i, err)
		}
		payloads[i] = b
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	return ib.publish(ctx, tx, group, payloads, opts)
}

// publish inserts payloads as rows of group, in tx or (nil) on the Inbox's *sql.DB,
// and returns their ids in order.
func (ib *Inbox) publish(ctx context.Context, tx Tx, group string, payloads [][]byte, opts []settle.PublishOption) ([]int64, error) {
	d, err := ib.checked(group)
	if err != nil {
		return nil, err
	}
	c, err := ib.publishConfig(opts)
	if err != nil {
		return nil, err
	}
	done := ib.publishing(ctx, &c, payloads)
	if err := ib.checkHeaderNames(c.Headers); err != nil {
		return published(done, nil, err)
	}
	vals := map[string]any{"group": group, "headers": encodeHeaders(c.Headers), "skew": d.skewArg(0)}
	due := dueNow
	switch {
	case c.AfterSet:
		due, vals["delay"] = dueAfter, d.durArg(c.After)
	case !c.At.IsZero() && c.At.Before(time.Unix(0, 0)):
		// Long passed: due now (MySQL's DATETIME starts at year 1000, and time.Time's
		// microseconds underflow before year -290,000).
	case !c.At.IsZero():
		due, vals["at"] = dueAt, c.At.UnixMicro()
	}
	s := ib.statements(d)
	var ids []int64
	switch {
	case tx != nil:
		if ids, err = insertRows(ctx, d, s, tx, due, vals, payloads); err == nil && s.notify.text != "" {
			_, err = tx.ExecContext(ctx, s.notify.text, s.notify.bind(map[string]any{"channel": ib.table.Name, "group": group})...)
		}
	case len(payloads) <= publishChunk:
		ids, err = retry(ctx, d, ib.db, func() ([]int64, error) { return insertRows(ctx, d, s, ib.db, due, vals, payloads) })
	default:
		ids, err = retry(ctx, d, ib.db, func() ([]int64, error) {
			own, err := d.begin(ctx, ib.db)
			if err != nil {
				return nil, err
			}
			defer func() { _ = own.Rollback() }()
			ids, err := insertRows(ctx, d, s, own, due, vals, payloads)
			if err != nil {
				return nil, err
			}
			return ids, own.Commit()
		})
	}
	if err != nil {
		return published(done, nil, fmt.Errorf("inbox: publish to %s: %w", ib.table.Name, err))
	}
	if tx == nil {
		ib.announce(ctx, s, group)
	}
	return published(done, ids, nil)
}

// insertRows writes payloads with publishN, at most publishChunk rows a statement, and
// returns their ids in order.
func insertRows(ctx context.Context, d dialect, s *statements, q Tx, due dueKind, vals map[string]any, payloads [][]byte) ([]int64, error) {
	ids := make([]int64, 0, len(payloads))
	for chunk := range slices.Chunk(payloads, publishChunk) {
		for i, p := range chunk {
			vals[fmt.Sprintf("payload%d", i)] = p
		}
		got, err := d.insertIDs(ctx, q, s.publishN(len(chunk), due), len(chunk), vals)
		if err != nil {
			return nil, err
		}
		ids = append(ids, got...)
	}
	return ids, nil
}

// returnedIDs runs an INSERT … RETURNING id of n rows and returns the ids ascending:
// the order a generated integer key gives the rows of one INSERT, which RETURNING
// need not keep.
func returnedIDs(ctx context.Context, q Tx, st stmt, n int, vals map[string]any) ([]int64, error) {
	raw, err := queryIDs(ctx, q, st.text, st.bind(vals))
	if err != nil {
		return nil, err
	}
	if len(raw) != n {
		return nil, fmt.Errorf("%d ids returned for %d rows", len(raw), n)
	}
	ids := make([]int64, n)
	for i, v := range raw {
		if ids[i], err = intID(v); err != nil {
			return nil, err
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// intID reads a generated id as an integer.
func intID(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case int32:
		return int64(v), nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("the row was written, but its id %v (%T) is not an integer: Publish returns a generated integer id", v, v)
}

// latestAt is the latest time settle.At may name: DATETIME's and SQLite's date
// functions' last instant (a later one was written as NULL, or as 1970 once its
// microseconds overflowed: delivered at once).
var latestAt = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)

// publishConfig applies the options of a publish call and returns their refusal: an
// option an inbox does not take, headers for a table without a headers column, a delay
// for a table without a retry_after column, an At past latestAt (checkHeaderNames
// refuses the names).
func (ib *Inbox) publishConfig(opts []settle.PublishOption) (publish.Config, error) {
	c := publish.Apply(opts)
	err := c.Refuse("an inbox", "Header", "After", "At")
	if err == nil {
		err = c.CheckDelay()
	}
	switch {
	case err != nil:
	case len(c.Headers) > 0 && ib.table.Headers == "":
		err = errors.New("headers given, but the table spec names no Headers column to hold them")
	case c.Delayed() && ib.table.RetryAfter == "":
		err = errors.New("a delay given, but the table spec names no RetryAfter column to hold it")
	case c.At.After(latestAt):
		err = fmt.Errorf("At(%s): past %s, the latest time a retry_after column holds on MySQL and SQLite (and past which time.Time's microseconds overflow)",
			c.At.UTC().Format(time.RFC3339Nano), latestAt.Format(time.RFC3339Nano))
	}
	if err != nil {
		return c, fmt.Errorf("inbox: publish to %s: %w", ib.table.Name, err)
	}
	return c, nil
}

// checkHeaderNames refuses a publish's headers (the caller's and its hook's) with a
// name the Redis publishers refuse too: the empty name and settle's reserved prefix.
func (ib *Inbox) checkHeaderNames(headers map[string]string) error {
	for k := range headers {
		if k == "" || strings.HasPrefix(k, settle.HeaderPrefix) {
			return fmt.Errorf("inbox: publish to %s: header %q: the empty name and the reserved prefix %q are refused", ib.table.Name, k, settle.HeaderPrefix)
		}
	}
	return nil
}
