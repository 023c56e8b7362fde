package settle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// workQueue hands a mount's deliveries to its workers: goroutines that live on from one
// delivery to the next, at most Concurrency of them, started as needed and ended by
// close once the queue is empty.
//
// A queued delivery always finds a worker: each delivery holds a slot until it is
// handled and the read loop starts a worker per slot held, so while one is queued some
// worker is idle, searching or about to come back for it. A worker that finishes its
// handler takes the next queued delivery without parking.
//
// Workers are woken one at a time, as Go's scheduler wakes its spinning threads: a push
// wakes one idle worker when none is already searching (woken and not yet holding a
// delivery), and a worker that takes a delivery and leaves more queued wakes the next
// one before it runs its handler. When handlers block, the wake-ups chain through the
// queue and every delivery starts at once; when they are quick, the few workers awake
// take the batch between them and the rest stay parked. A channel send per delivery
// woke a parked worker for every one (a goroutine switch, a scheduler wake-up and its
// lock), the largest cost of draining a stream after go-redis's reply parsing.
type workQueue struct {
	mu        sync.Mutex
	wake      sync.Cond          // idle workers wait on it; L is &mu
	buf       []*source.Delivery // a ring: n deliveries from head
	head, n   int
	idle      int  // workers waiting on wake that no one woke yet
	searching int  // workers woken (or started) that have not taken a delivery yet
	started   int  // workers started
	closed    bool // no more pushes: workers end once the queue is empty
}

func newWorkQueue(size int) *workQueue {
	q := &workQueue{buf: make([]*source.Delivery, max(size, 1))}
	q.wake.L = &q.mu
	return q
}

// push queues ds, first starting workers (on wg, each running the handle that start
// gives it on the deliveries it takes) until there are at least want, and wakes a
// worker if none is searching.
func (q *workQueue) push(ds []*source.Delivery, want int, wg *sync.WaitGroup, start func() func(*source.Delivery)) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.started < want {
		q.started++
		q.searching++ // a new worker looks at the queue first thing
		wg.Go(func() { q.work(start()) })
	}
	for _, d := range ds {
		if q.n == len(q.buf) {
			q.grow()
		}
		q.buf[(q.head+q.n)%len(q.buf)] = d
		q.n++
	}
	q.wakeIfNoneSearching()
}

// grow doubles the ring. The read loop queues no more deliveries than its slots, the
// ring's size, so this is only a safeguard.
func (q *workQueue) grow() {
	buf := make([]*source.Delivery, 2*len(q.buf))
	for i := range q.n {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// wakeIfNoneSearching wakes an idle worker for the queued deliveries unless one is
// already searching. q.mu is held.
func (q *workQueue) wakeIfNoneSearching() {
	if q.n > 0 && q.searching == 0 && q.idle > 0 {
		q.idle--
		q.searching++
		q.wake.Signal()
	}
}

// takeQueued removes and returns the deliveries no worker has taken yet.
func (q *workQueue) takeQueued() []*source.Delivery {
	q.mu.Lock()
	defer q.mu.Unlock()
	ds := make([]*source.Delivery, 0, q.n)
	for range q.n {
		ds = append(ds, q.buf[q.head])
		q.buf[q.head] = nil
		q.head = (q.head + 1) % len(q.buf)
	}
	q.n = 0
	return ds
}

// close lets the workers end once they have taken every queued delivery.
func (q *workQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.searching += q.idle
	q.idle = 0
	q.wake.Broadcast()
	q.mu.Unlock()
}

// work is one worker: it takes deliveries until the queue is closed and empty.
func (q *workQueue) work(handle func(*source.Delivery)) {
	q.mu.Lock()
	searching := true // counted by push
	for {
		if q.n > 0 {
			d := q.buf[q.head]
			q.buf[q.head] = nil
			q.head = (q.head + 1) % len(q.buf)
			q.n--
			if searching {
				q.searching--
				searching = false
			}
			q.wakeIfNoneSearching()
			q.mu.Unlock()
			handle(d)
			q.mu.Lock()
			continue
		}
		if searching {
			q.searching--
		}
		if q.closed {
			q.mu.Unlock()
			return
		}
		q.idle++
		q.wake.Wait()
		searching = true // counted by whoever woke it
	}
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

// began returns when begin marked the running delivery started (zero for a nil
// worker): its handler's start too when nothing waited between, one clock read per
// delivery instead of two.
func (w *worker) began() time.Time {
	if w == nil {
		return time.Time{}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.start
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
