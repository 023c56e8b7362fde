package settle

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/settlekit/settle/internal/flow"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// Only the killer pays for a crash. A crash-counting transport charges a crash to every
// delivery the dead process held, having no record of which one was running; a message
// that kills its process would take whatever it is held beside to the cap with it, crash
// after crash. So a delivery taken over from a consumer that never settled it
// (source.Delivery.TakenOver: the one that may have killed it) runs alone: the read
// loop hands the rest of its read to the workers, waits until the mount holds nothing
// but the taken-over deliveries (every other delivery handled and its settlement
// written), runs them one at a time, each once the last has settled, and reads nothing
// meanwhile. A transport hands over one such delivery at a time. A message that kills
// its process then dies alone each time and reaches the cap and the dead letter; what
// was held beside it at its first crash pays that one attempt (nothing says which of the
// dead process's deliveries ran), and no other.

// aloneTick is how often the read loop looks whether the mount holds nothing else yet,
// while a taken-over delivery waits to run alone (real time: a rare path, and slots
// freed in many places signal nothing).
const aloneTick = time.Millisecond

// pushAlone hands ds, one read, to the workers with push: the deliveries not taken over
// at once, then each taken-over one alone (see the comment atop this file). It returns
// once the last of them has settled, or at once when ctx ends (what it has not run is
// queued, for the stop to hand back or run).
func (m *mount) pushAlone(ctx context.Context, ds []*source.Delivery, acks *acker, push func([]*source.Delivery)) {
	var taken []*source.Delivery
	rest := ds[:0:0]
	for _, d := range ds {
		if d.TakenOver && m.failures.count(d) > 0 {
			// Its last delivery was here and ended in a failed settlement write, not a
			// crash: nothing to charge alone (a claiming stream claims such an entry back).
			d.TakenOver = false
		}
		if d.TakenOver {
			taken = append(taken, d)
		} else {
			rest = append(rest, d)
		}
	}
	if len(taken) == 0 {
		push(ds)
		return
	}
	if m.order.sharesKey(rest, taken) {
		// Ordered: what shares a key with a taken-over delivery was read after it and
		// must follow it, yet would hold its room while the taken-over one waited for the
		// mount to hold nothing else: the read runs in read order instead, not alone.
		push(ds)
		return
	}
	if len(rest) > 0 {
		push(rest)
	}
	// No read ahead pushes anything until the last taken-over delivery has settled.
	m.ahead.standDown(&m.ahead.alone)
	defer m.ahead.alone.Store(false)
	for i, d := range taken {
		// The taken-over deliveries still to run hold their slots; nothing else may.
		if !m.waitHolding(ctx, len(taken)-i, acks) {
			push(taken[i:])
			return
		}
		push([]*source.Delivery{d})
	}
	m.waitHolding(ctx, 0, acks)
}

// waitHolding waits until the mount holds only n deliveries and no ack waits to be
// written; false if ctx ended first.
func (m *mount) waitHolding(ctx context.Context, n int, acks *acker) bool {
	if m.held() <= n && acks.pending.Load() == 0 {
		return true
	}
	tick := time.NewTicker(aloneTick)
	defer tick.Stop()
	for m.held() > n || acks.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// run reads and handles the mount's deliveries until ctx is cancelled, then
// drains: in-flight handlers finish (or are cancelled after the drain timeout) and are
// settled before it returns.
func (m *mount) run(ctx context.Context, delays *timerq.Queue) {
	if m.policy.MaxAttempts == 0 && m.policy.DeadLetter == "" {
		m.logger.WarnContext(ctx, "settle: the mount declares neither MaxAttempts nor DeadLetter: a message that keeps failing is retried without end (after its backoff)")
	}
	handlerCtx, cancelHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelHandlers(nil)
	m.writes.base = context.WithoutCancel(ctx)
	var inflight sync.WaitGroup
	// A slot is a delivery held: running, or read and waiting for a worker. Reads wait
	// until a full one fits, so that the read size does not shrink to the free handlers.
	capacity := m.cfg.concurrency + m.prefetch()
	slots := make(chan struct{}, capacity)
	m.slots = slots
	acks := newAcker(context.WithoutCancel(ctx), m)
	m.copies = newCopier(m, slots)
	m.due = newDueCopies(m)
	m.probed.Store(&probeState{acks: acks, slots: slots})
	readSize := min(max(m.info.Batch, 1), capacity)
	readCtx := context.WithoutCancel(ctx)
	// Deliveries go to workers that live on from one delivery to the next (see
	// workQueue), at most Concurrency of them: a goroutine per delivery would grow a new
	// stack for nearly every one.
	work := newWorkQueue(capacity)
	watch := newWatchdog(m, handlerCtx, acks, delays, slots)
	startWorker := func() func(*source.Delivery) {
		w := watch.worker()
		return func(d *source.Delivery) {
			if n := m.failures.count(d); n > 0 {
				waitAfterFailedSettlements(handlerCtx, n) // before the handler's timeout starts
			}
			if !m.handle(w.begin(d), d, acks, delays, w) {
				<-slots // else the copier (or the watchdog) frees it
			}
		}
	}
	push := func(ds []*source.Delivery) {
		work.push(ds, min(len(slots), m.cfg.concurrency)+int(watch.hung.Load()), &inflight, startWorker)
	}
	var gate *flow.Gate
	if len(m.cfg.limits) > 0 {
		gate = m.newGate(ctx, func(d *source.Delivery) bool {
			// A waiting delivery that may try again takes a slot as a read would.
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return false
			}
			push([]*source.Delivery{d})
			return true
		})
		m.gate.Store(gate)
	}
	aheadDone := m.startReadsAhead(ctx, readCtx, slots, readSize, push)
	feed := push // what a read hands to the workers
	if m.cfg.ordered {
		m.order = newOrdering(m, push)
		feed = m.order.admit
	}
	backoff, settleBackoff := time.Duration(0), time.Duration(0)
	var pause pauseState

	for ctx.Err() == nil {
		if m.paused(ctx, &pause) {
			// Paused from outside (see mount.paused): read nothing new; what the mount holds
			// runs and settles, heartbeats and leases go on, and a stop still drains. For a
			// TestProbe, a mount waiting here has read all it will.
			m.ahead.standDown(&m.ahead.paused)
			m.waitingPaused.Store(true)
			m.waitPaused(ctx)
			m.waitingPaused.Store(false)
			m.ahead.paused.Store(false)
			continue
		}
		if gate != nil && (!gate.Resumed(ctx) || !gate.Room(ctx)) {
			continue // what waits for its flow limits starts first, or fills the mount: read nothing new
		}
		size := m.readRoom(readSize)
		if size == 0 {
			// The payloads held fill PrefetchBytes: wait for some to settle.
			select {
			case <-time.After(roomTick):
			case <-ctx.Done():
			}
			continue
		}
		n := m.takeRoom(ctx, slots, size)
		if n < size && (m.order == nil || n == 0 || ctx.Err() != nil) {
			for range n {
				<-slots
			}
			continue
		}
		if m.settleOK.Swap(false) {
			settleBackoff = 0
		}
		if m.settleFailed.Swap(false) {
			// A failed settlement leaves its delivery to be read again at once: without a
			// pause, a write that keeps failing (a dead-letter key of the wrong type, a
			// server refusing writes) would run the handler again thousands of times a
			// second.
			for range n {
				<-slots
			}
			settleBackoff = nextBackoff(settleBackoff)
			select {
			case <-time.After(settleBackoff):
			case <-ctx.Done():
			}
			continue
		}
		m.reading.Add(int64(n)) // the read's room is taken, not held (see held)
		read := m.readsBegun.Add(1)
		ds, err := m.transport.Fetch(readCtx, n, m.blockBound())
		if err == nil {
			m.notePayloads(ds)
			m.delivered.Add(uint64(len(ds)))
			if len(ds) == 0 {
				m.lastEmpty.Store(read)
			}
		}
		// The room a read did not fill is freed after the read stops counting as one, so
		// that held never counts less than the mount holds (TestProbe relies on it).
		m.reading.Add(-int64(n))
		for i := len(ds); i < n; i++ {
			<-slots
		}
		if err != nil {
			backoff = nextBackoff(backoff)
			m.logger.ErrorContext(ctx, "settle: read failed; retrying", slog.Any(attrError, err), slog.Duration("backoff", backoff))
			m.emit(ctx, source.Event{Kind: string(EventReadFailed), Err: err})
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			continue
		}
		backoff = 0
		m.settlingBarrier(ds) // a re-read delivery whose write just failed: the failure is recorded first
		if len(ds) > 0 && m.settleFailed.Swap(false) {
			// A settlement failed while this read was out (the read does not wait for
			// settlement writes), so the read may hold its delivery again: pause first.
			settleBackoff = nextBackoff(settleBackoff)
			select {
			case <-time.After(settleBackoff):
			case <-ctx.Done():
			}
		}
		// Every delivery holds a slot until it is handled: with a worker per slot held (up
		// to Concurrency), a delivery queued here always finds a worker to take it.
		if len(ds) > 0 {
			m.pushAlone(ctx, ds, acks, feed)
		}
		if len(ds) == n {
			m.ahead.wakeAll() // a full read, pushed: more is likely waiting
		}
	}
	aheadDone()
	var waiting []*source.Delivery
	if gate != nil {
		waiting = gate.Stop(m.writes.get()) // no delivery is pushed once it returns
	}
	if m.order != nil {
		// What waits behind its key never ran: handed back. A retry waiting in place
		// ran: its entry stays pending, read again by the key's next reader.
		behind, again := m.order.stop()
		waiting = append(waiting, behind...)
		for range again {
			<-slots
		}
	}
	if m.info.Caps.Releases {
		m.release(ctx, append(work.takeQueued(), waiting...))
	}
	work.close()

	drained := make(chan struct{})
	go func() { inflight.Wait(); close(drained) }()
	t := m.eng.clock.NewTimer(m.eng.drainTimeout)
	select {
	case <-drained:
	case <-t.C():
		m.logger.WarnContext(ctx, "settle: drain timeout passed; cancelling handlers", slog.Duration("drain_timeout", m.eng.drainTimeout))
		cancelHandlers(ErrDrainTimeout)
		<-drained
	}
	t.Stop()
	if gate != nil {
		gate.Close() // no handler runs: the slots' leases need no renewal
		if late := gate.TakeWaiting(m.writes.get()); len(late) > 0 && m.info.Caps.Releases {
			m.release(ctx, late) // refused by their limits while the mount stopped
		}
	}
	watch.stop()
	acks.close()
	m.copies.close()
	m.copies = nil
	if n := m.lost.Load(); n > 0 {
		m.logger.WarnContext(ctx, "settle: messages lost because their retry could not be honoured without an attempts cap", slog.Int64("lost", n))
	}
}

// release hands back, at a graceful stop, the deliveries read and never started, so
// that they wait for the next reader without having spent an attempt. One that cannot
// be handed back stays where the transport keeps it (pending, in the processing list,
// leased) and comes back as an unsettled delivery would.
func (m *mount) release(ctx context.Context, ds []*source.Delivery) {
	if len(ds) == 0 {
		return
	}
	ms := make([]source.Move, len(ds))
	for i, d := range ds {
		ms[i] = source.Move{Action: source.ActionRelease, Delivery: d}
	}
	failed := 0
	for i, err := range m.transport.Moves(m.writes.get(), ms) {
		if err != nil {
			failed++
			m.logger.WarnContext(ctx, "settle: shutdown: could not hand back a delivery that never started; it comes back as an unsettled one",
				slog.String(attrMsgID, ds[i].ID), slog.Any(attrError, err))
		}
	}
	m.logger.InfoContext(ctx, "settle: shutdown: handed back the deliveries that never started", slog.Int("count", len(ds)-failed))
}

// held is how many deliveries the mount holds now: running, waiting for a worker, or
// being settled (not the room a read in progress has taken).
func (m *mount) held() int {
	if m.slots == nil {
		return 0
	}
	return len(m.slots) - int(m.reading.Load())
}

// prefetch is how many deliveries the mount may hold read but not started: by default
// twice the source's Batch, eight times when the mount reads ahead (room for a read of
// its loop and readersAhead reads ahead beside the batches being handled and settled);
// readRoom bounds it by bytes.
func (m *mount) prefetch() int {
	if m.cfg.prefetchSet {
		return m.cfg.prefetch
	}
	if _, ok := m.aheadReader(); ok {
		return 8 * max(m.info.Batch, 1)
	}
	return 2 * max(m.info.Batch, 1)
}

// readRoom is the room the next read asks for: size, or less so that, at the mean
// payload size of recent reads, what the mount holds beside Concurrency stays within
// PrefetchBytes; 0 when nothing fits (the read waits; the Concurrency deliveries always
// fit). Reads in flight count as full.
func (m *mount) readRoom(size int) int {
	mean := m.payloadMean.Load()
	if mean <= 0 {
		return size
	}
	limit := m.cfg.prefetchBytes
	if !m.cfg.prefetchBytesSet {
		limit = DefaultPrefetchBytes
	}
	held := int64(len(m.slots))
	fit := int64(m.cfg.concurrency) + limit/mean - held
	return int(max(min(fit, int64(size)), 0))
}

// notePayloads folds the payload sizes of a read into the mount's mean (readRoom): a
// moving mean that weighs the last read a quarter.
func (m *mount) notePayloads(ds []*source.Delivery) {
	if len(ds) == 0 {
		return
	}
	var sum int64
	for _, d := range ds {
		sum += int64(len(d.Payload))
	}
	read := max(sum/int64(len(ds)), 1)
	if old := m.payloadMean.Load(); old > 0 {
		read = old + (read-old)/4
	}
	m.payloadMean.Store(max(read, 1))
}

// roomTick is how often a read that found no room for its bytes looks again (real
// time: only a mount of payloads large beside PrefetchBytes waits so).
const roomTick = time.Millisecond

// blockBound is how long one read may block: at most TestBlock under a TestProbe and
// a test clock (see TestConfig.Probe).
func (m *mount) blockBound() time.Duration {
	b := DefaultBlock
	if m.info.Block > 0 {
		b = m.info.Block
	}
	if m.eng.probe != nil && m.eng.testClock != nil {
		b = min(b, TestBlock)
	}
	return b
}

// pauseCheck is how often, at most, a mount asks its transport whether an operator
// paused it (on the App's clock, so a test's fake clock moves it): one command or
// statement per mount per period, never one per read.
const pauseCheck = time.Second

// pauseCheckTimeout bounds one check: a check that hangs must not hold the read loop.
const pauseCheckTimeout = 5 * time.Second

// pauseState is what a mount's read loop knows of its pause; only the read loop's
// goroutine touches it.
type pauseState struct {
	checked time.Time // when the transport was last asked (zero: never)
	paused  bool      // its last answer
	failing bool      // the last check failed (the failure streak was logged)
}

// paused reports whether the mount is paused, asking its transport when the last
// answer is pauseCheck old or more on the App's clock, and logging each change at Info
// and the first failure of a streak at Warn (a failed check keeps the last answer).
func (m *mount) paused(ctx context.Context, ps *pauseState) bool {
	now := m.eng.clock.Now()
	if !ps.checked.IsZero() && now.Sub(ps.checked) < pauseCheck {
		return ps.paused
	}
	ps.checked = now
	cctx, cancel := context.WithTimeout(ctx, pauseCheckTimeout)
	p, err := m.transport.Paused(cctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return ps.paused // the stop cut the check short: nothing to report
		}
		if !ps.failing {
			m.logger.WarnContext(ctx, "settle: could not check whether the mount is paused; keeping its last state until a check succeeds",
				slog.Bool("paused", ps.paused), slog.Any(attrError, err))
		}
		ps.failing = true
		return ps.paused
	}
	ps.failing = false
	if p != ps.paused {
		ps.paused = p
		if p {
			m.logger.InfoContext(ctx, "settle: paused: reading nothing new until resumed; what the mount holds settles")
		} else {
			m.logger.InfoContext(ctx, "settle: resumed")
		}
	}
	return p
}

// waitPaused waits one pause check period on the App's clock, or until ctx is done.
func (m *mount) waitPaused(ctx context.Context) {
	t := m.eng.clock.NewTimer(pauseCheck)
	defer t.Stop()
	select {
	case <-t.C():
	case <-ctx.Done():
	}
}

// readersAhead is how many goroutines of a mount read new messages ahead, beside its
// read loop, when its transport can (source.ReadAhead). The read-ahead bound (Prefetch)
// limits how many reads fit at once: at the defaults, four of a full Batch.
const readersAhead = 3

// readsAhead keeps a mount's server busy while work is there: one read loop reads
// everything (redeliveries, takeovers, due delays, the blocking wait for new work), and
// while its reads come back full, readers ahead read new messages beside it, each a
// round trip that never blocks, so that a read is always out while the last one is
// decoded and handed to the workers. Every read takes its full room first, one at a
// time (room), so that the reads' room never splits the slots between them with none
// complete; a read ahead stands down while the mount is paused or runs a taken-over
// delivery alone, and never pushes once the read loop has passed standDown.
type readsAhead struct {
	room  sync.Mutex    // one read takes its room at a time
	gate  sync.RWMutex  // held read-locked by a read ahead from its check to its push
	wake  chan struct{} // a full read asks the readers ahead to read
	out   atomic.Int32  // reads ahead out now: a TestProbe counts the mount busy
	alone atomic.Bool   // a taken-over delivery runs alone
	// paused: the mount is paused from outside.
	paused atomic.Bool
}

// standDown sets flag and returns once no read ahead that did not see it is out.
func (a *readsAhead) standDown(flag *atomic.Bool) {
	flag.Store(true)
	a.gate.Lock()
	a.gate.Unlock() //nolint:staticcheck // a barrier: every read ahead begun before flag was set has pushed
}

// wakeAll asks every reader ahead to read (those already reading read on).
func (a *readsAhead) wakeAll() {
	for range cap(a.wake) {
		select {
		case a.wake <- struct{}{}:
		default:
			return
		}
	}
}

// takeRoom takes a read's room, n slots (fewer only when ctx ended first, or under
// Ordered while a key's head waits to be read again: then at least one), one read at
// a time.
func (m *mount) takeRoom(ctx context.Context, slots chan struct{}, n int) int {
	m.ahead.room.Lock()
	defer m.ahead.room.Unlock()
	var short <-chan struct{} // nil unless Ordered: never ready
	if m.order != nil {
		short = m.order.keys.Short
	}
	for i := 0; i < n; {
		if i > 0 && short != nil && m.order.keys.Awaiting() {
			// What waits behind a head whose settlement failed holds its room until the
			// head is read again: read what fits, else no read would ever fit.
			return i
		}
		select {
		case slots <- struct{}{}:
			i++
		case <-ctx.Done():
			return i
		case <-short:
		}
	}
	return n
}

// startReadsAhead starts the mount's readers ahead when its transport can read ahead
// and more than one handler runs,
// each pushing what it reads with push; the returned func waits until they have ended
// (once ctx is done).
func (m *mount) startReadsAhead(ctx, readCtx context.Context, slots chan struct{}, readSize int, push func([]*source.Delivery)) func() {
	ra, ok := m.aheadReader()
	if !ok {
		return func() {}
	}
	m.ahead.wake = make(chan struct{}, readersAhead)
	var wg sync.WaitGroup
	for range readersAhead {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-m.ahead.wake:
				}
				for m.readAhead(ctx, readCtx, ra, slots, readSize, push) {
				}
			}
		})
	}
	return wg.Wait
}

// aheadReader returns the mount's transport as a source.ReadAhead when the mount reads
// ahead: its transport can, and more than one handler runs, unordered, with no flow
// limit.
func (m *mount) aheadReader() (source.ReadAhead, bool) {
	if m.cfg.ordered {
		// Ordered keeps a key's deliveries in read order: a read ahead could hand
		// newer ones over before the read loop's.
		return nil, false
	}
	if m.cfg.concurrency < 2 {
		// One handler takes the deliveries in the order they were read: a read ahead
		// could hand newer ones over before the read loop's.
		return nil, false
	}
	if len(m.cfg.limits) > 0 {
		// With flow limits the read loop asks the gate before each read (what waits
		// starts first, MaxWaiting bounds what waits): a read ahead would not.
		return nil, false
	}
	ra, ok := m.transport.(source.ReadAhead)
	if !ok {
		if rt, wrapped := m.transport.(replicaTransport); wrapped {
			ra, ok = rt.Transport.(source.ReadAhead)
		}
	}
	return ra, ok
}

// readAhead takes a read's room, reads new messages ahead once and pushes them; true
// when the read came back full (read on).
func (m *mount) readAhead(ctx, readCtx context.Context, ra source.ReadAhead, slots chan struct{}, n int, push func([]*source.Delivery)) bool {
	if m.readRoom(n) < n {
		return false // the payloads held fill PrefetchBytes: the read loop reads what fits
	}
	if got := m.takeRoom(ctx, slots, n); got < n {
		for range got {
			<-slots
		}
		return false
	}
	m.reading.Add(int64(n))
	free := func(k int) {
		m.reading.Add(-int64(n))
		for range k {
			<-slots
		}
	}
	m.ahead.gate.RLock()
	defer m.ahead.gate.RUnlock()
	if m.ahead.paused.Load() || m.ahead.alone.Load() || m.settleFailed.Load() || ctx.Err() != nil {
		free(n)
		return false
	}
	m.ahead.out.Add(1)
	defer m.ahead.out.Add(-1)
	ds, err := ra.FetchAhead(readCtx, n)
	m.notePayloads(ds)
	m.delivered.Add(uint64(len(ds)))
	free(n - len(ds))
	if len(ds) > 0 {
		push(ds) // what a read that failed part way delivered is held all the same
	}
	if err != nil {
		// The read loop reads the same server next and reports what fails there.
		m.logger.DebugContext(ctx, "settle: a read ahead failed; the read loop reads on", slog.Any(attrError, err))
		return false
	}
	return len(ds) == n
}
