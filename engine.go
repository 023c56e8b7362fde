package settle

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// Log attribute keys: source's, shared by the engine, every transport and the inbox.
const (
	attrAction  = source.AttrAction
	attrAttempt = source.AttrAttempt
	attrDelay   = source.AttrDelay
	attrError   = source.AttrError
	attrGroup   = source.AttrGroup
	attrKey     = source.AttrKey
	attrMount   = source.AttrMount
	attrMsgID   = source.AttrMsgID
	attrMsgKey  = source.AttrMsgKey
	attrOutcome = source.AttrOutcome
	attrReason  = source.AttrReason
)

// Source is where a mount's deliveries come from: Stream, and the sources of settle's
// subpackages. It is sealed: its method takes settle's internal types, so only settle's
// own packages implement it.
type Source interface {
	// Transport is for settle's own use and may change in any release.
	Transport(env source.Env) source.Transport
}

// Settled describes one settlement, for Config.OnSettled and Hooks.Settled. Group,
// HandlerDuration, MessageKey, Redelivery, SettleDuration and Transport are filled
// when a hook or OnSettled is set (as they are whenever one reads them).
type Settled struct {
	// Action is what the engine did.
	Action Action
	// Attempt is the delivery's attempt, 1-based.
	Attempt int
	// Delay is the wait of a parked copy.
	Delay time.Duration
	// Due: this reports the write of an in-process delayed copy that came due; the
	// delivery's park was reported when it was scheduled. Late is then how long after
	// its due time the copy was written.
	Due bool
	// Err is nil when the settlement was applied, else the error that kept it from being
	// applied (the message then stays where the transport keeps it, if it does).
	Err error
	// Group is the consumer group (or inbox group) read, if any.
	Group string
	// HandlerDuration is how long the handler ran (0 when it did not run).
	HandlerDuration time.Duration
	// HandlerErr is the handler's error (nil for an ack).
	HandlerErr error
	// ID is the delivery's id in its transport.
	ID string
	// Key is where the delivery was read from.
	Key string
	// Late is how long after its due time a due copy was written (see Due).
	Late time.Duration
	// MessageKey identifies the message across its copies, whose ids differ: the id of
	// its first delivery (HeaderOriginID).
	MessageKey string
	// Mount names the mount.
	Mount string
	// Outcome is what the handler asked.
	Outcome OutcomeKind
	// Redelivery: an earlier delivery of this message never settled, and the transport
	// delivers it again: re-read from the consumer's own pending entries, claimed from
	// another consumer, recovered from a dead consumer's processing list, or a row whose
	// lease passed.
	Redelivery bool
	// SettleDuration is how long the settlement took to apply, from the handler's return.
	SettleDuration time.Duration
	// Transport is the kind of source read: stream, list, channel or table.
	Transport string

	ctx     context.Context // the delivery's (Hooks.Delivery); nil when no hook is set
	handled time.Time       // when the handler returned; zero when no hook is set
}

// Final reports whether the message reached a final state with this settlement: acked,
// dropped, rejected, lost or dead-lettered, and applied without error.
func (s Settled) Final() bool {
	return s.Err == nil && (s.Action.completes() || s.Action == ActionDeadLetter || s.Action == ActionReply)
}

// engine is what the mounts of one App share: its clock, logger and OnSettled hook,
// its drain timeout, and the in-process delayed copies being written.
type engine struct {
	clock        clock.Clock
	delayed      sync.WaitGroup // in-process delayed copies being written; Run waits for them
	drainTimeout time.Duration
	hooks        Hooks
	logger       *slog.Logger
	middleware   []Middleware // Config.Middleware: around every mount's own
	onSettled    func(ctx context.Context, s Settled)
	testClock    clock.Clock // Config.Test.Clock: nil in production
}

// errAttemptsSpent is the error a delivery settled without running its handler carries:
// see spentByCrashes.
var errAttemptsSpent = errors.New("settle: the attempts were spent by deliveries that never settled (the consumer crashed, hung or could not settle); the handler was not run again")

// settleTimeout bounds one settlement write. Settlement writes do not depend on the
// run context: an ack is not lost because shutdown began.
const settleTimeout = 10 * time.Second

// mount is one recorded App.Mount, prepared by Validate.
type mount struct {
	cfg       mountConfig
	eng       *engine
	handler   Handler
	index     int
	info      source.Info
	logger    *slog.Logger
	name      string
	lost      atomic.Int64 // messages lost to a retry the transport cannot honour (ActionLose)
	onced     sync.Map     // reason -> *sync.Once, for warnings logged once per mount
	policy    source.Policy
	src       Source
	transport source.Transport
	wrapped   Handler

	slots   chan struct{} // one per delivery held (see run); nil until run
	reading atomic.Int64  // the slots a read in progress has taken for what it may return
	writes  writeContexts // the contexts of settlement writes other than acks
	copies  *copier       // queues retries and dead letters while Run runs; nil: each written in its handler
	due     *dueCopies    // writes in-process delays as they come due; nil: each on its own goroutine

	// settleFailed and settleOK tell the read loop that a settlement failed (its
	// delivery will be read again at once: back off first) or succeeded (reset the
	// backoff).
	settleFailed atomic.Bool
	settleOK     atomic.Bool
}

// prepare builds the mount's transport and policy. It runs once per mount.
func (m *mount) prepare(e *engine) {
	if m.transport != nil || m.src == nil {
		return
	}
	m.policy = source.Policy{
		DeadLetter:       m.cfg.deadLetter,
		DeadLetterMaxLen: m.cfg.deadLetterMaxLen,
		Delay:            m.cfg.delay,
		MaxAttempts:      m.cfg.maxAttempts,
		ReplyTo:          m.cfg.replyTo,
	}
	m.eng = e
	env := source.Env{Clock: e.clock, Logger: e.logger, Policy: m.policy, TestClock: e.testClock}
	m.name = m.cfg.name
	if m.name == "" {
		// A transport starts nothing until Open: a first one only names the mount, so
		// that the transport that runs logs under the name every other line uses.
		info := m.src.Transport(env).Info()
		m.name = string(info.Kind) + " " + info.Key
		if info.Group != "" {
			m.name += "/" + info.Group
		}
	}
	env.Mount = m.name
	if e.hooks.Event != nil {
		env.Event = m.emit
	}
	m.transport = m.src.Transport(env)
	m.info = m.transport.Info()
	if _, ok := m.transport.(source.ReplicaWaiter); ok && m.cfg.replicas.set {
		m.transport = replicaTransport{Transport: m.transport, w: m.cfg.replicas}
	}
	m.logger = e.logger.With(slog.String(attrMount, m.name))
	m.wrapped = m.handler
	mws := append(slices.Clip(e.middleware), m.cfg.middleware...) // the App's outermost
	for i := len(mws) - 1; i >= 0; i-- {
		if m.wrapped != nil {
			m.wrapped = mws[i](m.wrapped)
		}
	}
}

// validate returns every refusal of the mount.
func (m *mount) validate() []error {
	if m.src == nil {
		return []error{&ConfigError{Mount: fmt.Sprintf("#%d", m.index+1), Problem: "source is nil"}}
	}
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, &ConfigError{Mount: m.name, Problem: fmt.Sprintf(format, args...)})
	}
	if m.handler == nil {
		add("handler is nil")
	}
	if m.cfg.maxAttemptsSet && m.cfg.maxAttempts < 1 {
		add("MaxAttempts(%d): the cap must be at least 1 (leave the option out for no cap)", m.cfg.maxAttempts)
	}
	if m.cfg.concurrency < 1 {
		add("Concurrency(%d): must be at least 1", m.cfg.concurrency)
	}
	if m.cfg.prefetch < 0 {
		add("Prefetch(%d): must not be negative", m.cfg.prefetch)
	}
	if m.cfg.deadLetterMaxLen < 0 {
		add("DeadLetterMaxLen(%d): must not be negative", m.cfg.deadLetterMaxLen)
	}
	if m.cfg.deadLetterMaxLen > 0 && m.info.Kind != source.KindStream {
		add("DeadLetterMaxLen(%d): only a stream's dead letters can be trimmed, not a %s source's", m.cfg.deadLetterMaxLen, m.info.Kind)
	}
	if m.cfg.timeout <= 0 {
		add("Timeout(%s): must be positive", m.cfg.timeout)
	}
	if m.cfg.backoff == nil {
		add("Backoff(nil): give a policy (a func returning 0 retries at once)")
	}
	if m.cfg.codec == nil {
		add("WithCodec(nil): give a codec")
	}
	if m.cfg.delay == nil {
		add("DelayIn(nil): give a strategy")
	}
	for _, p := range m.cfg.replicas.problems(m.transport) {
		add("%s", p)
	}
	for _, err := range m.transport.Validate(m.policy) {
		add("%v", err)
	}
	for _, err := range capsProblems(m.info) {
		add("%v", err)
	}
	for _, err := range delayProblems(m.cfg.delay, m.info) {
		add("%v", err)
	}
	for _, err := range m.replyProblems() {
		add("%v", err)
	}
	return errs
}

// capsProblems returns what is inconsistent in a transport's Info: the engine sends a
// transport only the moves its Caps allow, so they must agree with each other.
func capsProblems(info source.Info) []error {
	var errs []error
	c := info.Caps
	switch c.RetryWithoutCap {
	case source.ActionCopy, source.ActionPutBack, source.ActionLose:
		if c.DeliveryCounter {
			errs = append(errs, fmt.Errorf("%s transport: a delivery counter leaves retries pending, but RetryWithoutCap is %s", info.Kind, c.RetryWithoutCap))
		}
	case source.ActionLeave:
		if !c.DeliveryCounter || c.MinIdle <= 0 {
			errs = append(errs, fmt.Errorf("%s transport: RetryWithoutCap is leave without a delivery counter and a positive MinIdle", info.Kind))
		}
	default:
		errs = append(errs, fmt.Errorf("%s transport: RetryWithoutCap is %s; want copy, put_back, leave or lose", info.Kind, c.RetryWithoutCap))
	}
	return errs
}

// warnOnce logs a warning the first time reason comes up on the mount.
func (m *mount) warnOnce(ctx context.Context, reason string, msg string, attrs ...any) {
	o, _ := m.onced.LoadOrStore(reason, new(sync.Once))
	o.(*sync.Once).Do(func() { m.logger.WarnContext(ctx, msg, attrs...) })
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
			if !m.handle(w.begin(d), d, acks, delays, w) {
				<-slots // else the copier (or the watchdog) frees it
			}
		}
	}
	backoff, settleBackoff := time.Duration(0), time.Duration(0)
	var pause pauseState

	for ctx.Err() == nil {
		if m.paused(ctx, &pause) {
			// Paused from outside (see pause.go): read nothing new; what the mount holds
			// runs and settles, heartbeats and leases go on, and a stop still drains.
			m.waitPaused(ctx)
			continue
		}
		n := 0
	room:
		for n < readSize {
			select {
			case slots <- struct{}{}:
				n++
			case <-ctx.Done():
				break room
			}
		}
		if n < readSize {
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
		m.reading.Store(int64(n)) // the read's room is taken, not held (see held)
		ds, err := m.transport.Fetch(readCtx, n, m.blockBound())
		for i := len(ds); i < n; i++ {
			<-slots
		}
		m.reading.Store(0)
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
			m.pushAlone(ctx, ds, acks, func(ds []*source.Delivery) {
				work.push(ds, min(len(slots), m.cfg.concurrency)+int(watch.hung.Load()), &inflight, startWorker)
			})
		}
	}
	if m.info.Caps.Releases {
		m.release(ctx, work.takeQueued())
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

// backoff is the wait before a plain error's retry: the mount's policy, cut to a
// durable delay set's TTL (a longer delay would be refused and retried at once).
func (m *mount) backoff(attempt int, err error) time.Duration {
	d := m.cfg.backoff(attempt, err)
	if dz, ok := m.policy.Delay.(delayed.DurableZset); ok && dz.TTL > 0 {
		d = min(d, dz.TTL)
	}
	return d
}

// held is how many deliveries the mount holds now: running, waiting for a worker, or
// being settled (not the room a read in progress has taken).
func (m *mount) held() int {
	if m.slots == nil {
		return 0
	}
	return len(m.slots) - int(m.reading.Load())
}

// prefetch is how many deliveries the mount may hold read but not started.
func (m *mount) prefetch() int {
	if m.cfg.prefetchSet {
		return m.cfg.prefetch
	}
	return 2 * max(m.info.Batch, 1)
}

// blockBound is how long one read may block.
func (m *mount) blockBound() time.Duration {
	if m.info.Block > 0 {
		return m.info.Block
	}
	return DefaultBlock
}

func nextBackoff(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return 100 * time.Millisecond
	case d >= 5*time.Second:
		return 5 * time.Second
	default:
		return 2 * d
	}
}

// handle runs the handler on one delivery, decides and applies its settlement. It
// reports whether the delivery's move was queued to the copier, which then frees its slot.
func (m *mount) handle(ctx context.Context, d *source.Delivery, acks *acker, delays *timerq.Queue, w *worker) (queued bool) {
	if spentByCrashes(d, m.policy, m.info.Caps) {
		// The deliveries past the cap never settled: settle this one as the cap's failure,
		// counting the attempts spent (the cap), without running the handler again.
		spent := *d
		spent.Attempt = m.policy.MaxAttempts
		o := Outcome{Kind: OutcomeRetry, Err: errAttemptsSpent}
		s := decide(o, spent.Attempt, m.policy, m.info.Caps)
		s.Reason = fmt.Sprintf("max attempts reached (%d of %d) by deliveries that never settled", m.policy.MaxAttempts, m.policy.MaxAttempts)
		ctx = m.started(ctx, d)
		if !w.end() {
			return true // settled by the watchdog meanwhile
		}
		return m.apply(ctx, &spent, o, s, acks, delays, time.Time{})
	}
	var start time.Time
	if m.eng.observed() {
		start = m.eng.clock.Now()
		ctx = m.started(ctx, d)
		w.observe(ctx)
	}
	msg := &Message{
		Attempt:   d.Attempt,
		Headers:   d.Headers,
		ID:        d.ID,
		Key:       d.Key,
		Payload:   d.Payload,
		codec:     m.cfg.codec,
		noPayload: !d.HasPayload,
		replyTo:   m.cfg.replyTo,
	}
	err := callHandler(ctx, m.wrapped, msg)
	if !w.end() {
		// The watchdog settled the delivery at its timeout (and owns its slot).
		m.logger.WarnContext(ctx, "settle: a handler returned after its timeout; the delivery was settled as a failure then, and this return is ignored",
			slog.String(attrMsgID, d.ID), slog.Any(attrError, err))
		return true
	}
	if pe, ok := err.(*PanicError); ok {
		m.logger.ErrorContext(ctx, "settle: handler panicked; its delivery is retried",
			slog.String(attrMsgID, d.ID), slog.Int(attrAttempt, d.Attempt), slog.Any("panic", pe.Value), slog.String("stack", string(pe.Stack)))
	}
	if err == nil && len(msg.outputs) > 0 {
		return m.reply(ctx, d, msg.outputs, acks, delays, start)
	}
	o, plain := outcomeOf(err)
	if plain {
		o.Delay = m.backoff(d.Attempt, err)
	}
	s := decide(o, d.Attempt, m.policy, m.info.Caps)
	if s.Action == ActionAck && !m.logger.Enabled(ctx, slog.LevelDebug) {
		// The common case, kept out of apply: its large frame would grow the stack of
		// every handler goroutine.
		acks.add(d, m.event(ctx, d, o, s.Action, start))
		return
	}
	return m.apply(ctx, d, o, s, acks, delays, start)
}

// callHandler runs h, turning a panic into a *PanicError.
func callHandler(ctx context.Context, h Handler, msg *Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return h.Handle(ctx, msg)
}

// open opens the mount's source. An error that says the server could not be reached or
// is not ready (a refused or dropped connection, a server still loading its data; from an
// inbox, also a killed connection, a server starting, stopping or out of connections, a
// locked database) is logged and the open tried again after a backoff, until it succeeds or ctx is done: a consumer started while its
// Redis or database restarts comes up on its own, as a running one reconnects. Any other
// error (a key of the wrong type, a refused permission, a missing table) is returned at
// once: waiting would not fix it.
func (m *mount) open(ctx context.Context) error {
	var backoff time.Duration
	for {
		err := m.transport.Open(ctx)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return err
		}
		backoff = nextBackoff(backoff)
		m.logger.ErrorContext(ctx, "settle: open failed on an error that waiting may fix (the server unreachable or not ready, the connection lost, the database locked); retrying", slog.Any(attrError, err), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return err
		}
	}
}

// unreachable reports whether err says the server could not be reached or is not ready
// yet, rather than refusing what was asked.
func unreachable(err error) bool {
	var netErr net.Error
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, driver.ErrBadConn), errors.As(err, &netErr):
		return true
	}
	// Redis's answers while it cannot serve yet.
	msg := err.Error()
	for _, prefix := range []string{"LOADING ", "TRYAGAIN ", "CLUSTERDOWN ", "MASTERDOWN "} {
		if strings.HasPrefix(msg, prefix) || strings.Contains(msg, ": "+prefix) {
			return true
		}
	}
	return false
}

// settled reports an applied (or failed) settlement.
func (m *mount) settled(ctx context.Context, d *source.Delivery, ev Settled) {
	if ev.Err == nil {
		if !m.settleOK.Load() { // a store on every settlement would bounce its cache line between cores
			m.settleOK.Store(true)
		}
		if ev.Due && m.logger.Enabled(ctx, slog.LevelDebug) {
			m.logger.DebugContext(ctx, "settle: delayed copy written back", slog.String(attrMsgID, d.ID), slog.String(attrMsgKey, messageKey(d)),
				slog.String(attrKey, d.Key), slog.Int(attrAttempt, d.Attempt), slog.String(attrAction, ev.Action.String()))
		}
	} else {
		m.settleFailed.Store(true)
		m.logger.ErrorContext(ctx, "settle: settlement failed; the message stays where the transport keeps it",
			slog.String(attrMsgID, d.ID), slog.String(attrKey, d.Key), slog.String(attrAction, ev.Action.String()), slog.Any(attrError, ev.Err))
	}
	m.eng.report(ctx, ev)
}

// logSettlement logs a settlement's line at level with the delivery's attributes and
// extra, building nothing when the level is off: the retry path runs it for every
// delivery.
func (m *mount) logSettlement(ctx context.Context, level slog.Level, msg string, d *source.Delivery, o Outcome, s settlement, extra ...slog.Attr) {
	if !m.logger.Enabled(ctx, level) {
		return
	}
	attrs := settlementAttrs(d, o, s, extra...)
	if la, ok := ctx.Value(logAttrsKey{}).(*logAttrs); ok {
		for _, a := range la.added() {
			attrs = append(attrs, a)
		}
	}
	m.logger.Log(ctx, level, msg, attrs...)
}

// settlementAttrs are a settlement's log attributes: the delivery's (its msg_key the
// same on every copy of the message), then extra.
func settlementAttrs(d *source.Delivery, o Outcome, s settlement, extra ...slog.Attr) []any {
	attrs := make([]any, 0, 6+len(extra))
	attrs = append(attrs,
		slog.String(attrMsgID, d.ID), slog.String(attrMsgKey, messageKey(d)), slog.String(attrKey, d.Key), slog.Int(attrAttempt, d.Attempt),
		slog.String(attrOutcome, string(o.Kind)), slog.String(attrAction, s.Action.String()))
	for _, a := range extra {
		attrs = append(attrs, a)
	}
	return attrs
}
