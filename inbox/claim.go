package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// Fetch claims up to max due rows, waiting up to wait for some: it claims at once, then
// again when woken (a row published, put back or announced, or a lot taken over settled),
// when a waiting row comes due, or each poll.
func (t *transport) Fetch(ctx context.Context, max int, wait time.Duration) ([]*source.Delivery, error) {
	deadline := time.Now().Add(wait)
	for {
		if wait <= 0 || t.idle.over(t.q.cfg.poll) {
			woken := t.q.ib.woken(t.q.group)
			ds, err := t.claim(ctx, max)
			if err != nil || len(ds) > 0 {
				t.idle = idleState{}
				return ds, err
			}
			t.idle = idleState{since: time.Now(), wake: woken, due: t.nextDue(ctx)}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		// Polling runs on the wall clock: it only bounds how soon a due row is seen (a
		// test's fake clock decides what is due).
		timer := time.NewTimer(min(left, time.Until(t.idle.until(t.q.cfg.poll))))
		select {
		case <-timer.C:
		case <-t.idle.wake:
			timer.Stop()
		case <-ctx.Done():
			timer.Stop()
			return nil, nil
		}
	}
}

// nextDueRetry is how soon an idle queue claims again when it could not learn when its
// next waiting row comes due (the query failed: a database refusing connections under
// load, say): soon, rather than a whole poll later, which could strand a row retried
// after a short delay on a queue that polls rarely.
const nextDueRetry = time.Second

// nextDue returns when the queue's earliest row waiting for its retry_after comes due,
// by the database's clock, as a wall-clock time (zero: none waits, the table has no
// retry_after column, or a test clock decides what is due; nextDueRetry from now when
// the query failed).
func (t *transport) nextDue(ctx context.Context) time.Time {
	if t.s.nextDue.text == "" || t.env.TestClock != nil {
		return time.Time{}
	}
	var micros sql.NullInt64
	vals := map[string]any{"skew": t.d.skewArg(t.skew()), "group": t.q.group}
	if err := t.q.ib.db.QueryRowContext(ctx, t.s.nextDue.text, t.s.nextDue.bind(vals)...).Scan(&micros); err != nil {
		return time.Now().Add(nextDueRetry)
	}
	if !micros.Valid {
		return time.Time{}
	}
	return time.Now().Add(time.Duration(max(micros.Int64, 0)) * time.Microsecond)
}

// claim leases up to max due rows: first a lot of rows whose lease passed, when the
// takeover wants one (see takeover.want: no statement otherwise), then rows whose lease
// is NULL, up to max. Under a test clock both claim at the "now" one catch-up brought
// the live workers' leases to.
func (t *transport) claim(ctx context.Context, max int) ([]*source.Delivery, error) {
	skew := t.skew()
	t.live.catchUp(ctx, skew)
	var ds []*source.Delivery
	if n := t.takeover.want(time.Now(), max); n > 0 {
		taken, hs, err := t.claimRows(ctx, skew, n, true)
		if err != nil {
			return nil, err
		}
		t.takeover.took(hs, n, time.Now())
		t.leases.add(hs)
		for _, d := range taken {
			d.Redelivered = true // its lease passed
		}
		if len(taken) > 0 {
			t.env.Emit(ctx, source.Event{Kind: source.EventLease, Count: len(taken)})
		}
		ds = taken
	}
	if left := max - len(ds); left > 0 {
		fresh, hs, err := t.claimRows(ctx, skew, left, false)
		if err != nil && len(ds) == 0 {
			return nil, err
		}
		// Else the rows taken over go out: a lasting error comes back at the next claim.
		t.leases.add(hs)
		ds = append(ds, fresh...)
	}
	if len(ds) == 0 {
		return nil, nil
	}
	return ds, nil
}

// claimRows runs one claim of up to n rows at skew (the takeover claim, or the main one)
// and returns the rows as deliveries and their held rows, which the caller gives the
// lease keeper.
func (t *transport) claimRows(ctx context.Context, skew time.Duration, n int, takeover bool) ([]*source.Delivery, []*held, error) {
	db := t.q.ib.db
	rows, err := retry(ctx, t.d, db, func() ([]claimedRow, error) {
		return t.d.claim(ctx, db, t.s, t.d.skewArg(skew), t.q.cfg.lease, n, takeover)
	})
	if err != nil {
		var uncertain *claimUncertain
		if errors.As(err, &uncertain) {
			t.releaseUncertain(uncertain.rows, skew)
		}
		return nil, nil, fmt.Errorf("inbox: table %s: claim: %w", t.q.ib.table.Name, err)
	}
	ds, hs := make([]*source.Delivery, len(rows)), make([]*held, len(rows))
	now := time.Now()
	for i, r := range rows {
		t.atMax(ctx, r)
		var herr error
		ds[i], herr = r.delivery(t.q.ib.table.Name)
		if herr != nil {
			t.env.Logger.WarnContext(ctx, "settle: inbox: row delivered without its headers", source.AttrMount, t.env.Mount, source.AttrKey, t.q.ib.table.Name, source.AttrMsgID, ds[i].ID, source.AttrError, herr)
		}
		hs[i] = ds[i].Raw.(*held)
		hs[i].skew, hs[i].wrote = skew, now
		ds[i].TakenOver = takeover
		ds[i].RetryCount = t.settledBefore(ds[i], takeover)
	}
	return ds, hs, nil
}

// settledBefore is what a claimed row's RetryCount tells the engine: Attempt −
// RetryCount − 1 of the deliveries its attempt counts never settled (see
// source.Delivery), and the engine blames a row past the cap on crashes, settling it
// without running its handler, only when its last delivery never settled. A plain
// queue knows which rows those are: its main claim takes rows whose lease is NULL (their
// last delivery settled, or there was none: a row past the cap got there by a cap
// lowered since or an attempt another program wrote), the takeover claim rows whose
// lease passed (one delivery more, unsettled). A FIFO queue's one claim takes both, and
// it counts every earlier delivery as possibly unsettled (0), as a table without this
// knowledge would.
func (t *transport) settledBefore(d *source.Delivery, takeover bool) int {
	switch {
	case t.q.cfg.fifo:
		return 0
	case takeover:
		return max(d.Attempt-2, 0)
	default:
		return max(d.Attempt-1, 0)
	}
}
