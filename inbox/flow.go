package inbox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// The inbox keeps a mount's flow limits (settle.RateLimit, RateLimitBy, ConcurrencyBy,
// GlobalConcurrency) and settle.Dedupe's completion marks in two tables of its own
// database, created by the user's schema (the README's "Flow limits and Dedupe on the
// inbox"): every process reading the queue shares them, and "now" is the database's
// clock in µs since the epoch (a test clock's time under a test: see flowClock).

// DefaultLimitTable and DefaultMarkTable are the tables an Inbox keeps its queues' flow
// limits and Dedupe marks in unless WithLimitTable or WithMarkTable names others.
const (
	DefaultLimitTable = "settle_limits"
	DefaultMarkTable  = "settle_marks"
)

// WithLimitTable names the table the inbox's queues keep their flow limits' state in
// (settle.RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency), created with the
// README's schema; defaults to DefaultLimitTable. Many inboxes may share one.
func WithLimitTable(name string) InboxOption {
	return inboxOptionFunc(func(ib *Inbox) { ib.limitTable = name })
}

// WithMarkTable names the table the inbox's queues keep settle.Dedupe's completion marks
// in, created with the README's schema; defaults to DefaultMarkTable. Many inboxes may
// share one.
func WithMarkTable(name string) InboxOption {
	return inboxOptionFunc(func(ib *Inbox) { ib.markTable = name })
}

// flowSQL is what the flow statements differ in between dialects.
type flowSQL struct {
	style placeholderStyle
	quote byte
	// now is the database's clock in µs since the epoch (an integer).
	now string
	// forUpdate locks the rows a SELECT reads ("" on SQLite, whose BEGIN IMMEDIATE holds
	// the only write lock).
	forUpdate string
	// insertIgnore inserts rows and skips those whose key exists: its prefix and suffix.
	insertIgnore, ignoreSuffix string
	// upsert ends an INSERT of marks that overwrites the end of an existing mark.
	upsert string
	// integer is the type a CAST to a 64-bit integer names.
	integer string
}

// flowSQLOf returns d's flow statements' differences.
func flowSQLOf(d dialect) flowSQL {
	switch d.(type) {
	case postgres:
		return flowSQL{
			style: dollarNumbered, quote: '"', forUpdate: " FOR UPDATE",
			now:          "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000 AS BIGINT)",
			insertIgnore: "INSERT INTO", ignoreSuffix: " ON CONFLICT DO NOTHING",
			upsert:  " ON CONFLICT (mark) DO UPDATE SET until_us = EXCLUDED.until_us",
			integer: "BIGINT",
		}
	case mysql:
		return flowSQL{
			style: questionRepeated, quote: '`', forUpdate: " FOR UPDATE",
			now:          "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)",
			insertIgnore: "INSERT IGNORE INTO",
			upsert:       " ON DUPLICATE KEY UPDATE until_us = VALUES(until_us)",
			integer:      "SIGNED",
		}
	default:
		return flowSQL{
			style: questionNumbered, quote: '"',
			now:          "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)",
			insertIgnore: "INSERT OR IGNORE INTO",
			upsert:       " ON CONFLICT (mark) DO UPDATE SET until_us = excluded.until_us",
			integer:      "INTEGER",
		}
	}
}

// flowClock returns the flow statements' "now" in µs since the epoch, an expression,
// and the values it takes: the database's clock, or under a test clock that clock's
// time (as the Redis sources take it), so that Advance(d) moves the limits and the
// marks by d, and the wall-clock time a test takes moves them not at all.
func (t *transport) flowClock(f flowSQL) (string, map[string]any) {
	if c := t.env.TestClock; c != nil {
		return "CAST(:tnow AS " + f.integer + ")", map[string]any{"tnow": c.Now().UnixMicro()}
	}
	return f.now, map[string]any{}
}

// flowKey names one limit's or mark's rows: a hash of the queue's table and group and
// what, so that any key value fits the key column and queues sharing the table do not
// meet.
func (t *transport) flowKey(kind, what string) string {
	sum := sha256.Sum256([]byte(kind + "\x00" + t.q.ib.table.Name + "\x00" + t.q.group + "\x00" + what))
	return hex.EncodeToString(sum[:])
}

// limitTable and markTable are the inbox's flow tables, quoted.
func (t *transport) limitTable() string {
	return quoteWith(cmp.Or(t.q.ib.limitTable, DefaultLimitTable), flowSQLOf(t.d).quote)
}

func (t *transport) markTable() string {
	return quoteWith(cmp.Or(t.q.ib.markTable, DefaultMarkTable), flowSQLOf(t.d).quote)
}

// flowProblems returns the refusals of the flow tables' names a mount with flow limits or
// Dedupe (p) would use.
func (t *transport) flowProblems(p source.Policy) []error {
	var errs []error
	for _, n := range []struct {
		opt, name string
		used      bool
	}{
		{"WithLimitTable", cmp.Or(t.q.ib.limitTable, DefaultLimitTable), p.FlowLimits},
		{"WithMarkTable", cmp.Or(t.q.ib.markTable, DefaultMarkTable), p.DedupWindow > 0},
	} {
		if n.used && strings.ContainsAny(n.name, "\"`'\x00; ") {
			errs = append(errs, fmt.Errorf("inbox: %s(%q): the table name contains a quote, a space or ';'", n.opt, n.name))
		}
	}
	return errs
}

// checkFlowTables returns, for a mount with flow limits or Dedupe (p), an error naming
// each flow table it needs that the database lacks or that lacks a column.
func (t *transport) checkFlowTables(ctx context.Context, p source.Policy) []error {
	var errs []error
	check := func(name, why string, cols []string) {
		if err := checkColumns(ctx, t.q.ib.db, t.s, name, cols); err != nil {
			errs = append(errs, fmt.Errorf("inbox: %s keeps its state in table %s, which could not be used: create it with the README's schema (\"Flow limits and Dedupe on the inbox\"): %w", why, name, err))
		}
	}
	if p.FlowLimits {
		check(cmp.Or(t.q.ib.limitTable, DefaultLimitTable), "a flow limit (RateLimit, RateLimitBy, ConcurrencyBy, GlobalConcurrency)", []string{"lim", "slot", "until_us"})
	}
	if p.DedupWindow > 0 {
		check(cmp.Or(t.q.ib.markTable, DefaultMarkTable), "Dedupe", []string{"mark", "until_us"})
	}
	return errs
}

// flowGrace is how long past its end a limit's row is kept before a take deletes it:
// a row that ended is the same state as no row, and the grace keeps a cleanup from
// deleting a row a take is about to lock.
const flowGrace = time.Minute

// flowCleanupEvery is how many takes (or marked acks) of a mount run between two
// deletions of up to 100 rows that ended, the first take (ack) included: idle keys' rows
// go, a few at a time.
const flowCleanupEvery = 64

var _ source.Limiter = (*transport)(nil)

// LimitTake lets one delivery start under gates (source.Limiter), in one transaction
// that locks each limit's head row, reads the database's clock, and then takes every
// limit or none, as limit_take.lua does on Redis: rate limits are GCRA (a head row holds
// the theoretical arrival time in µs), concurrency slots are rows of their own (token ->
// lease end), fenced by their token.
func (t *transport) LimitTake(ctx context.Context, gates []source.Gate, token string, horizon time.Duration) (source.Take, error) {
	lims := make([]string, len(gates))
	for i, g := range gates {
		kind := "rate"
		if g.Slots > 0 {
			kind = "slots"
		}
		lims[i] = t.flowKey("limit", kind+":"+g.Name+"\x00"+g.Value)
	}
	db := t.q.ib.db
	take, err := retry(ctx, t.d, db, func() (source.Take, error) { return t.limitTake(ctx, gates, lims, token, horizon) })
	if err != nil {
		return source.Take{}, fmt.Errorf("inbox: flow limits in table %s: %w", t.limitTable(), err)
	}
	if t.limitOps.Add(1)%flowCleanupEvery == 1 {
		t.flowCleanup(ctx, t.limitTable(), []string{"lim", "slot"}, flowGrace)
	}
	return take, nil
}

// beginFlow begins a flow transaction: on MySQL/MariaDB at READ COMMITTED, so that its
// locking reads take no gap lock another take or a cleanup waits for (as the claims).
func (t *transport) beginFlow(ctx context.Context) (txn, error) {
	if _, ok := t.d.(mysql); ok {
		return t.q.ib.db.BeginTx(ctx, readCommitted)
	}
	return t.d.begin(ctx, t.q.ib.db)
}

// limitTake is one try of LimitTake.
func (t *transport) limitTake(ctx context.Context, gates []source.Gate, lims []string, token string, horizon time.Duration) (source.Take, error) {
	f, table := flowSQLOf(t.d), t.limitTable()
	tx, err := t.beginFlow(ctx)
	if err != nil {
		return source.Take{}, err
	}
	defer func() { _ = tx.Rollback() }()
	exec := func(tmpl string, vals map[string]any) (sql.Result, error) {
		st := compile(tmpl, f.style)
		return tx.ExecContext(ctx, st.text, st.bind(vals)...)
	}
	// The head rows, locked in key order (two takes lock them alike): created first
	// where missing.
	sorted := slices.Clone(lims)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	nowExpr, vals := t.flowClock(f)
	for i, l := range sorted {
		vals[fmt.Sprintf("lim%d", i)] = l
	}
	lock := compile(fmt.Sprintf("SELECT lim, until_us FROM %s WHERE slot = '' AND lim IN (%s) ORDER BY lim%s", table, list("lim", len(sorted)), f.forUpdate), f.style)
	heads := map[string]int64{}
	read := func() error {
		var lim string
		var until int64
		return queryEach(ctx, tx, lock.text, lock.bind(vals), []any{&lim, &until}, func() { heads[lim] = until })
	}
	if err := read(); err != nil {
		return source.Take{}, err
	}
	if len(heads) < len(sorted) {
		for i, l := range sorted {
			if _, ok := heads[l]; ok {
				continue
			}
			if _, err := exec(fmt.Sprintf("%s %s (lim, slot, until_us) VALUES (:lim%d, '', 0)%s", f.insertIgnore, table, i, f.ignoreSuffix), vals); err != nil {
				return source.Take{}, err
			}
		}
		if err := read(); err != nil {
			return source.Take{}, err
		}
	}
	var now int64
	nowSt := compile("SELECT "+nowExpr, f.style)
	if err := tx.QueryRowContext(ctx, nowSt.text, nowSt.bind(vals)...).Scan(&now); err != nil {
		return source.Take{}, err
	}
	hz := horizon.Microseconds()
	var slotWait, rateWait int64
	slotWhich, rateWhich := -1, -1
	tats := make([]int64, len(gates))
	for i, g := range gates {
		if g.Slots == 0 {
			interval := max(g.Interval.Microseconds(), 1)
			tolerance := interval * int64(max(g.Burst, 1)-1)
			tat := max(heads[lims[i]], now)
			if w := tat - now - tolerance; w > rateWait {
				rateWait, rateWhich = w, i
			}
			tats[i] = tat + interval
			continue
		}
		lv := map[string]any{"lim": lims[i], "now": now}
		if _, err := exec(fmt.Sprintf("DELETE FROM %s WHERE lim = :lim AND slot <> '' AND until_us <= :now", table), lv); err != nil {
			return source.Take{}, err
		}
		st := compile(fmt.Sprintf("SELECT COUNT(*), COALESCE(MIN(until_us), 0) FROM %s WHERE lim = :lim AND slot <> ''", table), f.style)
		var n, first int64
		if err := tx.QueryRowContext(ctx, st.text, st.bind(lv)...).Scan(&n, &first); err != nil {
			return source.Take{}, err
		}
		if n >= int64(g.Slots) {
			if w := max(first-now, 1000); w > slotWait {
				slotWait, slotWhich = w, i
			}
		}
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	if slotWhich >= 0 {
		return source.Take{Wait: us(slotWait), Which: slotWhich}, nil
	}
	if rateWait > hz {
		return source.Take{Wait: us(rateWait - hz), Which: rateWhich}, nil
	}
	for i, g := range gates {
		if g.Slots == 0 {
			if _, err := exec(fmt.Sprintf("UPDATE %s SET until_us = :until WHERE lim = :lim AND slot = ''", table), map[string]any{"lim": lims[i], "until": tats[i]}); err != nil {
				return source.Take{}, err
			}
			continue
		}
		lv := map[string]any{"lim": lims[i], "slot": token, "until": now + g.Lease.Microseconds() + rateWait}
		if _, err := exec(fmt.Sprintf("INSERT INTO %s (lim, slot, until_us) VALUES (:lim, :slot, :until)", table), lv); err != nil {
			return source.Take{}, err
		}
		// The head row lives as long as its last lease: no cleanup takes it meanwhile.
		if _, err := exec(fmt.Sprintf("UPDATE %s SET until_us = :until WHERE lim = :lim AND slot = '' AND until_us < :until", table), lv); err != nil {
			return source.Take{}, err
		}
	}
	if err := tx.Commit(); err != nil {
		return source.Take{}, err
	}
	if rateWait > 0 {
		return source.Take{Reserved: true, Wait: us(rateWait), Which: rateWhich}, nil
	}
	return source.Take{Which: -1}, nil
}

// LimitRenew extends each held slot's lease to now + lease where it has not ended, and
// returns the indexes of those that had (source.Limiter): lost, never taken back.
func (t *transport) LimitRenew(ctx context.Context, held []source.Held, lease time.Duration) ([]int, error) {
	f, table := flowSQLOf(t.d), t.limitTable()
	db := t.q.ib.db
	nowExpr, vals := t.flowClock(f)
	nowSt := compile("SELECT "+nowExpr, f.style)
	var now int64
	if err := db.QueryRowContext(ctx, nowSt.text, nowSt.bind(vals)...).Scan(&now); err != nil {
		return nil, fmt.Errorf("inbox: flow limits in table %s: renew slots: %w", table, err)
	}
	until := now + lease.Microseconds()
	renew := compile(fmt.Sprintf("UPDATE %s SET until_us = :until WHERE lim = :lim AND slot = :slot AND until_us > :now", table), f.style)
	// A row already at :until is not counted as changed by MySQL: read it.
	read := compile(fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE lim = :lim AND slot = :slot AND until_us = :until", table), f.style)
	var lost []int
	for i, h := range held {
		vals := map[string]any{"lim": t.flowKey("limit", "slots:"+h.Name+"\x00"+h.Value), "slot": h.Token, "now": now, "until": until}
		ok, err := retry(ctx, t.d, db, func() (bool, error) {
			ok, err := affectedOne(db.ExecContext(ctx, renew.text, renew.bind(vals)...))
			if err != nil || ok {
				return ok, err
			}
			var n int
			err = db.QueryRowContext(ctx, read.text, read.bind(vals)...).Scan(&n)
			return n == 1, err
		})
		if err != nil {
			return nil, fmt.Errorf("inbox: flow limits in table %s: renew a slot: %w", table, err)
		}
		if !ok {
			lost = append(lost, i)
		}
	}
	return lost, nil
}

// LimitRelease frees each held slot, only if its token still holds it (source.Limiter).
func (t *transport) LimitRelease(ctx context.Context, held []source.Held) error {
	f := flowSQLOf(t.d)
	st := compile(fmt.Sprintf("DELETE FROM %s WHERE lim = :lim AND slot = :slot", t.limitTable()), f.style)
	var errs []error
	for _, h := range held {
		vals := map[string]any{"lim": t.flowKey("limit", "slots:"+h.Name+"\x00"+h.Value), "slot": h.Token}
		if _, err := retry(ctx, t.d, t.q.ib.db, func() (sql.Result, error) {
			return t.q.ib.db.ExecContext(ctx, st.text, st.bind(vals)...)
		}); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("inbox: flow limits in table %s: release slots: %w", t.limitTable(), err)
	}
	return nil
}

// flowCleanup deletes up to 100 rows of table (keys: its key columns) that ended more
// than grace ago, best effort: a row left is deleted by a later cleanup, and one that
// ended is the same state as none (a failure is logged at Debug). It reads them first,
// without a lock, then deletes them by key, asking again whether each ended: a row a
// take moved on meanwhile is kept, and the DELETE locks rows in the order a take does
// (by key), never a range of the until_us index a take's UPDATE would wait for
// (MariaDB deadlocked on it).
func (t *transport) flowCleanup(ctx context.Context, table string, keys []string, grace time.Duration) {
	f := flowSQLOf(t.d)
	nowExpr, vals := t.flowClock(f)
	db := t.q.ib.db
	err := func() error {
		nowSt := compile("SELECT "+nowExpr, f.style)
		var now int64
		if err := db.QueryRowContext(ctx, nowSt.text, nowSt.bind(vals)...).Scan(&now); err != nil {
			return err
		}
		del := map[string]any{"cut": now - grace.Microseconds()}
		sel := compile(fmt.Sprintf("SELECT %s FROM %s WHERE until_us < :cut LIMIT 100", strings.Join(keys, ", "), table), f.style)
		var tuples []string
		row := make([]string, len(keys))
		dest := make([]any, len(keys))
		for i := range row {
			dest[i] = &row[i]
		}
		err := queryEach(ctx, db, sel.text, sel.bind(del), dest, func() {
			names := make([]string, len(keys))
			for i, v := range row {
				names[i] = fmt.Sprintf(":k%d_%d", len(tuples), i)
				del[names[i][1:]] = v
			}
			tuples = append(tuples, "("+strings.Join(names, ", ")+")")
		})
		if err != nil || len(tuples) == 0 {
			return err
		}
		st := compile(fmt.Sprintf("DELETE FROM %s WHERE until_us < :cut AND (%s) IN (%s)", table, strings.Join(keys, ", "), strings.Join(tuples, ", ")), f.style)
		_, err = retry(ctx, t.d, db, func() (sql.Result, error) { return db.ExecContext(ctx, st.text, st.bind(del)...) })
		return err
	}()
	if err != nil {
		t.env.Logger.DebugContext(ctx, "settle: inbox: could not delete the rows that ended of a flow table; a later take or ack tries again",
			slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, table), slog.Any(source.AttrError, err))
	}
}
