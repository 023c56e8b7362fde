package redislist

import (
	"context"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// takeoverLot is what a reliable list consumer holds of the items it took over: the
// items a recovery moved into its processing list from a dead consumer's (or, at start,
// rewrote in its own, left by an earlier process of its name). A crash charges an
// attempt to every delivery the process held, so a process-killing item must not take
// a dead consumer's whole list down with it each time it kills the next consumer:
// recovery takes one at a time (a lot of one, which the engine runs alone: see
// source.Delivery.TakenOver), and the next only once the last has settled. Guarded by
// reliableTransport.mu.
//
// The count is exact and cannot stick above zero: an item counts from the recovery
// call that moved it (the script tells which) until its delivery's settlement has
// answered, whatever the answer (a failed one may leave the item in the processing
// list, where a re-read delivers it again uncounted), or until Close; an item that
// left the processing list before it was delivered (another consumer recovered it)
// still becomes a delivery, whose settlement finds it gone.
type takeoverLot struct {
	held   map[string]struct{} // delivery IDs of taken items handed out and not settled yet
	more   bool                // the last recovery may have left items behind
	queued []string            // taken items not delivered yet, each counted in inflight
	ready  chan struct{}       // signalled when items are queued, for a Fetch waiting on them
	wake   chan struct{}       // signalled when a lot has settled and more is set: the keeper takes the next
}

// newTakeoverLot returns an empty lot.
func newTakeoverLot() takeoverLot {
	return takeoverLot{held: map[string]struct{}{}, ready: make(chan struct{}, 1), wake: make(chan struct{}, 1)}
}

// outstanding is how many taken items have not settled yet.
func (l *takeoverLot) outstanding() int { return len(l.queued) + len(l.held) }

// signal sends on a one-slot channel without waiting.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// lotHolder is what a listKeeper tells of the items it takes over, and asks how many it
// may take (the reliableTransport, which delivers them and sees them settle).
type lotHolder interface {
	// hold marks values in flight, so that a re-read of the processing list does not
	// deliver them: items about to be moved into it, or the own items awaiting a lot.
	hold(values []string)
	// recovering records, as a recovery round starts, that it may leave items to take
	// until it knows better: a lot that settles meanwhile then wakes the keeper again.
	// It wakes nothing itself (the round runs now).
	recovering()
	// leftBehind records, as a recovery round ends, whether it may have left items to
	// take, and wakes the keeper when it did and nothing taken is outstanding.
	leftBehind(more bool)
	// lotRoom returns how many items a recovery may take now.
	lotRoom() int
	// markRescan asks for a re-read of the processing list before the next move: items
	// no delivery holds (pushed in by someone else, or left by a settlement whose
	// failure went unseen) are then delivered.
	markRescan()
	// release undoes hold for values that will not be delivered as taken.
	release(values []string)
	// took queues the values at the positions taken (held before the move), to be
	// delivered before anything else, and releases the others.
	took(values []string, taken []int)
	// tookUnknown releases values held for a recovery call that failed: what it moved,
	// if anything, is delivered by a re-read of the processing list, uncounted.
	tookUnknown(values []string)
}

var _ lotHolder = (*reliableTransport)(nil)

func (t *reliableTransport) hold(values []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range values {
		t.inflight[v]++
	}
}

func (t *reliableTransport) recovering() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lot.more = true
}

func (t *reliableTransport) leftBehind(more bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lot.more = more
	if more && t.lot.outstanding() == 0 {
		signal(t.lot.wake)
	}
}

// lotRoom is one item once the last one taken has settled, else 0: a taken item runs
// alone (see source.Delivery.TakenOver).
func (t *reliableTransport) lotRoom() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lot.outstanding() > 0 {
		return 0
	}
	return 1
}

func (t *reliableTransport) release(values []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range values {
		t.forget(v)
	}
}

func (t *reliableTransport) took(values []string, taken []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := make([]bool, len(values))
	for _, i := range taken {
		if i < len(values) && !moved[i] {
			moved[i] = true
			t.lot.queued = append(t.lot.queued, values[i])
		}
	}
	for i, v := range values {
		if !moved[i] {
			t.forget(v)
		}
	}
	if len(taken) > 0 {
		signal(t.lot.ready)
	}
}

func (t *reliableTransport) tookUnknown(values []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range values {
		t.forget(v)
	}
	t.rescan = true
}

// forget takes one count of v out of inflight. Called with mu held.
func (t *reliableTransport) forget(v string) {
	if t.inflight[v]--; t.inflight[v] <= 0 {
		delete(t.inflight, v)
	}
}

// deliverTaken hands out up to n of the queued taken items, counted held until their
// settlement answers. Their delivery counts the one that never settled: the retry count
// the recovery wrote already does, so the delivery's RetryCount is one less.
func (t *reliableTransport) deliverTaken(ctx context.Context, n int) []*source.Delivery {
	t.mu.Lock()
	n = min(n, len(t.lot.queued))
	vals := t.lot.queued[:n:n]
	t.lot.queued = t.lot.queued[n:]
	ids := make([]string, n)
	for i := range ids {
		ids[i] = t.ids.Next()
		t.lot.held[ids[i]] = struct{}{}
	}
	t.mu.Unlock()
	ds := make([]*source.Delivery, n)
	for i, v := range vals {
		ds[i] = t.delivery(ctx, v, ids[i])
		ds[i].RetryCount = max(ds[i].RetryCount-1, 0)
		ds[i].TakenOver = true
		ds[i].Redelivered = true
	}
	t.unsettled.Add(int64(n))
	return ds
}

// settledTaken forgets a settled delivery of a taken item, if d is one, and wakes the
// keeper when that settled the lot and the dead consumers have more. Called with mu
// held.
func (t *reliableTransport) settledTaken(d *source.Delivery) {
	if _, ok := t.lot.held[d.ID]; !ok {
		return
	}
	delete(t.lot.held, d.ID)
	if t.lot.more && t.lot.outstanding() == 0 {
		signal(t.lot.wake)
	}
}

// takeoverPending reports whether a recovery round may have left items behind: a Fetch
// then does not block in Redis, so that the next lot is delivered as soon as it is
// taken. It returns the channel signalled when items are queued.
func (t *reliableTransport) takeoverPending() (chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lot.ready, t.lot.more
}

// pollReady waits until ready is signalled, d has passed or ctx ends.
func pollReady(ctx context.Context, ready <-chan struct{}, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
}
