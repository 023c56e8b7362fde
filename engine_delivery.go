package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/flow"
	"github.com/settlekit/settle/internal/keyorder"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
)

// backoff is the wait before a plain error's retry: the mount's policy, cut to a
// durable delay set's TTL (a longer delay would be refused and retried at once).
func (m *mount) backoff(attempt int, err error) time.Duration {
	d := m.cfg.backoff(attempt, err)
	if dz, ok := m.policy.Delay.(delayed.DurableZset); ok && dz.TTL > 0 {
		d = min(d, dz.TTL)
	}
	return d
}

// handle runs the handler on one delivery, decides and applies its settlement. It
// reports whether the delivery's move was queued to the copier, which then frees its slot.
func (m *mount) handle(ctx context.Context, d *source.Delivery, acks *acker, delays *timerq.Queue, w *worker) (queued bool) {
	if f := m.failures.get(d); f != nil {
		if queued, done := m.settleAgain(ctx, d, f, acks, delays, w); done {
			return queued
		}
	}
	if m.order != nil {
		m.order.keepAttempt(ctx, d)
	}
	if spentByCrashes(d, m.policy, m.info.Caps) {
		// The deliveries past the cap never settled: settle this one as the cap's failure,
		// counting the attempts spent (the cap), without running the handler again.
		spent := *d
		spent.Attempt = m.policy.MaxAttempts
		o := Outcome{Kind: OutcomeRetry, Err: errAttemptsSpent}
		s := decide(o, spent.Attempt, m.policy, m.info.Caps)
		s.Reason = fmt.Sprintf("max attempts reached (%d of %d) by deliveries that never settled", m.policy.MaxAttempts, m.policy.MaxAttempts)
		ctx = m.started(ctx, d, nil)
		if !w.end() {
			return true // settled by the watchdog meanwhile
		}
		return m.apply(ctx, &spent, o, s, acks, delays, time.Time{})
	}
	var waited *flow.Ticket // what d waited for, if it did
	if gate := m.gate.Load(); gate != nil {
		t, ok := gate.Admit(ctx, d)
		if !ok {
			// Not started: it waits in the gate, holding no slot (see internal/flow).
			return !w.end()
		}
		defer gate.Done(context.WithoutCancel(ctx), t)
		if t.Reason != "" {
			AddLogAttrs(ctx, slog.String("waited_for", t.Reason), slog.Duration("waited", t.Waited))
			waited = t
		}
	}
	var start time.Time
	if m.eng.observed() {
		if m.order == nil && m.gate.Load() == nil {
			start = w.began() // the worker's clock read as it took d: nothing waited since
		}
		if start.IsZero() {
			start = m.eng.clock.Now()
		}
		ctx = m.started(ctx, d, waited)
		w.observe(ctx)
	}
	msg := m.message(d)
	var dedupKey string
	if m.dedup != nil {
		key, done, err := m.dedupCheck(ctx, msg)
		if done || err != nil {
			if !w.end() {
				return true // settled by the watchdog meanwhile
			}
			if err != nil {
				o := Outcome{Kind: OutcomeRetry, Err: err, Delay: m.backoff(d.Attempt, err)}
				return m.apply(ctx, d, o, decide(o, d.Attempt, m.policy, m.info.Caps), acks, delays, time.Time{})
			}
			m.deduplicated(ctx, d, key, acks)
			return false
		}
		dedupKey = key
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
		d.DedupKey = dedupKey
		return m.reply(ctx, d, msg.outputs, acks, delays, start)
	}
	o, plain := outcomeOf(err)
	if plain {
		o.Delay = m.backoff(d.Attempt, err)
	}
	s := decide(o, d.Attempt, m.policy, m.info.Caps)
	if s.Action == ActionAck {
		d.DedupKey = dedupKey // marked completed with the ack (Dedupe)
	}
	if s.Action == ActionAck && !m.logger.Enabled(ctx, slog.LevelDebug) {
		// The common case, kept out of apply: its large frame would grow the stack of
		// every handler goroutine.
		acks.add(d, m.event(ctx, d, o, s.Action, start))
		return
	}
	return m.apply(ctx, d, o, s, acks, delays, start)
}

// message is the Message a handler (or a flow limit's key function) is given for d.
func (m *mount) message(d *source.Delivery) *Message {
	return &Message{
		Attempt:   d.Attempt,
		Headers:   d.Headers,
		ID:        d.ID,
		Key:       d.Key,
		Payload:   d.Payload,
		codec:     m.cfg.codec,
		noPayload: !d.HasPayload,
		mount:     m,
		takenOver: d.TakenOver,
	}
}

// dedupCheck returns msg's Dedupe key and whether it was completed within the window
// (one read of the transport's marks; none for the key ""). An error (the key function
// panicked, the marks could not be read) settles the delivery as a failure without
// running its handler: a completed key is never run again on a guess.
func (m *mount) dedupCheck(ctx context.Context, msg *Message) (key string, done bool, err error) {
	if key, err = dedupKeyOf(m.cfg.dedupe.key, msg); err != nil || key == "" {
		return key, false, err
	}
	done, err = m.dedupReads.read(ctx, m.dedup, key)
	if err != nil {
		return key, false, fmt.Errorf("settle: Dedupe: read the completion mark of %q: %w", key, err)
	}
	return key, done, nil
}

// dedupReads batches the mark reads of a mount's concurrent deliveries (Dedupe): one
// Completed call answers every read queued while the last one was out, so that the
// handlers that start together share a round trip. The first reader with none out makes
// the call; once it is answered, a reader queued meanwhile is handed the next call.
type dedupReads struct {
	mu      sync.Mutex
	queue   []dedupRead
	running bool
}

// dedupRead is one queued mark read and where its answer goes.
type dedupRead struct {
	ans chan dedupAnswer
	key string
}

// dedupAnswer answers a dedupRead, or hands its reader the next call (lead).
type dedupAnswer struct {
	done bool
	err  error
	lead bool
}

// maxDedupReads bounds the keys one Completed call reads.
const maxDedupReads = 512

// read returns whether key has a live mark, reading it with the marks of the other
// deliveries that wait meanwhile.
func (b *dedupReads) read(ctx context.Context, d source.Deduper, key string) (bool, error) {
	r := dedupRead{ans: make(chan dedupAnswer, 1), key: key}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	for {
		if lead {
			b.call(ctx, d)
		}
		a := <-r.ans
		if !a.lead {
			return a.done, a.err
		}
		lead = true
	}
}

// call reads the queued keys in one Completed call, answers their readers, and hands
// the next call to a reader queued meanwhile (none: no call is out).
func (b *dedupReads) call(ctx context.Context, d source.Deduper) {
	b.mu.Lock()
	n := min(len(b.queue), maxDedupReads)
	batch := slices.Clone(b.queue[:n])
	b.queue = slices.Delete(b.queue, 0, n)
	b.mu.Unlock()
	keys := make([]string, len(batch))
	for i, r := range batch {
		keys[i] = r.key
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	seen, err := d.Completed(ctx, keys)
	cancel()
	if err == nil && len(seen) != len(keys) {
		err = fmt.Errorf("%d answers for %d keys", len(seen), len(keys))
	}
	for i, r := range batch {
		a := dedupAnswer{err: err}
		if err == nil {
			a.done = seen[i]
		}
		r.ans <- a
	}
	b.mu.Lock()
	if len(b.queue) > 0 {
		b.queue[0].ans <- dedupAnswer{lead: true}
	} else {
		b.running = false
	}
	b.mu.Unlock()
}

// dedupKeyOf runs a Dedupe key function, turning a panic into a *PanicError.
func dedupKeyOf(f func(*Message) string, msg *Message) (key string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("settle: Dedupe: the key function panicked: %w", &PanicError{Value: r, Stack: debug.Stack()})
		}
	}()
	return f(msg), nil
}

// deduplicated acks d without running its handler: its Dedupe key was completed within
// the window. The ack writes no mark (the first completion's stands).
func (m *mount) deduplicated(ctx context.Context, d *source.Delivery, key string, acks *acker) {
	o := Outcome{Kind: OutcomeAck}
	ev := m.event(ctx, d, o, ActionAck, time.Time{})
	ev.Deduplicated = true
	m.logSettlement(ctx, slog.LevelInfo, "settle: ack without running the handler: its dedup key was completed within the window (Dedupe)", d, o,
		settlement{Action: ActionAck}, slog.String(attrDedupKey, key))
	acks.add(d, ev)
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

// settled reports an applied (or failed) settlement.
func (m *mount) settled(ctx context.Context, d *source.Delivery, ev Settled) {
	if ev.Err == nil {
		if !m.settleOK.Load() { // a store on every settlement would bounce its cache line between cores
			m.settleOK.Store(true)
		}
		m.failures.forget(d)
		if ev.Due && m.logger.Enabled(ctx, slog.LevelDebug) {
			m.logger.DebugContext(ctx, "settle: delayed copy written back", slog.String(attrMsgID, d.ID), slog.String(attrMsgKey, messageKey(d)),
				slog.String(attrKey, d.Key), slog.Int(attrAttempt, d.Attempt), slog.String(attrAction, ev.Action.String()))
		}
	} else if u := (*unconfirmed)(nil); errors.As(ev.Err, &u) {
		// Applied: the message does not come back, so no pause before the next read.
		m.logger.ErrorContext(ctx, "settle: settlement applied on the primary but not confirmed by enough replicas; a failover may undo it",
			slog.String(attrMsgID, d.ID), slog.String(attrKey, d.Key), slog.String(attrAction, ev.Action.String()),
			slog.Int("confirmed", u.got), slog.Int("want", u.want), slog.Any(attrError, ev.Err))
	} else {
		m.settleFailed.Store(true)
		n := 1
		// Kept to write again when the message comes back, unless the transport writes it
		// again itself, or the delivery is no longer this consumer's (taken over, or its
		// group made again: a message that comes back then is another delivery, or
		// another message of the same id).
		if !errors.Is(ev.Err, source.ErrKeptForRedo) && !errors.Is(ev.Err, source.ErrTakenOver) {
			n = m.failures.add(d, ev)
		}
		if cause := m.wrongType(ctx, ev.Err); cause != nil {
			m.logger.ErrorContext(ctx, "settle: settlement failed: a key it writes holds another type; the message stays where the transport keeps it; when it comes back, after a backoff, the settlement is written again without running the handler",
				slog.String(attrMsgID, d.ID), slog.String(attrKey, d.Key), slog.String(attrAction, ev.Action.String()),
				slog.String("cause", cause.Error()), slog.Int("failed_settlements", n), slog.Any(attrError, ev.Err))
		} else {
			m.logger.ErrorContext(ctx, "settle: settlement failed; the message stays where the transport keeps it",
				slog.String(attrMsgID, d.ID), slog.String(attrKey, d.Key), slog.String(attrAction, ev.Action.String()),
				slog.Int("failed_settlements", n), slog.Any(attrError, ev.Err))
		}
	}
	m.eng.report(ctx, ev)
	if m.order != nil {
		m.order.settled(d, ev.Err) // after the report: the key's next delivery starts after it
	}
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
		if s.InPlace {
			return m.order.retryInPlace(ctx, d, o, s, ev)
		}
		if o.Kind == OutcomeRetryAfter && o.Delay != s.Delay {
			m.warnOnce(ctx, "delay-min-idle", "settle: a claiming stream keeps delays as its min-idle: RetryAfter delays are rounded to it (use a DurableZset to keep each delay as asked); logged once per mount",
				slog.Duration(attrDelay, o.Delay), slog.Duration("min_idle", s.Delay))
		}
		m.logSettlement(ctx, slog.LevelDebug, "settle: retry: left pending", d, o, s, slog.Duration(attrDelay, s.Delay), slog.Any(attrError, o.Err))
		ev.Delay = s.Delay
		return m.move(source.Move{Action: source.ActionLeave, Delivery: d}, ev)
	case ActionPutBack:
		m.logSettlement(ctx, slog.LevelDebug, "settle: retry: put back", d, o, s, slog.Any(attrError, o.Err))
		return m.move(source.Move{Action: source.ActionPutBack, Delivery: d, Err: m.retryErr(o.Err), Headers: m.putBackHeaders(ev, d)}, ev)
	case ActionCopy:
		if o.Kind == OutcomeRetryAfter {
			// The asked delay could not be kept (see delayRefusal): say why, loudly.
			m.logSettlement(ctx, slog.LevelWarn, "settle: "+s.Reason, d, o, s, slog.Duration(attrDelay, o.Delay), slog.Any(attrError, o.Err))
		} else {
			m.logSettlement(ctx, slog.LevelDebug, "settle: retry", d, o, s, slog.Any(attrError, o.Err))
		}
		return m.move(source.Move{Action: source.ActionCopy, Delivery: d, Err: m.retryErr(o.Err), Headers: m.moveHeaders(ev, d, withRetryCount(d.Headers, d.Attempt))}, ev)
	case ActionPark:
		m.logSettlement(ctx, slog.LevelDebug, "settle: retry after delay", d, o, s, slog.Duration(attrDelay, s.Delay), slog.Any(attrError, o.Err))
		ev.Delay = s.Delay
		if m.info.Caps.Parks {
			return m.move(source.Move{Action: source.ActionPark, Delay: s.Delay, Delivery: d, Err: m.retryErr(o.Err), Headers: m.moveHeaders(ev, d, withRetryCount(d.Headers, d.Attempt))}, ev)
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

// retryErr is the error text a retry's move carries: only for a transport that writes
// it (Caps.WritesErrors), so that a retry elsewhere formats no error.
func (m *mount) retryErr(err error) string {
	if !m.info.Caps.WritesErrors {
		return ""
	}
	return errorText(err)
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
	m.settling.RLock()
	defer m.settling.RUnlock()
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
		m.eng.goDelayed(func() {
			ctx := m.writes.get()
			ev := m.cameDue(ev, due)
			m.settling.RLock()
			defer m.settling.RUnlock()
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

// messageKey is the key of d's message across its copies: its origin header, else its
// own id (a first delivery).
func messageKey(d *source.Delivery) string {
	if k := d.Headers[HeaderOriginID]; k != "" {
		return k
	}
	return d.ID
}

// observed reports whether any settlement hook is set: the engine then measures
// durations and builds the delivery's context.
func (e *engine) observed() bool {
	return e.onSettled != nil || e.hooks.Settled != nil || e.hooks.Delivery != nil
}

// started calls the Delivery hook for d, when set, and returns the delivery's context.
func (m *mount) started(ctx context.Context, d *source.Delivery, waited *flow.Ticket) context.Context {
	h := m.eng.hooks.Delivery
	if h == nil {
		return ctx
	}
	ds := DeliveryStart{
		Attempt: d.Attempt, Group: m.info.Group, Headers: d.Headers, ID: d.ID, Key: d.Key,
		MessageKey: messageKey(d), Mount: m.name, Redelivery: d.Redelivered, Transport: string(m.info.Kind),
	}
	if waited != nil {
		ds.Waited, ds.WaitedFor = waited.Waited, waited.Kind
	}
	return h(ctx, ds)
}

// event returns the report of d's settlement s, for the hooks and the ack path.
// ctx is the delivery's (see Hooks.Delivery), start when its handler began.
func (m *mount) event(ctx context.Context, d *source.Delivery, o Outcome, a Action, start time.Time) Settled {
	ev := Settled{
		Action:     a,
		Attempt:    d.Attempt,
		HandlerErr: o.Err,
		ID:         d.ID,
		Key:        d.Key,
		Mount:      m.name,
		Outcome:    o.Kind,
	}
	if m.eng.observed() {
		ev.Group, ev.Transport, ev.Redelivery = m.info.Group, string(m.info.Kind), d.Redelivered
		ev.MessageKey = messageKey(d)
		ev.ctx = ctx
		ev.handled = m.eng.clock.Now()
		if !start.IsZero() {
			ev.HandlerDuration = ev.handled.Sub(start)
		}
	}
	return ev
}

// moveHeaders gives the Move hook, when set, the headers of the message s writes, after
// settle's own: the origin id, so that every copy names its message's first delivery.
func (m *mount) moveHeaders(s Settled, d *source.Delivery, h map[string]string) map[string]string {
	if _, ok := h[HeaderOriginID]; !ok {
		h[HeaderOriginID] = d.ID
	}
	if hook := m.eng.hooks.Move; hook != nil {
		ctx := s.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		hook(ctx, s, h)
	}
	return h
}

// putBackHeaders gives the Move hook, when set and where the transport retries in place
// (Caps.RetriesInPlace: an inbox row's attempt column), the headers of the message a
// put-back returns, so that the next attempt links to this one as a copy's would;
// nil otherwise, at no cost.
func (m *mount) putBackHeaders(s Settled, d *source.Delivery) map[string]string {
	if m.eng.hooks.Move == nil || !m.info.Caps.RetriesInPlace {
		return nil
	}
	h := make(map[string]string, len(d.Headers)+2) // room for the origin id and a hook's link
	maps.Copy(h, d.Headers)
	return m.moveHeaders(s, d, h)
}

// report calls the settlement hooks with ev, measuring how long the settlement took.
func (e *engine) report(ctx context.Context, ev Settled) {
	if ev.ctx != nil {
		ctx = ev.ctx
	}
	if !ev.handled.IsZero() {
		written := ev.written
		if written.IsZero() {
			written = e.clock.Now()
		}
		ev.SettleDuration = written.Sub(ev.handled)
	}
	if e.hooks.Settled != nil {
		e.hooks.Settled(ctx, ev)
	}
	if e.onSettled != nil {
		e.onSettled(ctx, ev)
	}
}

// reply settles a delivery whose handler succeeded with replies: one atomic move where
// the transport writes them itself, else each published through the mount's replier
// and the original completed after; a failed publish settles it as a failure.
func (m *mount) reply(ctx context.Context, d *source.Delivery, outs []source.Output, acks *acker, delays *timerq.Queue, start time.Time) (queued bool) {
	ev := m.event(ctx, d, Outcome{Kind: OutcomeAck}, ActionReply, start)
	ev.outputs = &outs
	m.logSettlement(ctx, slog.LevelDebug, "settle: reply", d, Outcome{Kind: OutcomeAck}, settlement{Action: ActionReply},
		slog.String("reply_to", m.cfg.replyTo), slog.Int("replies", len(outs)))
	if m.cfg.replier == nil {
		return m.move(source.Move{Action: source.ActionReply, Delivery: d, Outputs: outs}, ev)
	}
	wctx := m.writes.get()
	for i, out := range outs {
		if err := m.cfg.replier.PublishReply(wctx, m.cfg.replyTo, out.Payload, out.Headers); err != nil {
			err = fmt.Errorf("settle: publish reply %d of %d to %q: %w", i+1, len(outs), m.cfg.replyTo, err)
			o := Outcome{Kind: OutcomeRetry, Err: err, Delay: m.backoff(d.Attempt, err)}
			return m.apply(ctx, d, o, decide(o, d.Attempt, m.policy, m.info.Caps), acks, delays, start)
		}
	}
	acks.add(d, ev)
	return false
}

// ordering is an Ordered mount's state while run runs: the deliveries waiting behind
// their key's head (the one running, or retrying in place) and the heads waiting out a
// retry's delay. A key's next delivery is handed to the workers once its head's
// settlement is written (settled); a head whose settlement failed keeps its key until
// it is read again and settles. Every delivery it holds holds its slot.
type ordering struct {
	m       *mount
	keys    *keyorder.Queue[*source.Delivery]
	retries *timerq.Queue // the heads waiting out a retry's delay, on the engine's clock
	quit    chan struct{} // closed by stop: retries stops running
	done    chan struct{} // closed once retries has stopped

	mu      sync.Mutex // held across push: no delivery is handed over once stop has begun
	push    func([]*source.Delivery)
	waiting int // the retries scheduled and not handed over yet
	stopped bool
	inPlace map[*source.Delivery]struct{} // handed over again, their attempt not yet recorded

	keeper source.AttemptKeeper // the transport's, if it counts attempts by its reads
}

func newOrdering(m *mount, push func([]*source.Delivery)) *ordering {
	o := &ordering{m: m, keys: keyorder.New[*source.Delivery](), retries: timerq.New(m.eng.clock),
		quit: make(chan struct{}), done: make(chan struct{}), push: push, inPlace: map[*source.Delivery]struct{}{}}
	o.keeper, _ = m.transport.(source.AttemptKeeper)
	if rt, wrapped := m.transport.(replicaTransport); wrapped {
		o.keeper, _ = rt.Transport.(source.AttemptKeeper)
	}
	go func() {
		defer close(o.done)
		o.retries.Run(o.quit) // what still waits at stop is counted by waiting
	}()
	return o
}

// orderKey is d's message key (HeaderKey; "" orders nothing) and its id.
func orderKey(d *source.Delivery) (key, id string) {
	return d.Headers[HeaderKey], d.ID
}

// admit hands one read's deliveries to the workers, each behind its key's head.
func (o *ordering) admit(ds []*source.Delivery) {
	o.hand(o.keys.Admit(ds, orderKey))
}

// hand gives ds to the workers, unless the mount is stopping.
func (o *ordering) hand(ds []*source.Delivery) {
	if len(ds) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.stopped {
		o.push(ds)
	}
}

// sharesKey reports whether a delivery of rest has the key of one of taken (the
// taken-over deliveries of its read); false when not Ordered.
func (o *ordering) sharesKey(rest, taken []*source.Delivery) bool {
	if o == nil {
		return false
	}
	keys := map[string]bool{}
	for _, d := range taken {
		if k, _ := orderKey(d); k != "" {
			keys[k] = true
		}
	}
	for _, d := range rest {
		if k, _ := orderKey(d); keys[k] {
			return true
		}
	}
	return false
}

// settled frees d's key for its next delivery once d's settlement is written; a failed
// write keeps the key until d is read again.
func (o *ordering) settled(d *source.Delivery, err error) {
	key, id := orderKey(d)
	if key == "" {
		return
	}
	if u := (*unconfirmed)(nil); err != nil && !errors.As(err, &u) {
		if errors.Is(err, source.ErrTakenOver) {
			// Another consumer took the head over and runs the key now: what waited
			// behind it is its too. Handed back (a lost partition's are left to its new
			// owner), their slots freed.
			behind := o.keys.Drop(key)
			if len(behind) == 0 {
				return
			}
			ms := make([]source.Move, len(behind))
			for i, b := range behind {
				ms[i] = source.Move{Action: source.ActionRelease, Delivery: b}
			}
			_ = o.m.transport.Moves(o.m.writes.get(), ms) // a lost partition's fail: forgotten here
			for range behind {
				<-o.m.slots
			}
			o.m.logger.Warn("settle: another consumer took a key's head over (Ordered): the messages waiting behind it are left to it",
				slog.String(source.AttrMsgKey, key), slog.String(attrMsgID, id), slog.Int("count", len(behind)), slog.Any(attrError, err))
			return
		}
		o.keys.Failed(key, id)
		return
	}
	if next, ok := o.keys.Settled(key); ok {
		o.hand([]*source.Delivery{next})
	}
}

// retryInPlace retries d, its key's head, where it is, as s decided (InPlace): its
// entry stays pending, its key's later deliveries keep waiting, and once s.Delay (a
// backoff or RetryAfter's) has passed its handler runs again, as attempt d.Attempt+1,
// in the slot it holds. It reports the retry (ev, Action ActionLeave) and returns true:
// the slot is not freed.
func (o *ordering) retryInPlace(ctx context.Context, d *source.Delivery, out Outcome, s settlement, ev Settled) (queued bool) {
	m := o.m
	ev.Delay = s.Delay
	m.logSettlement(ctx, slog.LevelDebug, "settle: retry in place (Ordered): the key's later messages wait", d, out, s,
		slog.Duration(attrDelay, s.Delay), slog.Any(attrError, out.Err))
	m.eng.report(ctx, ev)
	return o.again(d, s.Delay)
}

// again hands d to the workers again, as its next attempt, once delay has passed on the
// engine's clock, unless the ordering stops first (stop counts it then). It returns
// false, scheduling nothing, once stopped: d's entry stays pending and its slot is the
// caller's to free.
func (o *ordering) again(d *source.Delivery, delay time.Duration) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.stopped {
		return false
	}
	o.waiting++
	o.retries.Schedule(delay, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.stopped {
			return // counted by stop, which frees its slot
		}
		o.waiting--
		d.Attempt++
		d.Redelivered = true
		if o.keeper != nil {
			o.inPlace[d] = struct{}{}
		}
		o.push([]*source.Delivery{d})
	})
	return true
}

// keepAttempt records, before its handler runs, the attempt of d when the ordering
// handed it over again in place, so that the transport's count holds it should the
// process crash or stop (source.AttemptKeeper): the re-read that follows counts on from
// it, the run it cut included. A failed write is logged and the attempt runs: the
// entry stays fenced to this consumer, and a crash before it settles then counts as
// one delivery fewer.
func (o *ordering) keepAttempt(ctx context.Context, d *source.Delivery) {
	if o.keeper == nil {
		return
	}
	o.mu.Lock()
	_, again := o.inPlace[d]
	delete(o.inPlace, d)
	o.mu.Unlock()
	if !again {
		return
	}
	if err := o.keeper.KeepAttempt(o.m.writes.get(), d); err != nil {
		o.m.logger.WarnContext(ctx, "settle: the attempt of a retry in place (Ordered) could not be recorded; a crash before it settles would count it one attempt short",
			slog.String(attrMsgID, d.ID), slog.String(attrKey, d.Key), slog.Int(attrAttempt, d.Attempt), slog.Any(attrError, err))
	}
}

// stop ends the ordering as the mount stops: it returns the deliveries waiting behind
// their key (never started) and how many retries wait in place (their slots still
// held; never run here), and hands nothing more to the workers.
func (o *ordering) stop() (behind []*source.Delivery, again int) {
	o.mu.Lock()
	o.stopped = true
	again = o.waiting
	o.mu.Unlock()
	close(o.quit)
	<-o.done
	return o.keys.Stop(), again
}
