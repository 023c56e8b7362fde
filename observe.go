package settle

import (
	"context"
	"log/slog"
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
	// Waited is how long the delivery waited for its mount's flow limits before it
	// started (0: it did not wait).
	Waited time.Duration
	// WaitedFor is the kind of limit it waited for, never its key value: "rate",
	// "concurrency", or "unreachable" (the limits' state could not be read); "" when it
	// did not wait.
	WaitedFor string
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

// Settled describes one settlement, for Config.OnSettled and Hooks.Settled. Group,
// HandlerDuration, MessageKey, Redelivery, SettleDuration and Transport are filled
// when a hook or OnSettled is set (as they are whenever one reads them).
type Settled struct {
	// Action is what the engine did.
	Action Action
	// Attempt is the delivery's attempt, 1-based.
	Attempt int
	// Deduplicated: the delivery was acked without running its handler, as its Dedupe
	// key was completed (acked, or replied) within the window.
	Deduplicated bool
	// Delay is the wait of a parked copy.
	Delay time.Duration
	// Due: this reports the write of an in-process delayed copy that came due; the
	// delivery's park was reported when it was scheduled. Late is then how long after
	// its due time the copy was written.
	Due bool
	// Err is nil when the settlement was applied, else the error that kept it from being
	// applied (the message then stays where the transport keeps it, if it does) or, with
	// WaitReplicas, the shortfall of a settlement applied on the primary that too few
	// replicas confirmed in time (the message does not come back; a failover may undo
	// the settlement).
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

	ctx     context.Context  // the delivery's (Hooks.Delivery); nil when no hook is set
	handled time.Time        // when the handler returned; zero when no hook is set
	written time.Time        // when a batched writer's call returned; zero: report reads the clock
	outputs *[]source.Output // a reply's outputs, written again if its write fails (a pointer: Settled stays comparable)
}

// Final reports whether the message reached a final state with this settlement: acked,
// dropped, rejected, lost or dead-lettered, and applied without error.
func (s Settled) Final() bool {
	return s.Err == nil && (s.Action.completes() || s.Action == ActionDeadLetter || s.Action == ActionReply)
}
