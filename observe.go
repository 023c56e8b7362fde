package settle

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// Hooks are the engine's points of observation, for metrics and traces (the settleotel
// module) or a service's own. Each is optional, and one left nil costs nothing: no
// call, no allocation. Every hook must be safe for concurrent use and return quickly.
type Hooks struct {
	// Delivery is called as each delivery starts, before its handler runs (or before it
	// is settled without running, when its attempts were spent by crashes). The context
	// it returns, derived from ctx, is the one the handler runs under and the one Move
	// and Settled get for this delivery: a span started here ends in Settled. Defaults
	// to nil.
	Delivery func(ctx context.Context, d DeliveryStart) context.Context

	// Event is called for what happens beside settlements: claims of a dead consumer's
	// entries, recoveries of its list items, sweeps of due delays, reads that failed.
	// Defaults to nil.
	Event func(ctx context.Context, e Event)

	// Move is called as the message a settlement writes is built (a retry copy, a
	// parked copy, a dead letter, or the row a Retry puts back where the transport
	// retries in place, an inbox's), with that message's headers: the hook may add its
	// own (a trace link to this attempt, say), which travel with the copy (an inbox
	// keeps them in its Headers column, when its table has one). A hook names
	// its headers under HeaderHookPrefix, which no user header can take and which
	// copies, dead letters and replays (settle/admin) keep. s.Due is set for a park the
	// engine keeps in-process (it writes the copy when due). Defaults to nil.
	Move func(ctx context.Context, s Settled, headers map[string]string)

	// Settled is called after every settlement is applied (or failed to apply), from the
	// goroutine that applied it, with the context Delivery returned: use it, rather than
	// Config.OnSettled (the same call, which will go), to observe settlements. It must be
	// safe for concurrent use and return quickly; events of one message can arrive out of
	// order across its deliveries, so key any tally by (Mount, ID, Attempt). Defaults to
	// nil.
	Settled func(ctx context.Context, s Settled)
}

// DeliveryStart describes a delivery as it starts, for Hooks.Delivery.
type DeliveryStart struct {
	// Attempt is the delivery's attempt, 1-based.
	Attempt int
	// Group is the consumer group (or inbox group) read, if any.
	Group string
	// Headers are the message's headers as they arrived; the hook must not change them.
	Headers map[string]string
	// ID is the delivery's id in its transport.
	ID string
	// Key is where the delivery was read from.
	Key string
	// MessageKey identifies the message across its copies: see Settled.MessageKey.
	MessageKey string
	// Mount names the mount.
	Mount string
	// Redelivery: an earlier delivery of the message never settled (see
	// Settled.Redelivery).
	Redelivery bool
	// Transport is the kind of source read: stream, list, channel or table.
	Transport string
}

// EventKind names an Event.
type EventKind string

// The events.
const (
	// EventClaim: entries a dead or stalled consumer of a stream group left pending
	// were claimed (Count of them).
	EventClaim EventKind = "claim"
	// EventLease: inbox rows whose lease passed unsettled (their worker crashed or hung)
	// were claimed again (Count of them).
	EventLease EventKind = "lease"
	// EventRecovery: the items of a reliable list consumer that stopped without
	// settling them were taken over (Count of them).
	EventRecovery EventKind = "recovery"
	// EventSweep: a durable delay set's due members were moved back (Count of them).
	EventSweep EventKind = "sweep"
	// EventReadFailed: a read failed (Err); the mount backs off and reads again.
	EventReadFailed EventKind = "read_failed"
)

// Event is one Hooks.Event report.
type Event struct {
	// Count is how many messages the event concerns.
	Count int
	// Err is the error of a failed read.
	Err error
	// Group is the consumer group read, if any.
	Group string
	// Key is the source's key.
	Key string
	// Kind says what happened.
	Kind EventKind
	// Mount names the mount.
	Mount string
	// Transport is the kind of source read.
	Transport string
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
func (m *mount) started(ctx context.Context, d *source.Delivery) context.Context {
	h := m.eng.hooks.Delivery
	if h == nil {
		return ctx
	}
	return h(ctx, DeliveryStart{
		Attempt: d.Attempt, Group: m.info.Group, Headers: d.Headers, ID: d.ID, Key: d.Key,
		MessageKey: messageKey(d), Mount: m.name, Redelivery: d.Redelivered, Transport: string(m.info.Kind),
	})
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
		ev.SettleDuration = e.clock.Now().Sub(ev.handled)
	}
	if e.hooks.Settled != nil {
		e.hooks.Settled(ctx, ev)
	}
	if e.onSettled != nil {
		e.onSettled(ctx, ev)
	}
}

// emit reports a transport's event to the Event hook (see source.Env.Event).
func (m *mount) emit(ctx context.Context, e source.Event) {
	if h := m.eng.hooks.Event; h != nil {
		h(ctx, Event{Count: e.Count, Err: e.Err, Group: m.info.Group, Key: m.info.Key, Kind: EventKind(e.Kind), Mount: m.name, Transport: string(m.info.Kind)})
	}
}

// logAttrs holds the attributes a handler adds to settle's lines for its delivery
// (AddLogAttrs). One lives in each worker's context, reused from one delivery to the
// next, so a handler that adds none costs nothing.
type logAttrs struct {
	mu    sync.Mutex
	attrs []slog.Attr
}

type logAttrsKey struct{}

// AddLogAttrs adds attrs (a business key, say) to the lines settle logs about the
// delivery whose handler's context is ctx: its settlement line and its warnings. Called
// outside a handler, it does nothing.
func AddLogAttrs(ctx context.Context, attrs ...slog.Attr) {
	if la, ok := ctx.Value(logAttrsKey{}).(*logAttrs); ok {
		la.mu.Lock()
		la.attrs = append(la.attrs, attrs...)
		la.mu.Unlock()
	}
}

// added returns a copy of the attributes added (nil receiver, or none: nil).
func (la *logAttrs) added() []slog.Attr {
	if la == nil {
		return nil
	}
	la.mu.Lock()
	defer la.mu.Unlock()
	return slices.Clone(la.attrs)
}

// reset forgets what a previous delivery added.
func (la *logAttrs) reset() {
	la.mu.Lock()
	la.attrs = la.attrs[:0]
	la.mu.Unlock()
}
