package settle

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// A settlement is applied (apply) through batched writers, so that a handler's worker
// does not wait for its write's round trip: the acker (every completion), the copier
// (every move, for a transport that writes many in one call) and the writer of due
// in-process delays. Each reports every settlement with its own error once written. The
// watchdog settles, as failures, the deliveries whose handler ran past its timeout. A
// settlement whose write failed is kept (failedSettles) and written again when its
// message comes back.

// acker batches acks: one transport Ack call for all the acks waiting.
type acker struct {
	base    context.Context
	q       *writeQueue[ackReq]
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
	k := &acker{base: base, q: newWriteQueue[ackReq](m, false, maxAckBatch), done: make(chan struct{}), m: m}
	go k.run()
	return k
}

func (k *acker) add(d *source.Delivery, ev Settled) {
	k.pending.Add(1)
	k.q.add(ackReq{d: d, ev: ev})
}

// close flushes waiting acks and stops the acker.
func (k *acker) close() {
	k.q.close()
	<-k.done
}

func (k *acker) run() {
	defer close(k.done)
	var reqs []ackReq
	ds := make([]*source.Delivery, 0, 64)
	timer := newLingerTimer()
	for {
		var ok bool
		if reqs, ok = k.q.next(reqs, timer); !ok {
			return
		}
		ds = ds[:0]
		for _, r := range reqs {
			ds = append(ds, r.d)
		}
		ctx, cancel := context.WithTimeout(k.base, settleTimeout)
		k.m.settling.RLock()
		err := k.m.transport.Ack(ctx, ds)
		written := k.m.writtenAt()
		for i, r := range reqs {
			r.ev.Err, r.ev.written = source.AckError(err, i), written
			k.m.settled(ctx, r.d, r.ev)
		}
		k.m.settling.RUnlock()
		k.pending.Add(-int64(len(reqs)))
		cancel()
		clear(ds)
	}
}

// writeLinger is how long a batched writer waits for more requests while other
// deliveries are in flight (they will settle soon): one handler acking as fast as it
// runs would otherwise cost a round trip per few messages.
const writeLinger = time.Millisecond

// writeQueue gathers a batched writer's requests (the acker's, the copier's): what
// handlers queue while the last batch is written, and, while the mount holds other
// deliveries (they will settle soon), what comes within writeLinger of the first.
//
// A handler's worker appends under a lock and wakes the writer only for the first
// request of a batch, a full batch, or the last delivery held: a channel send per
// request woke the lingering writer for each one (a goroutine switch per message, the
// largest cost of the ack path). At most max requests wait: an add beyond blocks until
// the writer takes them, as a full channel would.
type writeQueue[T any] struct {
	m *mount
	// holds: the requests hold their deliveries' slots until written (moves), so the
	// batch's own deliveries are among those held; an ack's slot is freed when queued.
	holds bool
	max   int
	kick  chan struct{} // one wake-up waiting at most
	stop  chan struct{} // closed by close: wakes every writer

	mu     sync.Mutex
	room   sync.Cond // adds wait on it while max requests wait; L is &mu
	buf    []T
	now    bool // write without lingering: an add saw nothing else held
	closed bool
}

func newWriteQueue[T any](m *mount, holds bool, max int) *writeQueue[T] {
	q := &writeQueue[T]{m: m, holds: holds, max: max, kick: make(chan struct{}, 1), stop: make(chan struct{}), buf: make([]T, 0, 64)}
	q.room.L = &q.mu
	return q
}

// add queues v, waking the writer when v starts a batch, fills one, or is the last
// delivery the mount holds (nothing else will come to linger for).
func (q *writeQueue[T]) add(v T) {
	q.mu.Lock()
	for len(q.buf) >= q.max && !q.closed {
		q.room.Wait()
	}
	q.buf = append(q.buf, v)
	n := len(q.buf)
	// The adding delivery's slot is still held here, an ack's as a move's.
	others := q.m.held() - 1
	if q.holds {
		others = q.m.held() - n
	}
	wake := n == 1 || n >= q.max || others <= 0
	if others <= 0 {
		q.now = true
	}
	q.mu.Unlock()
	if wake {
		select {
		case q.kick <- struct{}{}:
		default: // a wake-up is waiting already: the writer looks again when it takes it
		}
	}
}

// waiting is how many requests wait for the writer to take them.
func (q *writeQueue[T]) waiting() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// close lets the writer take what waits without lingering, then end.
func (q *writeQueue[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.room.Broadcast()
	q.mu.Unlock()
	close(q.stop)
}

// ready reports whether the waiting requests are to be written now. q.mu is held.
func (q *writeQueue[T]) ready() bool {
	if q.now || q.closed || len(q.buf) >= q.max {
		return true
	}
	if q.holds {
		return q.m.held()-len(q.buf) <= 0
	}
	return q.m.held() <= 0
}

// newLingerTimer returns a stopped timer for a writer's calls of next.
func newLingerTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// next waits for the next batch and returns it, in spare's storage (the last batch,
// given back: its elements are cleared); false once the queue is closed and empty.
// timer is the calling writer's own (newLingerTimer).
func (q *writeQueue[T]) next(spare []T, timer *time.Timer) ([]T, bool) {
	clear(spare)
	spare = spare[:0]
	for {
		// Wait for a first request.
		q.mu.Lock()
		for len(q.buf) == 0 && !q.closed {
			q.mu.Unlock()
			select {
			case <-q.kick:
			case <-q.stop:
			}
			q.mu.Lock()
		}
		// Linger while the mount holds other deliveries (real time: it only bounds a
		// write's latency).
		if !q.ready() {
			q.mu.Unlock()
			timer.Reset(writeLinger)
		linger:
			for {
				select {
				case <-q.kick:
					q.mu.Lock()
					ready := q.ready()
					q.mu.Unlock()
					if ready {
						break linger
					}
				case <-timer.C:
					break linger
				case <-q.stop:
					break linger
				}
			}
			timer.Stop()
			q.mu.Lock()
		}
		if len(q.buf) == 0 {
			// Another writer took them meanwhile.
			closed := q.closed
			q.mu.Unlock()
			if closed {
				return spare, false
			}
			continue
		}
		batch := q.buf
		q.buf, q.now = spare, false
		q.room.Broadcast()
		q.mu.Unlock()
		return batch, true
	}
}

// writtenAt is when a batched write returned, for the settle durations of its
// settlements (one clock read per batch); zero when no hook reads them.
func (m *mount) writtenAt() time.Time {
	if !m.eng.observed() {
		return time.Time{}
	}
	return m.eng.clock.Now()
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

// copyWriters is how many Moves calls a copier has out at once: while one batch is
// written, the next gathers and goes, so that the server is not idle for a round trip
// and a client's decoding between two batches.
const copyWriters = 3

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
	q     *writeQueue[copyReq]
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
	c := &copier{q: newWriteQueue[copyReq](m, true, maxCopyBatch), done: make(chan struct{}), m: m, slots: slots}
	var wg sync.WaitGroup
	for range copyWriters {
		wg.Go(c.run)
	}
	go func() {
		wg.Wait()
		close(c.done)
	}()
	return c
}

func (c *copier) add(mv source.Move, ev Settled) { c.q.add(copyReq{move: mv, ev: ev}) }

// close writes and reports the queued moves and stops the copier (nil: nothing to do).
func (c *copier) close() {
	if c == nil {
		return
	}
	c.q.close()
	<-c.done
}

func (c *copier) run() {
	var reqs []copyReq
	var moves []source.Move
	timer := newLingerTimer()
	for {
		var ok bool
		if reqs, ok = c.q.next(reqs, timer); !ok {
			return
		}
		moves = c.m.writeMoves(reqs, moves)
		for range reqs {
			<-c.slots
		}
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
	m.settling.RLock()
	errs := m.transport.Moves(ctx, moves)
	written := m.writtenAt()
	for i, r := range reqs {
		r.ev.Err, r.ev.written = answer(errs, i), written
		m.settled(ctx, r.move.Delivery, r.ev)
	}
	m.settling.RUnlock()
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
	m    map[string]*failedSettle
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
		f.m = map[string]*failedSettle{}
	}
	ev.ctx = nil // not kept past its delivery
	r := &failedSettle{ev: ev, n: 1}
	if last := f.m[id]; last != nil {
		r.n = last.n + 1
	}
	f.m[id] = r
	f.size.Store(int64(len(f.m)))
	return r.n
}

// get returns the failed settlement of d, or nil (not copied: every delivery asks).
func (f *failedSettles) get(d *source.Delivery) *failedSettle {
	if f.size.Load() == 0 {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[d.ID]
}

// count returns how many times the settlement of d failed.
func (f *failedSettles) count(d *source.Delivery) int {
	if r := f.get(d); r != nil {
		return r.n
	}
	return 0
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

// settlingBarrier returns once every settlement write begun before it has recorded its
// failures (mount.settling). The read loop calls it before it hands out a delivery read
// again (Redelivered): a transport re-reads an entry whose write failed as soon as the
// write fails (a stream, its own pending entries), before the engine has recorded the
// failure, and without the barrier that delivery could reach a worker first and run its
// handler again instead of its settlement being written again.
func (m *mount) settlingBarrier(ds []*source.Delivery) {
	for _, d := range ds {
		if d.Redelivered {
			m.settling.Lock()
			m.settling.Unlock() //nolint:staticcheck // an empty section: a barrier
			return
		}
	}
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
func (m *mount) settleAgain(ctx context.Context, d *source.Delivery, f *failedSettle, acks *acker, delays *timerq.Queue, w *worker) (queued, done bool) {
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
	if m.dedup != nil && !f.ev.Deduplicated && (f.ev.Action == ActionAck || f.ev.Action == ActionReply) {
		again.DedupKey, _ = dedupKeyOf(m.cfg.dedupe.key, m.message(&again)) // the mark goes with the ack written again
	}
	ctx = m.started(ctx, d, nil)
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
