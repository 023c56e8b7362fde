package settle

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// OutcomeKind is what a handler asks for one delivery.
type OutcomeKind string

// The outcomes.
const (
	// OutcomeAck completes the delivery.
	OutcomeAck OutcomeKind = "ack"
	// OutcomeDrop completes the delivery with a warning; it never goes to a dead letter.
	OutcomeDrop OutcomeKind = "drop"
	// OutcomeRetry asks for another delivery now.
	OutcomeRetry OutcomeKind = "retry"
	// OutcomeRetryAfter asks for another delivery after a delay, without holding up the
	// deliveries behind it.
	OutcomeRetryAfter OutcomeKind = "retry_after"
)

// Outcome is what a handler asked, as classified by OutcomeOf.
type Outcome struct {
	// Delay is the wait asked by RetryAfter; for a plain error, the engine sets the
	// mount's backoff here (OutcomeOf leaves it zero).
	Delay time.Duration
	// Err is the handler's error (nil for Ack).
	Err error
	// Kind is the outcome.
	Kind OutcomeKind
}

// OutcomeError carries an outcome through an error chain. Drop, Retry and RetryAfter
// return one; errors.As finds it through any %w wrapping, so code deep inside a handler
// can decide how its delivery settles.
type OutcomeError struct {
	// Delay is the wait of a RetryAfter outcome.
	Delay time.Duration
	// Err is the cause, kept for logs and the dead letter; it may be nil.
	Err error
	// Kind is the outcome asked for.
	Kind OutcomeKind
}

// Error implements error.
func (e *OutcomeError) Error() string {
	var s string
	if e.Kind == OutcomeRetryAfter {
		s = fmt.Sprintf("settle: %s %s", e.Kind, e.Delay)
	} else {
		s = "settle: " + string(e.Kind)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *OutcomeError) Unwrap() error { return e.Err }

// Is reports whether target is an *OutcomeError of the same kind, so
// errors.Is(err, &settle.OutcomeError{Kind: settle.OutcomeDrop}) tests for a Drop.
func (e *OutcomeError) Is(target error) bool {
	t, ok := target.(*OutcomeError)
	return ok && t.Kind == e.Kind
}

// Drop returns an error that completes the delivery with a warning. The message goes
// nowhere: Drop never dead-letters. err (may be nil) is logged.
func Drop(err error) error { return &OutcomeError{Kind: OutcomeDrop, Err: err} }

// Retry returns an error that asks for another delivery now, without the mount's
// backoff; a plain error asks for one after the backoff (Backoff; DefaultBackoff by
// default), and RetryAfter after a delay of its own. How the retry happens depends on
// the transport (see the README's table): a stream appends a copy with the retry count
// + 1, a claiming stream leaves the entry pending until its min-idle passes, a reliable
// list moves the item back, an inbox clears the row's lease; with an attempts cap every
// Redis transport but the claiming stream writes a copy. A List or PubSub without a cap
// cannot retry: the message is lost, with a warning. At the cap the delivery is
// dead-lettered.
func Retry(err error) error { return &OutcomeError{Kind: OutcomeRetry, Err: err} }

// RetryAfter returns an error that asks for another delivery once d has passed, without
// holding up the deliveries behind it. The wait is kept in-process by default (the
// original stays unacknowledged until the copy is written, so a crash loses nothing
// where the transport keeps pending entries). A d of zero or less is Retry. It spends an
// attempt like Retry.
func RetryAfter(d time.Duration, err error) error {
	if d <= 0 {
		return Retry(err)
	}
	return &OutcomeError{Kind: OutcomeRetryAfter, Delay: d, Err: err}
}

// OutcomeOf classifies a handler's return: nil is Ack; an error carrying an
// *OutcomeError anywhere in its chain is that outcome; any other error (a panic and an
// undecodable payload included) is Retry, and the error is kept.
func OutcomeOf(err error) Outcome {
	o, _ := outcomeOf(err)
	return o
}

// outcomeOf is OutcomeOf, and reports whether err was a plain error: one that asked for
// no outcome (a panic and an undecodable payload included), which the engine retries
// after the mount's backoff.
func outcomeOf(err error) (o Outcome, plain bool) {
	if err == nil {
		return Outcome{Kind: OutcomeAck}, false
	}
	oe, ok := err.(*OutcomeError) // Retry(…) as returned: errors.As's target would cost an allocation
	if !ok {
		oe, ok = outcomeIn(err)
	}
	if ok {
		if oe.Kind == OutcomeAck {
			return Outcome{Kind: OutcomeAck}, false
		}
		if oe.Kind == OutcomeRetryAfter && oe.Delay <= 0 {
			return Outcome{Kind: OutcomeRetry, Err: err}, false
		}
		return Outcome{Kind: oe.Kind, Delay: oe.Delay, Err: err}, false
	}
	return Outcome{Kind: OutcomeRetry, Err: err}, true
}

// DefaultBackoff is the backoff of a mount that sets none (see Backoff): after the n-th
// failed delivery, about 100ms × 2^(n-1), at most a minute, each delay drawn between
// half and all of that, so that messages failing together spread out without any coming
// back sooner than half its step.
func DefaultBackoff(attempt int, _ error) time.Duration {
	d := maxBackoff
	if attempt >= 1 && attempt <= 20 {
		d = min(100*time.Millisecond<<(attempt-1), maxBackoff)
	}
	return d/2 + rand.N(d/2+1)
}

// maxBackoff bounds DefaultBackoff.
const maxBackoff = time.Minute

// outcomeIn finds the *OutcomeError in err's chain.
func outcomeIn(err error) (*OutcomeError, bool) {
	var oe *OutcomeError
	ok := errors.As(err, &oe)
	return oe, ok
}

// Action is what the engine did with a delivery, as Settled reports it.
type Action uint8

// The actions a settlement can take.
const (
	// ActionAck completed the delivery (nil from the handler).
	ActionAck Action = iota + 1
	// ActionDrop completed the delivery with a warning (Drop); it never dead-letters.
	ActionDrop
	// ActionLeave left the delivery pending where it is, to come back once the claiming
	// stream's minIdle has passed.
	ActionLeave
	// ActionPutBack returned the delivery, as it is, to where it was read from (a
	// reliable list's item back to the list, an inbox row's lease cleared).
	ActionPutBack
	// ActionCopy wrote a copy with the retry count + 1 and completed the original.
	ActionCopy
	// ActionPark kept a copy with the retry count + 1 until Settled.Delay has passed: in
	// the process, or in a durable delay set.
	ActionPark
	// ActionDeadLetter moved the delivery to the mount's dead-letter destination.
	ActionDeadLetter
	// ActionReject completed a delivery at the attempts cap, with no dead letter
	// declared, with a warning.
	ActionReject
	// ActionLose completed a delivery whose retry the transport cannot honour (a List or
	// PubSub without MaxAttempts), with a warning: the message is lost.
	ActionLose
	// ActionReply wrote the handler's replies to the mount's ReplyTo destination and
	// completed the original: in one atomic step where both share a store, else the
	// replies published first (see ReplyVia).
	ActionReply
)

// String returns the action's name as logs show it: "ack", "put_back", "dead_letter", ….
func (a Action) String() string { return source.Action(a).String() }

// completes reports whether the action ends the delivery's life in its source with no
// further copy anywhere (ack, drop, reject, lose): the engine applies it with Ack.
func (a Action) completes() bool {
	return a == ActionAck || a == ActionDrop || a == ActionReject || a == ActionLose
}

// settlement is the engine's decision for one delivery.
type settlement struct {
	Action Action
	// Delay is how long a parked copy waits (ActionPark), the wait a left-in-place
	// delivery gets instead of the asked delay (ActionLeave after RetryAfter), or how long
	// a retry in place waits before its handler runs again (InPlace).
	Delay time.Duration
	// InPlace: the engine runs the handler again itself, once Delay has passed, the entry
	// left pending meanwhile and no move written (ActionLeave on an Ordered mount: a copy
	// would go behind the key's later messages).
	InPlace bool
	// Reason says why, for logs and the dead-letter reason header.
	Reason string
}

// decide is the settlement engine's whole decision: given what the handler asked, the
// delivery's attempt (1-based, the first delivery included), the mount's policy and
// what the transport can do, it returns what to do. It is pure; transports only apply
// its answer. On an Ordered mount a retry that would write a copy, at once or after a
// delay, is run again in place instead, after the same delay (InPlace).
func decide(o Outcome, attempt int, p source.Policy, c source.Caps) settlement {
	s := decideMove(o, attempt, p, c)
	if p.Ordered && (s.Action == ActionCopy || s.Action == ActionPark) {
		return settlement{Action: ActionLeave, Delay: s.Delay, InPlace: true, Reason: s.Reason}
	}
	return s
}

// decideMove is decide as a mount that does not retry in place decides.
func decideMove(o Outcome, attempt int, p source.Policy, c source.Caps) settlement {
	switch o.Kind {
	case OutcomeAck:
		return settlement{Action: ActionAck}
	case OutcomeDrop:
		return settlement{Action: ActionDrop, Reason: "dropped by handler"}
	}
	// Retry or RetryAfter: first the cap.
	if p.MaxAttempts > 0 && attempt >= p.MaxAttempts {
		reason := fmt.Sprintf("max attempts reached (%d of %d)", attempt, p.MaxAttempts)
		if p.DeadLetter != "" {
			return settlement{Action: ActionDeadLetter, Reason: reason}
		}
		return settlement{Action: ActionReject, Reason: reason + ", no dead letter declared"}
	}
	if p.MaxAttempts == 0 && p.DeadLetter != "" {
		return settlement{Action: ActionDeadLetter, Reason: "failed with no attempts cap declared"}
	}
	// A delay: RetryAfter's, or the backoff of a plain error (Retry with a Delay), which
	// a transport that cannot retry without a cap loses like any Retry.
	delayed := o.Delay > 0 && (o.Kind == OutcomeRetryAfter ||
		o.Kind == OutcomeRetry && (p.MaxAttempts > 0 || c.RetryWithoutCap != source.ActionLose))
	if delayed && o.Kind == OutcomeRetry && c.DeliveryCounter && !c.Parks {
		return settlement{Action: ActionLeave, Delay: c.MinIdle, Reason: "retry after min-idle"}
	}
	if delayed {
		if refused := delayRefusal(o.Delay, p); refused != "" {
			s := decideMove(Outcome{Kind: OutcomeRetry, Err: o.Err}, attempt, p, c)
			s.Reason = refused + " (" + s.Reason + ")"
			return s
		}
		if c.DeliveryCounter && !c.Parks {
			return settlement{Action: ActionLeave, Delay: c.MinIdle, Reason: "delay kept as min-idle"}
		}
		if o.Kind == OutcomeRetry {
			return settlement{Action: ActionPark, Delay: o.Delay, Reason: "retry after backoff"}
		}
		return settlement{Action: ActionPark, Delay: o.Delay, Reason: "retry after delay"}
	}
	switch {
	case c.DeliveryCounter:
		return settlement{Action: ActionLeave, Delay: c.MinIdle, Reason: "retry after min-idle"}
	case p.MaxAttempts > 0 && !(c.RetriesInPlace && c.RetryWithoutCap == source.ActionPutBack):
		return settlement{Action: ActionCopy, Reason: "retry"}
	case c.RetryWithoutCap == source.ActionLose:
		return settlement{Action: ActionLose, Reason: "retry cannot be honoured without an attempts cap: message lost"}
	default:
		return settlement{Action: Action(c.RetryWithoutCap), Reason: "retry"}
	}
}

// delayRefusal says why a RetryAfter delay cannot be kept where the mount keeps its
// delays, or returns "" when it can. A delay longer than a DurableZset's TTL would be
// lost with the set, so it is refused and the delivery retried at once instead.
func delayRefusal(delay time.Duration, p source.Policy) string {
	if dz, ok := p.Delay.(delayed.DurableZset); ok && dz.TTL > 0 && delay > dz.TTL {
		return fmt.Sprintf("delay %s refused: it exceeds the TTL %s of the delay set %q (raise DurableZset.TTL); retried now instead", delay, dz.TTL, dz.Key)
	}
	return ""
}

// spentByCrashes reports whether a delivery arrives with its attempts already spent by
// deliveries that never settled. Only a transport whose attempt counts unsettled
// deliveries (Caps.CountsUnsettled: a claiming stream's delivery counter, an inbox
// claiming a row whose lease passed) can show it: the message was delivered before by
// the transport (its attempt is past the retry-count header's share; a table has no
// such header) and that previous delivery was already at or past the cap, yet the
// message comes again, so the consumer handling it crashed, hung, or could not write its
// settlement. The handler is not run again (a message that kills its consumer would
// otherwise come back forever): the engine settles the delivery as a failure at the
// cap. A stream entry that arrives with a high retry count on its first delivery (a
// dead letter replayed as it is) still runs.
func spentByCrashes(d *source.Delivery, p source.Policy, c source.Caps) bool {
	return c.CountsUnsettled && p.MaxAttempts > 0 && d.Attempt > p.MaxAttempts && d.Attempt-d.RetryCount > 1
}
