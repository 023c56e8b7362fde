package settle

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// failedSettles keeps, per delivery id, the settlement whose write failed in this
// process (a refused write, a key of the wrong type, a lost connection) and how many
// times it failed. Such a message stays where its transport keeps it and is delivered
// again; its handler already ran and decided, so the engine writes that settlement
// again (settleAgain) instead of running the handler once more: a failed write spends
// no attempt, and a transport that counts unsettled deliveries does not make the cap
// look reached "by deliveries that never settled". A transport that names each delivery
// anew (a reliable list) never matches: its handler runs again, at the same attempt (a
// re-read of its own processing list counts nothing). A success forgets the id; the
// map is bounded (a write that did apply although its answer was lost leaves an id that
// never comes back).
type failedSettles struct {
	mu   sync.Mutex
	m    map[string]failedSettle
	size atomic.Int64 // len(m), read without the lock on every delivery and settlement
}

// failedSettle is one delivery's settlement that failed to write, as the Settled event
// reported it, and how many times it failed.
type failedSettle struct {
	ev Settled
	n  int
}

// maxFailedSettles bounds failedSettles: past it, what it holds is dropped whole (those
// messages run their handler again when they come back).
const maxFailedSettles = 10_000

// add records ev, a failed settlement of d, and returns how many times it failed.
func (f *failedSettles) add(d *source.Delivery, ev Settled) int {
	id := d.ID
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil || len(f.m) >= maxFailedSettles {
		f.m = map[string]failedSettle{}
	}
	ev.ctx = nil // not kept past its delivery
	r := failedSettle{ev: ev, n: f.m[id].n + 1}
	f.m[id] = r
	f.size.Store(int64(len(f.m)))
	return r.n
}

// get returns the failed settlement of d, if any.
func (f *failedSettles) get(d *source.Delivery) (failedSettle, bool) {
	if f.size.Load() == 0 {
		return failedSettle{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.m[d.ID]
	return r, ok
}

// count returns how many times the settlement of d failed.
func (f *failedSettles) count(d *source.Delivery) int {
	r, _ := f.get(d)
	return r.n
}

// forget drops d once a settlement of it succeeded.
func (f *failedSettles) forget(d *source.Delivery) {
	if f.size.Load() == 0 {
		return
	}
	id := d.ID
	f.mu.Lock()
	delete(f.m, id)
	f.size.Store(int64(len(f.m)))
	f.mu.Unlock()
}

// waitAfterFailedSettlements waits before a delivery whose settlement failed n times
// is settled again: 100 ms doubling per failure, at most 5 s, so that a write that
// keeps failing does not loop, while the mount's other deliveries go on.
func waitAfterFailedSettlements(ctx context.Context, n int) {
	wait := 5 * time.Second
	if n < 7 {
		wait = min(wait, 100*time.Millisecond<<(n-1))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// settleAgain writes again the settlement of d that failed (f), at the attempt its
// handler ran, without running the handler. It reports done false, having done
// nothing, when the mount's policy now decides otherwise (the handler then runs).
func (m *mount) settleAgain(ctx context.Context, d *source.Delivery, f failedSettle, acks *acker, delays *timerq.Queue, w *worker) (queued, done bool) {
	again := *d
	again.Attempt = f.ev.Attempt
	o := Outcome{Kind: f.ev.Outcome, Err: f.ev.HandlerErr, Delay: f.ev.Delay}
	var s settlement
	if f.ev.Action == ActionReply {
		if f.ev.outputs == nil {
			return false, false
		}
	} else if s = decide(o, again.Attempt, m.policy, m.info.Caps); s.Action != f.ev.Action {
		return false, false
	}
	ctx = m.started(ctx, d)
	if !w.end() {
		return true, true // settled by the watchdog meanwhile
	}
	m.logger.InfoContext(ctx, "settle: writing again a settlement whose write failed; the handler is not run again",
		slog.String(attrMsgID, d.ID), slog.String(attrAction, f.ev.Action.String()), slog.Int(attrAttempt, again.Attempt), slog.Int("failed_settlements", f.n))
	if f.ev.Action == ActionReply {
		return m.reply(ctx, &again, *f.ev.outputs, acks, delays, time.Time{}), true
	}
	return m.apply(ctx, &again, o, s, acks, delays, time.Time{}), true
}

// keyCheck is the last answer of a mount's key check, reused for a second so that a
// burst of failed settlements reads the key types once.
type keyCheck struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

// wrongType returns, for a settlement that failed with WRONGTYPE, which key the mount
// writes holds another type (the transport's key check, naming the key, its type and
// the command that fails there); nil for any other failure, or when no key is wrong now.
func (m *mount) wrongType(ctx context.Context, err error) error {
	if m.keys == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		return nil
	}
	c := &m.keysSaid
	c.mu.Lock()
	defer c.mu.Unlock()
	if now := time.Now(); c.at.IsZero() || now.Sub(c.at) >= time.Second {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		c.err, c.at = m.keys.CheckKeys(ctx), now
		cancel()
	}
	return c.err
}
