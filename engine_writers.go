package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
		w.m.eng.delayed.Go(w.write)
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

// apply carries out a settlement: a completion goes to the batched acker, any other to
// the transport's Moves (see move), an in-process delay to the delay queue. It reports
// whether the delivery's move was queued to the copier, which then frees its slot.
// ctx is the delivery's, start when its handler began (zero: it did not run).
func (m *mount) apply(ctx context.Context, d *source.Delivery, o Outcome, s settlement, acks *acker, delays *timerq.Queue, start time.Time) (queued bool) {
	ev := m.event(ctx, d, o, s.Action, start)
	switch s.Action {
	case ActionAck:
		m.logSettlement(ctx, slog.LevelDebug, "settle: ack", d, o, s)
		acks.add(d, ev)
		return false
	case ActionDrop, ActionReject:
		m.logSettlement(ctx, slog.LevelWarn, "settle: "+s.Reason, d, o, s, slog.Any(attrError, o.Err))
		acks.add(d, ev)
		return false
	case ActionLose:
		// Warned once per mount, counted every time (reported again when the mount stops).
		n := m.lost.Add(1)
		m.warnOnce(ctx, "lose", "settle: "+s.Reason+"; declare MaxAttempts to retry with a copy (warned once per mount; every loss is counted)",
			settlementAttrs(d, o, s, slog.Any(attrError, o.Err))...)
		m.logSettlement(ctx, slog.LevelDebug, "settle: "+s.Reason, d, o, s, slog.Int64("lost", n), slog.Any(attrError, o.Err))
		acks.add(d, ev)
		return false
	case ActionLeave:
		if o.Kind == OutcomeRetryAfter && o.Delay != s.Delay {
			m.warnOnce(ctx, "delay-min-idle", "settle: a claiming stream keeps delays as its min-idle: RetryAfter delays are rounded to it (use a DurableZset to keep each delay as asked); logged once per mount",
				slog.Duration(attrDelay, o.Delay), slog.Duration("min_idle", s.Delay))
		}
		m.logSettlement(ctx, slog.LevelInfo, "settle: retry: left pending", d, o, s, slog.Duration(attrDelay, s.Delay), slog.Any(attrError, o.Err))
		ev.Delay = s.Delay
		return m.move(source.Move{Action: source.ActionLeave, Delivery: d}, ev)
	case ActionPutBack:
		m.logSettlement(ctx, slog.LevelInfo, "settle: retry: put back", d, o, s, slog.Any(attrError, o.Err))
		return m.move(source.Move{Action: source.ActionPutBack, Delivery: d, Err: errorText(o.Err), Headers: m.putBackHeaders(ev, d)}, ev)
	case ActionCopy:
		if o.Kind == OutcomeRetryAfter {
			// The asked delay could not be kept (see delayRefusal): say why, loudly.
			m.logSettlement(ctx, slog.LevelWarn, "settle: "+s.Reason, d, o, s, slog.Duration(attrDelay, o.Delay), slog.Any(attrError, o.Err))
		} else {
			m.logSettlement(ctx, slog.LevelInfo, "settle: retry", d, o, s, slog.Any(attrError, o.Err))
		}
		return m.move(source.Move{Action: source.ActionCopy, Delivery: d, Err: errorText(o.Err), Headers: m.moveHeaders(ev, d, withRetryCount(d.Headers, d.Attempt))}, ev)
	case ActionPark:
		m.logSettlement(ctx, slog.LevelInfo, "settle: retry after delay", d, o, s, slog.Duration(attrDelay, s.Delay), slog.Any(attrError, o.Err))
		ev.Delay = s.Delay
		if m.info.Caps.Parks {
			return m.move(source.Move{Action: source.ActionPark, Delay: s.Delay, Delivery: d, Err: errorText(o.Err), Headers: m.moveHeaders(ev, d, withRetryCount(d.Headers, d.Attempt))}, ev)
		}
		// Reported once scheduled, so a test may advance its clock right after seeing it.
		m.scheduleCopy(d, ev, s.Delay, delays)
		m.settled(m.writes.get(), d, ev)
		return false
	default: // ActionDeadLetter
		m.logSettlement(ctx, slog.LevelWarn, "settle: dead letter: "+s.Reason, d, o, s, slog.String("dead_letter", m.policy.DeadLetter), slog.Any(attrError, o.Err))
		return m.move(source.Move{Action: source.ActionDeadLetter, Delivery: d, Dest: m.policy.DeadLetter, Err: errorText(o.Err), Headers: m.moveHeaders(ev, d, deadLetterHeaders(d, s, o.Err, m.eng.clock.Now()))}, ev)
	}
}

// move applies one move: queued to the mount's copier when its transport writes moves
// in batches (the copier reports it and frees the delivery's slot once it is written),
// else written now, from the handler's goroutine, so the writes of concurrent handlers
// stay concurrent.
func (m *mount) move(mv source.Move, ev Settled) (queued bool) {
	if m.copies != nil {
		m.copies.add(mv, ev)
		return true
	}
	ctx := m.writes.get()
	ev.Err = answer(m.transport.Moves(ctx, []source.Move{mv}), 0)
	m.settled(ctx, mv.Delivery, ev)
	return false
}

// scheduleCopy keeps an in-process delay: the original stays unsettled until the copy
// is written. Copies coming due go to the mount's writer of due copies, which writes
// those due meanwhile together; without one (a transport that writes moves one at a
// time), each is written on its own goroutine, so many coming due at once are written
// concurrently. Run waits for every one before returning.
func (m *mount) scheduleCopy(d *source.Delivery, ev Settled, delay time.Duration, delays *timerq.Queue) {
	// A delivery may share its memory with the rest of its read (see
	// streamTransport.deliveries): keep a copy of its own while it waits.
	held := *d
	d = &held
	ev.Due = true // the Move hook sees a park kept in-process
	mv := source.Move{Action: source.ActionCopy, Delivery: d, Headers: m.moveHeaders(ev, d, withRetryCount(d.Headers, d.Attempt))}
	ev.Action = ActionCopy
	var due time.Time
	if m.eng.observed() {
		due = m.eng.clock.Now().Add(delay)
	}
	if w := m.due; w != nil {
		delays.Schedule(delay, func() { w.add(copyReq{move: mv, ev: m.cameDue(ev, due)}) })
		return
	}
	delays.Schedule(delay, func() {
		m.eng.delayed.Go(func() {
			ctx := m.writes.get()
			ev := m.cameDue(ev, due)
			ev.Err = answer(m.transport.Moves(ctx, []source.Move{mv}), 0)
			m.settled(ctx, d, ev)
		})
	})
}

// cameDue returns the report of an in-process delayed copy due at due, whose write
// starts now: how late it is, and its settlement timed from now.
func (m *mount) cameDue(ev Settled, due time.Time) Settled {
	if !due.IsZero() {
		ev.handled = m.eng.clock.Now()
		ev.Late = max(ev.handled.Sub(due), 0)
		ev.HandlerDuration = 0
	}
	return ev
}

// worker is one handler goroutine's state, as the mount's watchdog sees it: the delivery
// its handler runs, since when, and the context it runs under. The context is made once
// and kept from one delivery to the next, until a timeout cancels it.
type worker struct {
	parent context.Context

	mu       sync.Mutex
	attrs    logAttrs // what the handler added to settle's lines (AddLogAttrs)
	cancel   context.CancelCauseFunc
	ctx      context.Context
	d        *source.Delivery // the delivery running; nil between deliveries
	dctx     context.Context  // d's context as the Delivery hook returned it; nil without one
	start    time.Time
	timedOut bool // the watchdog settled d
	watch    *watchdog
}

// observe keeps ctx, the running delivery's context as the Delivery hook returned it,
// for the watchdog's settlement at its timeout.
func (w *worker) observe(ctx context.Context) {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.dctx = ctx
	w.mu.Unlock()
}

// begin marks d running from now and returns the context to run its handler under.
func (w *worker) begin(d *source.Delivery) context.Context {
	now := w.watch.m.eng.clock.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx == nil {
		w.ctx, w.cancel = context.WithCancelCause(context.WithValue(w.parent, logAttrsKey{}, &w.attrs))
	}
	w.attrs.reset()
	w.d, w.dctx, w.start, w.timedOut = d, nil, now, false
	return w.ctx
}

// end marks the delivery done and reports whether it is still the worker's to settle
// (false: the watchdog settled it at its timeout). A nil worker (tests of the engine's
// path alone) always settles.
func (w *worker) end() bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	timedOut := w.timedOut
	if timedOut {
		w.ctx = nil // cancelled: the next delivery gets a new one
		w.watch.hung.Add(-1)
	}
	w.d, w.dctx, w.timedOut = nil, nil, false
	return !timedOut
}

// watchdog enforces a mount's Timeout: every tick it settles, as a failure, each
// delivery whose handler has run past the timeout, and cancels that handler's context
// with ErrHandlerTimeout.
type watchdog struct {
	acks   *acker
	delays *timerq.Queue
	done   chan struct{}
	m      *mount
	parent context.Context
	quit   chan struct{}
	slots  chan struct{}
	// hung counts the workers whose handler ran past its timeout and has not returned:
	// the read loop starts as many more, so that Concurrency handlers still run.
	hung atomic.Int32

	mu      sync.Mutex
	workers []*worker
}

// newWatchdog starts the mount's watchdog; stop ends it.
func newWatchdog(m *mount, parent context.Context, acks *acker, delays *timerq.Queue, slots chan struct{}) *watchdog {
	g := &watchdog{acks: acks, delays: delays, done: make(chan struct{}), m: m, parent: parent, quit: make(chan struct{}), slots: slots}
	first := m.eng.clock.NewTimer(g.tick()) // before any handler starts: a test's clock may move at once
	go g.run(first)
	return g
}

// tick is how often the watchdog looks: a quarter of the timeout, between 1ms and 1s.
func (g *watchdog) tick() time.Duration {
	return min(max(g.m.cfg.timeout/4, time.Millisecond), time.Second)
}

// worker returns the state of a new worker, watched from now on.
func (g *watchdog) worker() *worker {
	w := &worker{parent: g.parent, watch: g}
	g.mu.Lock()
	g.workers = append(g.workers, w)
	g.mu.Unlock()
	return w
}

func (g *watchdog) stop() {
	close(g.quit)
	<-g.done
}

func (g *watchdog) run(t Timer) {
	defer close(g.done)
	for {
		select {
		case <-g.quit:
			t.Stop()
			return
		case <-t.C():
		}
		g.check(g.m.eng.clock.Now(), g.m.cfg.timeout)
		t = g.m.eng.clock.NewTimer(g.tick())
	}
}

// check settles the deliveries running past timeout at now.
func (g *watchdog) check(now time.Time, timeout time.Duration) {
	g.mu.Lock()
	workers := g.workers
	g.mu.Unlock()
	for _, w := range workers {
		w.mu.Lock()
		d, dctx, start := w.d, w.dctx, w.start
		expired := d != nil && !w.timedOut && now.Sub(w.start) >= timeout
		if expired {
			w.timedOut = true
			w.cancel(ErrHandlerTimeout)
			g.hung.Add(1)
		}
		w.mu.Unlock()
		if expired {
			if dctx == nil {
				dctx = context.WithValue(g.parent, logAttrsKey{}, &w.attrs)
			}
			g.settle(dctx, d, timeout, start)
		}
	}
}

// settle settles d, whose handler ran past timeout, as a failed delivery.
// ctx is the delivery's, start when its handler began.
func (g *watchdog) settle(ctx context.Context, d *source.Delivery, timeout time.Duration, start time.Time) {
	m := g.m
	err := fmt.Errorf("%w (%s)", ErrHandlerTimeout, timeout)
	m.logger.WarnContext(g.parent, "settle: a handler ran past its timeout: its delivery is settled as a failure",
		slog.String(attrMsgID, d.ID), slog.Duration("timeout", timeout))
	o := Outcome{Kind: OutcomeRetry, Err: err, Delay: m.backoff(d.Attempt, err)}
	if !m.eng.observed() {
		start = time.Time{}
	}
	if !m.apply(ctx, d, o, decide(o, d.Attempt, m.policy, m.info.Caps), g.acks, g.delays, start) {
		<-g.slots // else the copier frees it once the move is written
	}
}
