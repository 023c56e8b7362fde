// Package source is the seam between settle's engine and its transports (Redis streams,
// lists, pub/sub, SQL inboxes). It is not for users and may change in any release: users
// see it only through the sealed settle.Source interface.
//
// A transport fetches deliveries and offers a few primitives on one delivery: ack it,
// write a retry copy of it (and ack the original in the same atomic step), move it to a
// dead letter, and, through optional capability interfaces, put it back in place or park
// a copy until a time. It never decides which: the engine does, from the handler's
// outcome, the delivery's attempt, the mount's policy and the transport's Caps.
package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/clock"
)

// Kind names what a transport reads; dead letters go to a destination of the same kind.
type Kind string

// The transport kinds.
const (
	KindStream  Kind = "stream"
	KindList    Kind = "list"
	KindChannel Kind = "channel"
	KindTable   Kind = "table"
)

// Delivery is one message handed to a handler once.
type Delivery struct {
	// Attempt counts deliveries of this message, the first included (1-based).
	Attempt int
	// Headers are the message's headers as they arrived (never nil).
	Headers map[string]string
	// HasPayload is false when the message arrived with no payload (a foreign stream
	// entry without the payload field).
	HasPayload bool
	// ID identifies the delivery in its transport (a stream entry id, a row id, …).
	ID string
	// Key is where the message was read from: a stream or list key, a channel, a table.
	Key string
	// Payload is the message body as it arrived.
	Payload []byte
	// RetryCount is the retry-count header's value as it arrived (0 when absent).
	RetryCount int
	// Raw is whatever the transport needs to settle this delivery later.
	Raw any
}

// Info describes a transport for the engine, logs and startup validation.
type Info struct {
	Caps  Caps
	Group string
	Key   string
	Kind  Kind
}

// Caps says what a transport can do with a retry; the engine's decision reads it.
type Caps struct {
	// DeliveryCounter: the transport counts deliveries itself (a claiming stream's
	// delivery counter); a retry leaves the message in place and never copies it.
	DeliveryCounter bool
	// CountsUnsettled: the transport's attempt counts deliveries that never settled too
	// (a stream's delivery counter on re-read or claimed entries; an inbox's claim of a
	// row whose lease passed adds one attempt), so a delivery can arrive with its
	// attempts already spent by consumers that crashed, hung or could not write their
	// settlement. The engine then dead-letters it at the cap without running the
	// handler (see settle's spentByCrashes).
	CountsUnsettled bool
	// MinIdle is how long a left-in-place message waits before it comes back (claiming).
	MinIdle time.Duration
	// Parks: the transport keeps RetryAfter delays itself, durably (it implements
	// Parker): a stream with a durable delay set, a SQL inbox's retry_after column. Without
	// it the engine keeps delays in-process.
	Parks bool
	// RetryWithoutCap is what a Retry does when the mount declares no attempts cap.
	RetryWithoutCap Action
}

// Transport is one mount's connection to where its messages live.
type Transport interface {
	// Info describes the transport.
	Info() Info
	// Validate checks the transport against the mount's policy before anything starts;
	// every refusal is returned.
	Validate(p Policy) []error
	// Open prepares the transport (creates a consumer group, …). Called once by Run.
	Open(ctx context.Context) error
	// Fetch returns up to max deliveries, waiting at most wait for the first one. It
	// returns (nil, nil) when nothing came.
	Fetch(ctx context.Context, max int, wait time.Duration) ([]*Delivery, error)
	// Ack completes deliveries: their messages go nowhere. An error applies to every
	// delivery unless it is an *AckErrors, which says which failed.
	Ack(ctx context.Context, ds []*Delivery) error
	// Copy writes a copy of d, with the given headers, to the transport's retry
	// destination and completes d, in one atomic step.
	Copy(ctx context.Context, d *Delivery, headers map[string]string) error
	// DeadLetter writes d, with the given headers, to dest (a destination of the
	// transport's kind) and completes d, in one atomic step.
	DeadLetter(ctx context.Context, d *Delivery, dest string, headers map[string]string) error
	// Close releases what Open took. Called once, after every settlement.
	Close(ctx context.Context) error
}

// PutBacker is a transport that can return a delivery to where it was read from, as
// it is (a reliable list moves the item back from its processing list).
type PutBacker interface {
	PutBack(ctx context.Context, d *Delivery) error
}

// Leaver is a transport that leaves a retried delivery pending where it is, to come
// back once Caps.MinIdle has passed (a claiming stream). The engine calls Leave for
// ActionLeave: the transport stops tracking the delivery as in flight and restarts its
// wait. A transport that needs neither does not implement it.
type Leaver interface {
	Leave(ctx context.Context, d *Delivery) error
}

// Policy is what a mount declares about retries and dead letters.
type Policy struct {
	// DeadLetter is the dead-letter destination; empty means none.
	DeadLetter string
	// DeadLetterMaxLen bounds a dead-letter stream (approximate trimming); 0: unbounded.
	DeadLetterMaxLen int64
	// Delay is where RetryAfter delays wait (never nil once the App has prepared the
	// mount).
	Delay delayed.Strategy
	// MaxAttempts caps deliveries, the first included; 0 means no cap.
	MaxAttempts int
}

// Action is what the engine does with one delivery.
type Action uint8

// The actions. Transports only apply them.
const (
	// ActionAck completes the delivery.
	ActionAck Action = iota + 1
	// ActionDrop completes the delivery and logs a warning; it never dead-letters.
	ActionDrop
	// ActionLeave leaves the delivery pending where it is; the transport brings it back
	// (a claiming stream after MinIdle).
	ActionLeave
	// ActionPutBack returns the delivery to where it was read from, as it is.
	ActionPutBack
	// ActionCopy writes a copy with the retry count + 1 and completes the original.
	ActionCopy
	// ActionPark keeps a copy with the retry count + 1 until Delay has passed.
	ActionPark
	// ActionDeadLetter moves the delivery to the mount's dead-letter destination.
	ActionDeadLetter
	// ActionReject completes a delivery that reached the cap with no dead letter declared,
	// with a warning.
	ActionReject
	// ActionLose completes a delivery whose retry the transport cannot honour, with a
	// warning: the message is lost.
	ActionLose
)

var actionNames = [...]string{"", "ack", "drop", "leave", "put_back", "copy", "park", "dead_letter", "reject", "lose"}

// String returns the action's name as logs show it.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// Completes reports whether the action ends the delivery's life in its source with no
// further copy anywhere (ack, drop, reject, lose).
func (a Action) Completes() bool {
	return a == ActionAck || a == ActionDrop || a == ActionReject || a == ActionLose
}

// Settlement is the engine's decision for one delivery.
type Settlement struct {
	Action Action
	// Delay is how long a parked copy waits (ActionPark), or the wait a left-in-place
	// delivery gets instead of the asked delay (ActionLeave after RetryAfter).
	Delay time.Duration
	// Reason says why, for logs and the dead-letter reason header.
	Reason string
}

// Env is what a transport gets from the App that mounts it.
type Env struct {
	// Clock is the App's clock (the wall clock unless a test injected one).
	Clock clock.Clock
	// Logger is the App's logger.
	Logger *slog.Logger
	// Mount names the mount.
	Mount string
	// Policy is the mount's retry and dead-letter policy.
	Policy Policy
	// TestClock is the clock a test injected (Config.Test.Clock), nil in production:
	// a transport whose "now" comes from its server (Redis TIME, the database clock)
	// uses it instead when set.
	TestClock clock.Clock
}

// Parker is a transport that can keep a copy of a delivery in a durable delay store
// until delay has passed, completing the original in the same atomic step.
type Parker interface {
	Park(ctx context.Context, d *Delivery, headers map[string]string, delay time.Duration) error
}
