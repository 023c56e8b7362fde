package inbox

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// leaseKeeper is one transport's lease heartbeat: it keeps the rows leased to the
// transport (running, or claimed and waiting for a handler) from the claim until their
// settlement, and every third of the lease, on the App's clock, extends all their
// leases, one statement per batch (see nextBatch). A row whose lease was taken over is
// reported once and kept no longer. Under a test clock, claims also bring the leases
// Advance made stale up to date (extendStale, see liveWorker.catchUp).
type leaseKeeper struct {
	clock clock.Clock // the App's: the heartbeat's timers
	// extendFunc moves the leases of hs (locked by the keeper, each id once, at most
	// maxBatchRows) forward in one statement, and returns the new lease of each row it
	// moved, by id (idString), and the test clock's skew it wrote them at.
	extendFunc func(ctx context.Context, hs []*held) (leases map[string]any, skew time.Duration, err error)
	lease      time.Duration
	logger     *slog.Logger
	mount      string

	done chan struct{}      // closed when the heartbeat has returned (nil: not started)
	stop context.CancelFunc // ends the heartbeat

	passing sync.Mutex // one pass at a time: a heartbeat's or a claim's catch-up

	mu   sync.Mutex
	rows map[*held]struct{}
}

// newLeaseKeeper returns the keeper of the leases of env's mount, which last lease and
// are extended by extendFunc.
func newLeaseKeeper(env source.Env, lease time.Duration, extendFunc func(ctx context.Context, hs []*held) (map[string]any, time.Duration, error)) *leaseKeeper {
	return &leaseKeeper{clock: env.Clock, extendFunc: extendFunc, lease: lease, logger: env.Logger, mount: env.Mount, rows: map[*held]struct{}{}}
}

// add keeps the leases of rows just claimed.
func (k *leaseKeeper) add(hs []*held) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, h := range hs {
		k.rows[h] = struct{}{}
	}
}

// close stops the heartbeat and waits for it to return.
func (k *leaseKeeper) close() {
	if k.done != nil {
		k.stop()
		<-k.done
	}
}

// extend moves the leases of hs, whose mu the keeper holds (and extend lets go), forward
// in one statement. A row whose lease was taken over is reported and forgotten: its
// settlement will change nothing.
func (k *leaseKeeper) extend(ctx context.Context, hs []*held) {
	defer func() {
		for _, h := range hs {
			h.mu.Unlock()
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, k.lease/3)
	defer cancel()
	leases, skew, err := k.extendFunc(wctx, hs)
	if err != nil {
		if ctx.Err() == nil { // not a stop
			k.logger.WarnContext(ctx, "settle: inbox: extending leases failed; their rows may be claimed again if the leases pass",
				slog.String(source.AttrMount, k.mount), slog.Int("count", len(hs)), slog.Any(source.AttrError, err))
		}
		return
	}
	now := time.Now()
	for _, h := range hs {
		next, ok := leases[idString(h.id)]
		if !ok {
			k.logger.WarnContext(ctx, "settle: inbox: a row no longer holds its lease while its handler runs (another worker took it over once it passed, or someone else released, changed or deleted the row); its settlement will change nothing",
				slog.String(source.AttrMount, k.mount), slog.String(source.AttrMsgID, idString(h.id)))
			k.forget(h)
			continue
		}
		h.token, h.skew, h.wrote = next, skew, now
	}
}

// extendStale extends the leases written at a skew before skew, or a third of the lease
// ago or longer (see liveWorker.catchUp). It waits for a row being settled.
func (k *leaseKeeper) extendStale(ctx context.Context, skew time.Duration) {
	k.pass(ctx, true, func(h *held) bool { return h.skew < skew || time.Since(h.wrote) >= k.lease/3 })
}

// forget stops keeping h's lease: h was settled (or its settlement failed), or its
// lease taken over. Either way the row has left the worker, and its lot, if a takeover
// claimed it, no longer waits for it (see takeover.leave).
func (k *leaseKeeper) forget(h *held) {
	k.mu.Lock()
	delete(k.rows, h)
	k.mu.Unlock()
	h.lot.leave(h)
}

// pass extends the leases of the rows kept that want selects, one statement per batch.
// A row whose mu another goroutine holds is being settled (every holder but the keeper
// is a settlement, which marks its rows settled before it lets go): with wait, the pass
// waits for it while it holds no other row (a settlement locking several rows never
// waits for the keeper while the keeper waits for it); else it passes the row over.
func (k *leaseKeeper) pass(ctx context.Context, wait bool, want func(h *held) bool) {
	k.passing.Lock()
	defer k.passing.Unlock()
	k.mu.Lock()
	todo := make([]*held, 0, len(k.rows))
	for h := range k.rows {
		todo = append(todo, h)
	}
	k.mu.Unlock()
	for len(todo) > 0 {
		var next, busy, batch []*held
		next, todo = nextBatch(todo)
		for _, h := range next {
			switch {
			case !h.mu.TryLock():
				busy = append(busy, h)
			case h.settled || !want(h):
				h.mu.Unlock()
			default:
				batch = append(batch, h)
			}
		}
		if !wait {
			busy = nil
		}
		if len(batch) > 0 {
			k.extend(ctx, batch)
		} else if len(busy) > 0 {
			busy[0].mu.Lock() // its settlement settles it
			busy[0].mu.Unlock()
		}
		todo = append(busy, todo...)
	}
}

// run extends every lease kept each third of the lease, until ctx ends.
func (k *leaseKeeper) run(ctx context.Context) {
	defer close(k.done)
	for {
		timer := k.clock.NewTimer(k.lease / 3)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C():
		}
		k.pass(ctx, false, func(*held) bool { return true })
	}
}

// start starts the heartbeat, until close; ctx's values reach its writes, its end does
// not.
func (k *leaseKeeper) start(ctx context.Context) {
	ctx, k.stop = context.WithCancel(context.WithoutCancel(ctx))
	k.done = make(chan struct{})
	go k.run(ctx)
}
