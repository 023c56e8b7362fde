package settle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// A settlement is applied (apply) through batched writers, so that a handler's worker
// does not wait for its write's round trip: the acker (every completion), the copier
// (every move, for a transport that writes many in one call) and the writer of due
// in-process delays. Each reports every settlement with its own error once written. The
// watchdog settles, as failures, the deliveries whose handler ran past its timeout.

// acker batches acks: one transport Ack call for all the acks waiting.
type acker struct {
	base    context.Context
	ch      chan ackReq
	done    chan struct{}
	m       *mount
	pending atomic.Int64 // acks queued and not answered yet (see pushAlone)
}

type ackReq struct {
	d  *source.Delivery
	ev Settled
}

// maxAckBatch bounds one batched ack.
const maxAckBatch = 512

func newAcker(base context.Context, m *mount) *acker {
	k := &acker{base: base, ch: make(chan ackReq, maxAckBatch), done: make(chan struct{}), m: m}
	go k.run()
	return k
}

func (k *acker) add(d *source.Delivery, ev Settled) {
	k.pending.Add(1)
	k.ch <- ackReq{d: d, ev: ev}
}

// close flushes waiting acks and stops the acker.
func (k *acker) close() {
	close(k.ch)
	<-k.done
}

func (k *acker) run() {
	defer close(k.done)
	reqs := make([]ackReq, 0, 64)
	ds := make([]*source.Delivery, 0, 64)
	linger := newLinger(k.m, false)
	for req := range k.ch {
		reqs = gatherLingering(linger, k.ch, append(reqs[:0], req), maxAckBatch)
		ds = ds[:0]
		for _, r := range reqs {
			ds = append(ds, r.d)
		}
		ctx, cancel := context.WithTimeout(k.base, settleTimeout)
		err := k.m.transport.Ack(ctx, ds)
		for i, r := range reqs {
			r.ev.Err = source.AckError(err, i)
			k.m.settled(ctx, r.d, r.ev)
		}
		k.pending.Add(-int64(len(reqs)))
		cancel()
	}
}

// writeLinger is how long a batched writer waits for more requests while other
// deliveries are in flight (they will settle soon): one handler acking as fast as it
// runs would otherwise cost a round trip per few messages.
const writeLinger = time.Millisecond

// linger gathers a batched writer's requests: what is queued already and, while other
// deliveries are held (they will settle soon), what comes within writeLinger.
type linger struct {
	m *mount
	// holds: the requests hold their deliveries' slots until written (moves), so the
	// batch's own deliveries are among those held; an ack's slot is freed when queued.
	holds bool
	timer *time.Timer
}

func newLinger(m *mount, holds bool) *linger {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &linger{m: m, holds: holds, timer: t}
}

// others is how many deliveries the mount holds besides batch's.
func (l *linger) others(batch int) int {
	if l.holds {
		return l.m.held() - batch
	}
	return l.m.held()
}

// gatherLingering appends to batch what ch holds, up to max: what is queued already,
// then, while the mount holds other deliveries (they will settle soon), what comes
// within writeLinger (real time: it only bounds a write's latency).
func gatherLingering[T any](l *linger, ch <-chan T, batch []T, max int) []T {
	batch = gather(ch, batch, max)
	if len(batch) >= max || l.others(len(batch)) <= 0 {
		return batch
	}
	l.timer.Reset(writeLinger)
	defer l.timer.Stop()
	for len(batch) < max && l.others(len(batch)) > 0 {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, v)
		case <-l.timer.C:
			return batch
		}
	}
	return batch
}

// gather appends to batch what ch holds already, without waiting, until batch holds max:
// what a batched writer sends in one call.
func gather[T any](ch <-chan T, batch []T, max int) []T {
	for len(batch) < max {
		select {
		case v, ok := <-ch:
			if !ok {
				return batch
			}
			batch = append(batch, v)
		default:
			return batch
		}
	}
	return batch
}

// errShortMoves is the error of a move a transport gave no answer for.
var errShortMoves = errors.New("settle: the transport answered fewer moves than it was given")

// answer returns the error of the i-th request of a batch call that returned errs
// (errShortMoves when it answered fewer).
func answer(errs []error, i int) error {
	if i < len(errs) {
		return errs[i]
	}
	return errShortMoves
}

// maxCopyBatch bounds the moves one Moves call of the copier carries.
const maxCopyBatch = 128

// copier batches a mount's moves (copies, put-backs, a claiming stream's left-pending
// retries, parks, dead letters), as the acker batches its acks, for a transport that
// writes many in one call (Info.BatchesMoves): a handler's worker queues the move and
// goes on to its next delivery instead of waiting for the write's round trip. Each move
// is reported (OnSettled, the failed-settlement backoff) once the transport has
// answered for it, and close waits for every queued move.
//
// The delivery's slot stays taken until then, and the copier frees it: the read loop
// reads no more than before while moves are being written, and learns of a failed one
// (settleFailed, the transport's re-read) before it reads again, as when the handler
// waited.
type copier struct {
	ch    chan copyReq
	done  chan struct{}
	m     *mount
	slots chan struct{} // the mount's; each queued move holds one
}

type copyReq struct {
	move source.Move
	ev   Settled
}

// newCopier starts the mount's copier, or returns nil when its transport writes moves
// one at a time.
func newCopier(m *mount, slots chan struct{}) *copier {
	if !m.info.BatchesMoves {
		return nil
	}
	c := &copier{ch: make(chan copyReq, maxCopyBatch), done: make(chan struct{}), m: m, slots: slots}
	go c.run()
	return c
}

func (c *copier) add(mv source.Move, ev Settled) { c.ch <- copyReq{move: mv, ev: ev} }

// close writes and reports the queued moves and stops the copier (nil: nothing to do).
func (c *copier) close() {
	if c == nil {
		return
	}
	close(c.ch)
	<-c.done
}

func (c *copier) run() {
	defer close(c.done)
	reqs := make([]copyReq, 0, 64)
	var moves []source.Move
	linger := newLinger(c.m, true)
	for req := range c.ch {
		reqs = gatherLingering(linger, c.ch, append(reqs[:0], req), maxCopyBatch)
		moves = c.m.writeMoves(reqs, moves)
		for range reqs {
			<-c.slots
		}
		clear(reqs)
	}
}

// writeMoves writes reqs' moves in one Moves call and reports each settlement with its
// own error. moves is scratch space, returned for the next call.
func (m *mount) writeMoves(reqs []copyReq, moves []source.Move) []source.Move {
	moves = moves[:0]
	for _, r := range reqs {
		moves = append(moves, r.move)
	}
	ctx := m.writes.get()
	errs := m.transport.Moves(ctx, moves)
	for i, r := range reqs {
		r.ev.Err = answer(errs, i)
		m.settled(ctx, r.move.Delivery, r.ev)
	}
	clear(moves)
	return moves
}

// dueCopies writes a mount's in-process delays as they come due, for a transport that
// writes many moves in one call (Info.BatchesMoves): the copies due meanwhile go
// together, at most maxDueBatch per call, on one goroutine at a time that ends once none
// is left (Run waits for it, as for any delayed write), so that thousands coming due
// together are not written one round trip each.
type dueCopies struct {
	m *mount

	mu      sync.Mutex
	queue   []copyReq
	running bool
}

// maxDueBatch bounds the due copies one Moves call carries: more than a
// handler's copies (maxCopyBatch), as a burst of delays comes due all at once, and one
// call's script still holds Redis for only a millisecond or two.
const maxDueBatch = 512

// newDueCopies returns the mount's writer of due copies, or nil when its transport
// writes moves one at a time.
func newDueCopies(m *mount) *dueCopies {
	if !m.info.BatchesMoves {
		return nil
	}
	return &dueCopies{m: m}
}

// add queues a due copy (it never blocks: the delay queue's loop calls it).
func (w *dueCopies) add(req copyReq) {
	w.mu.Lock()
	w.queue = append(w.queue, req)
	start := !w.running
	w.running = true
	w.mu.Unlock()
	if start {
		w.m.eng.goDelayed(w.write)
	}
}

// write writes and reports the queued copies until none is left.
func (w *dueCopies) write() {
	var moves []source.Move
	for {
		w.mu.Lock()
		n := min(len(w.queue), maxDueBatch)
		if n == 0 {
			w.queue, w.running = nil, false
			w.mu.Unlock()
			return
		}
		reqs := slices.Clone(w.queue[:n])
		clear(w.queue[:n])
		w.queue = w.queue[n:]
		w.mu.Unlock()
		moves = w.m.writeMoves(reqs, moves)
	}
}

// writeContexts hands out the contexts of a mount's settlement writes other than acks
// (the acker bounds each batch of its own): the run context's values, no cancellation,
// a deadline settleTimeout away, give or take a second. The writes that start within a
// second share one context, which its own timer ends at its deadline, rather than a
// context and a timer for every write.
type writeContexts struct {
	base context.Context

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc // not called: writes may still use ctx until its deadline ends it
	until  time.Time          // when ctx stops being handed out
}

// get returns the context of a write starting now.
func (w *writeContexts) get() context.Context {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil || !now.Before(w.until) {
		w.ctx, w.cancel = context.WithDeadline(w.base, now.Add(settleTimeout))
		w.until = now.Add(time.Second)
	}
	return w.ctx
}
