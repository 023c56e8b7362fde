package inbox

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// A settlement whose statement failed (the database restarting, a connection cut) used
// to leave its row leased until the lease passed (30 s by default) before anyone tried
// the row again, and then at one more attempt. Now the transport keeps such a row held
// (its lease keeper goes on extending its lease, which succeeds again once the database
// answers) and re-applies the same settlement in the background, with a backoff, until
// it applies, its lease turns out taken over (fenced: nothing changes), a lease has
// passed since it first failed (then the row is let go as before, for its lease to pass:
// a write that keeps failing on a live database must not hold its row forever), or the
// transport closes. The engine has reported the settlement failed; RELIABILITY.md's "a
// settlement reported failed may have applied" covers it. A user's OnDeadLetter hook is
// not re-run: its failure may be its own.

// redoBackoff bounds the wait between two re-applications of failed settlements.
const (
	redoFirst = 50 * time.Millisecond
	redoMost  = time.Second
)

// redoer re-applies a transport's failed settlements (see the comment atop this file).
type redoer struct {
	applyFunc func(ctx context.Context, acks []*source.Delivery, moves []source.Move)
	logger    *slog.Logger
	mount     string

	done chan struct{}
	stop context.CancelFunc

	mu    sync.Mutex
	acks  []*source.Delivery
	moves []source.Move
	more  chan struct{} // signalled when something is queued
}

// newRedoer returns a redoer that re-applies queued settlements with apply.
func newRedoer(env source.Env, apply func(ctx context.Context, acks []*source.Delivery, moves []source.Move)) *redoer {
	return &redoer{applyFunc: apply, logger: env.Logger, mount: env.Mount, more: make(chan struct{}, 1)}
}

// ack queues a failed ack (or drop) of d.
func (r *redoer) ack(d *source.Delivery) {
	r.mu.Lock()
	r.acks = append(r.acks, d)
	r.mu.Unlock()
	signal(r.more)
}

// close stops the loop and waits for it: what is still queued is let go, its rows'
// leases left to pass.
func (r *redoer) close() {
	if r.done != nil {
		r.stop()
		<-r.done
	}
}

// move queues a failed move.
func (r *redoer) move(m source.Move) {
	r.mu.Lock()
	r.moves = append(r.moves, m)
	r.mu.Unlock()
	signal(r.more)
}

// run re-applies what is queued, waiting redoFirst, doubling to redoMost while the
// re-applications fail again (each failure queues its settlement again), until ctx ends.
func (r *redoer) run(ctx context.Context) {
	defer close(r.done)
	wait := redoFirst
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.more:
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		r.mu.Lock()
		acks, moves := r.acks, r.moves
		r.acks, r.moves = nil, nil
		r.mu.Unlock()
		r.logger.InfoContext(ctx, "settle: inbox: applying settlements that failed again",
			slog.String(source.AttrMount, r.mount), slog.Int("count", len(acks)+len(moves)))
		r.applyFunc(ctx, acks, moves)
		r.mu.Lock()
		again := len(r.acks) + len(r.moves)
		r.mu.Unlock()
		if again > 0 {
			wait = min(2*wait, redoMost)
		} else {
			wait = redoFirst
		}
	}
}

// start starts the loop, until close.
func (r *redoer) start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go r.run(ctx)
}

// signal wakes a waiter of ch (a channel of one) without blocking.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// keepForRedo reports whether h, whose settlement write failed with err (h.mu held),
// stays held for the redoer to apply it again: the write did not fail on its fence
// (ErrLeaseLost: the row is another worker's), and less than a lease has passed since
// its first failure. Else the row is let go.
func (t *transport) keepForRedo(ctx context.Context, h *held, err error) bool {
	if t.redo == nil || err == nil || errors.Is(err, ErrLeaseLost) {
		return false
	}
	now := time.Now()
	if h.failedAt.IsZero() {
		h.failedAt = now
	}
	if now.Sub(h.failedAt) < t.q.cfg.lease {
		return true
	}
	t.env.Logger.WarnContext(ctx, "settle: inbox: a settlement kept failing for a whole lease; the row is let go and comes back once its lease passes",
		slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrMsgID, idString(h.id)), slog.Any(source.AttrError, err))
	return false
}

// reapply applies settlements that failed again (the redoer's applyFunc); those that
// fail once more are queued again by the write paths.
func (t *transport) reapply(ctx context.Context, acks []*source.Delivery, moves []source.Move) {
	wctx, cancel := context.WithTimeout(ctx, t.q.cfg.lease/3)
	defer cancel()
	if len(acks) > 0 {
		_ = t.Ack(wctx, acks)
	}
	if len(moves) > 0 {
		_ = t.Moves(wctx, moves)
	}
}

// claimUncertain is the error of a claim transaction whose commit failed (MySQL's claim
// is a transaction: select, update, read, commit): the connection may have failed after
// the database committed, leaving rows leased to a worker that never got them, until
// their leases passed. rows are the rows it leased, with the leases it wrote.
type claimUncertain struct {
	err  error
	rows []claimedRow
}

func (e *claimUncertain) Error() string { return "commit: " + e.err.Error() }
func (e *claimUncertain) Unwrap() error { return e.err }

// releaseUncertain hands the rows of a claim whose commit failed to the redoer, to be
// released (their leases cleared, attempts unchanged, fenced by the leases the claim
// wrote) once the database answers: a committed claim's rows are due again at once, not
// a lease later; a claim that was rolled back fails the fence and changes nothing.
func (t *transport) releaseUncertain(rows []claimedRow, skew time.Duration) {
	if t.redo == nil || len(rows) == 0 {
		return
	}
	hs, ds := make([]*held, len(rows)), make([]*source.Delivery, len(rows))
	now := time.Now()
	for i, r := range rows {
		ds[i], _ = r.delivery(t.q.ib.table.Name) // only released: its headers do not matter
		hs[i] = ds[i].Raw.(*held)
		hs[i].skew, hs[i].wrote = skew, now
	}
	t.leases.add(hs) // before the release can forget them
	for _, d := range ds {
		t.redo.move(source.Move{Action: source.ActionRelease, Delivery: d})
	}
}
