// Package source is the seam between settle's engine and its transports (Redis streams,
// lists, pub/sub, SQL inboxes, the test kit's in-memory broker). It is not for users and
// may change in any release: users see it only through the sealed settle.Source
// interface, whose one method hands a transport its Env.
//
// # What a transport does
//
// A transport reads deliveries and applies settlements; it never decides one. The
// engine calls, in this order and from these goroutines:
//
//   - Info, once, before anything else, and Validate, once, with the mount's Policy:
//     return every refusal of the transport's own settings (a nil client, an empty key,
//     keys that must share a cluster slot). The engine checks Info itself: the Caps
//     must agree with each other, and a durable delay needs Caps.Parks.
//   - Open, once, from Run (create a consumer group, start a heartbeat).
//   - Fetch, from one goroutine per mount, one call at a time: up to max deliveries,
//     blocking at most wait for the first.
//   - FetchAhead (a ReadAhead transport's), from other goroutines, concurrently with
//     Fetch: new deliveries only, never blocking, while Fetch's last read came back full.
//   - Paused, from the same goroutine, between Fetches, at most once per second of
//     the App's clock: whether an operator paused the mount from outside the process
//     (a control key beside the source, a control row in the inbox's table). While it
//     answers true the engine fetches nothing (what the mount holds still settles);
//     an error keeps the last answer.
//   - Ack and Moves, from other goroutines, concurrently with Fetch and with each
//     other: Ack completes deliveries (ack, drop, a rejected or lost one); Moves applies
//     every other settlement, one Move each, in a batch (Info.BatchesMoves) or one at a
//     time.
//   - Close, once, after every settlement has been applied or has failed.
//
// # The settlements
//
// Each Move is one atomic step, answered on its own: its write and the completion of
// its delivery happen together (one Lua script with all its keys in one hash slot, one
// SQL transaction, or one statement), or not at all, and a move that fails fails for
// its delivery only. A move is fenced: a delivery another consumer has taken over since
// (a claimed stream entry, a recovered list item, a lease that passed) writes nothing
// and fails. The actions a move carries:
//
//   - ActionCopy: write a copy with Headers (the engine sets the retry count) to where
//     the delivery came from (or the transport's retry destination) and complete the
//     original.
//   - ActionDeadLetter: write the delivery with Headers to Dest, a destination of the
//     transport's Kind, and complete the original.
//   - ActionPark: keep a copy with Headers in the transport's durable delay store until
//     Delay has passed, and complete the original. Sent only when Caps.Parks.
//   - ActionPutBack: return the delivery, as it is (but for hooks' headers, see
//     Move.Headers), to where it was read from. Sent only when Caps.RetryWithoutCap
//     is ActionPutBack.
//   - ActionLeave: leave the delivery pending where it is, to come back once
//     Caps.MinIdle has passed. Sent only when Caps.DeliveryCounter.
//   - ActionReply: write Outputs to Policy.ReplyTo, a destination of the transport's
//     Kind in its own store, and complete the original, all in one atomic step. Sent
//     only when Caps.Replies.
//   - ActionRelease: at a graceful stop, hand back a delivery that was read but never
//     started, as if it had not been delivered (no attempt spent). Sent only when
//     Caps.Releases.
//
// Until Ack or Moves has answered for a delivery, it is in flight: the transport must
// not hand it out again (a re-read of its own pending entries skips it). A settlement
// that failed leaves the message where the transport keeps it, and the transport
// delivers it again (re-reading its pending entries, its processing list, or letting its
// lease pass).
//
// # What a transport may touch
//
// Its own keys or tables, named from the source's arguments, and nothing else; "now"
// comes from its server (Redis TIME, the database clock) or, under a test, from
// Env.TestClock. It logs through Env.Logger. A transport that takes over deliveries a
// dead consumer left (a claim, a recovery) hands them to the engine as deliveries like
// any other, their Attempt counting the deliveries that never settled
// (Caps.CountsUnsettled): the engine decides what becomes of them, reports and counts
// them.
//
// # How it is proved
//
// Every transport runs internal/sourcetest's conformance suite (ack, drop, retry,
// retry after a delay, the cap and the dead letter, undecodable payloads, panics, the
// graceful drain) through settle's public API, with Features naming the differences it
// is allowed; internal/soak kills a worker before and after each settlement call and
// checks every message ends in exactly one place.
package source

import (
	"context"
	"errors"
	"fmt"
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

// Transport is one mount's connection to where its messages live.
type Transport interface {
	// Info describes the transport. The engine may make a transport only to read its
	// Info (to name the mount): making one starts nothing.
	Info() Info
	// Validate checks the transport against the mount's policy before anything starts;
	// every refusal is returned.
	Validate(p Policy) []error
	// Open prepares the transport (creates a consumer group, …). Called once by Run.
	Open(ctx context.Context) error
	// Fetch returns up to max deliveries, waiting at most wait for the first one (a
	// negative wait: not at all). It returns (nil, nil) when nothing came.
	Fetch(ctx context.Context, max int, wait time.Duration) ([]*Delivery, error)
	// Paused reports whether the mount is paused from outside the process: a Redis
	// source's control key (keys.Paused) exists, an inbox's control row is there. It
	// is one round trip, and reads nothing else. A transport that cannot be paused
	// returns (false, nil) and says why in its docs.
	Paused(ctx context.Context) (bool, error)
	// Ack completes deliveries: their messages go nowhere. An error applies to every
	// delivery unless it is an *AckErrors, which says which failed.
	Ack(ctx context.Context, ds []*Delivery) error
	// Moves applies every other settlement, one Move each, and returns each move's
	// error in order (nil: applied). It returns once every move is written or has
	// failed.
	Moves(ctx context.Context, ms []Move) []error
	// Close releases what Open took. Called once, after every settlement.
	Close(ctx context.Context) error
}

// Info describes a transport for the engine, logs and startup validation.
type Info struct {
	// Batch is the most deliveries one Fetch returns; the engine asks for no more, and
	// holds up to twice as many read ahead by default.
	Batch int
	// BatchesMoves: a Moves call of many moves costs about what one costs (one script
	// call, one pipeline). The engine then queues the moves of the mount's handlers and
	// hands them over in batches, so that a handler does not wait for its move's round
	// trip; without it, the engine calls Moves with one move at a time, from the
	// handlers' goroutines, so that the writes stay concurrent.
	BatchesMoves bool
	// Block is the longest one Fetch blocks; it also bounds how long a graceful
	// shutdown waits for a read in progress.
	Block time.Duration
	// Caps says what the transport can do with a retry.
	Caps Caps
	// Group is the consumer group (or the inbox group) read, if any.
	Group string
	// Key is what is read: a stream or list key, a channel or pattern, a table.
	Key string
	// Kind is what the transport reads.
	Kind Kind
	// Pool is what the mount holds of its client's connection pool while it waits for
	// work (zero: nothing counted).
	Pool Pool
}

// Pool is what one mount holds of a client's connection pool while it waits for work:
// the engine adds up the mounts that share a client and warns at Run when they hold it
// all.
type Pool struct {
	// Client is the client, compared by identity.
	Client any
	// Held is how many connections the mount holds while it waits (a blocking read).
	Held int
	// Size is the client's pool size (0: unknown, not counted).
	Size int
}

// Caps says what a transport can do with a retry; the engine's decision reads it.
type Caps struct {
	// CountsUnsettled: the transport's attempt counts deliveries that never settled too
	// (a stream's delivery counter on re-read or claimed entries, a reliable list's
	// recovery of a dead consumer's items, an inbox's claim of a row whose lease passed),
	// so a delivery can arrive with its attempts already spent by consumers that
	// crashed, hung or could not write their settlement. The engine then dead-letters it
	// at the cap without running the handler.
	CountsUnsettled bool
	// DeliveryCounter: the transport counts deliveries itself (a claiming stream's
	// delivery counter); a retry leaves the message in place (ActionLeave) and never
	// copies it. RetryWithoutCap must then be ActionLeave and MinIdle positive.
	DeliveryCounter bool
	// MinIdle is how long a left-in-place message waits before it comes back.
	MinIdle time.Duration
	// Parks: the transport keeps RetryAfter delays itself, durably (it applies
	// ActionPark): a Redis source with a durable delay set, a SQL inbox's retry_after
	// column. Without it the engine keeps delays in-process and writes an ActionCopy
	// once each is due.
	Parks bool
	// Replies: the transport writes a delivery's replies (ActionReply) to a destination
	// of its own Kind in its own store (a stream in the source's hash slot, a list, a
	// group or table of the same database, a topic of the same broker) atomically with
	// the completion of the original. Without it the engine publishes replies through
	// the mount's replier, then completes the original.
	Replies bool
	// Releases: the transport hands back deliveries read and never started
	// (ActionRelease) without spending an attempt. Without it, a graceful stop runs them
	// before it returns.
	Releases bool
	// RetriesInPlace: the transport counts attempts in the message itself (a table's
	// attempt column), so a Retry under a cap is RetryWithoutCap's put-back too, not a
	// copy: the logs and reports then name what is written.
	RetriesInPlace bool
	// WritesErrors: the transport writes a retry's error text with the message (a
	// table's last-error column), so copies, parks and put-backs carry Move.Err. Without
	// it the engine leaves their Err empty and formats no error per retry; a dead letter
	// always carries it.
	WritesErrors bool
	// RetryWithoutCap is what a Retry does when the mount declares no attempts cap:
	// ActionCopy, ActionPutBack, ActionLeave or ActionLose.
	RetryWithoutCap Action
}

// Delivery is one message handed to a handler once.
type Delivery struct {
	// Attempt counts deliveries of this message, the first included (1-based); where the
	// transport counts unsettled deliveries (Caps.CountsUnsettled), those too.
	Attempt int
	// DedupKey, set by the engine (settle.Dedupe) on a delivery it completes by an ack or
	// a reply, is the key the transport marks completed for Policy.DedupWindow in the
	// same atomic step as the completion (see Deduper); "" for none.
	DedupKey string
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
	// TakenOver: the transport took the delivery over from a consumer that held it and
	// never settled it (one that crashed or stalled: a stream entry claimed from another
	// consumer, a dead consumer's reliable list item, an inbox row whose lease passed).
	// It may be what killed that consumer, so the engine runs it alone: nothing else of
	// the mount held (running, read ahead, being settled) from its start to its
	// settlement, and nothing read meanwhile; should it kill this process too, the crash
	// is charged to it only. A transport hands over one such delivery at a time, the
	// next once the last has settled, since what it holds beside it would be charged too.
	TakenOver bool
	// RetryCount is the retry-count header's value as the message arrived at the first
	// of its deliveries that count toward Attempt (0 when absent): Attempt −
	// RetryCount − 1 deliveries of it never settled.
	RetryCount int
	// Raw is whatever the transport needs to settle this delivery later.
	Raw any
	// Redelivered: an earlier delivery of the message never settled (re-read from this
	// consumer's pending entries, claimed, recovered, or a lease that passed).
	Redelivered bool
}

// Move is one settlement other than a completion, as the engine asks a transport to
// apply it; see the package doc for what each Action writes.
type Move struct {
	// Action is ActionCopy, ActionDeadLetter, ActionPark, ActionPutBack or ActionLeave.
	Action Action
	// Delay is how long a parked copy waits (ActionPark).
	Delay time.Duration
	// Delivery is the delivery the move settles.
	Delivery *Delivery
	// Dest is the dead-letter destination (ActionDeadLetter).
	Dest string
	// Err is the text of the error the handler returned, cut at 4 KiB as
	// settle.HeaderDeadError is (ActionDeadLetter; ActionCopy, ActionPark and
	// ActionPutBack too when Caps.WritesErrors); "" for none. A table inbox writes it to
	// its last-error column.
	Err string
	// Headers are the written message's headers (ActionCopy, ActionDeadLetter,
	// ActionPark; ActionPutBack too when Caps.RetriesInPlace and a Move hook is set,
	// nil otherwise): a transport that keeps headers with a message in place (an
	// inbox's headers column) writes the hooks' (settle.HeaderHookPrefix) among them.
	Headers map[string]string
	// Outputs are the replies written to Policy.ReplyTo (ActionReply), in order.
	Outputs []Output
}

// Output is one reply a handler returned: a message to write to the mount's reply
// destination, encoded by the engine.
type Output struct {
	// Headers are the reply's headers (never nil).
	Headers map[string]string
	// Payload is the reply's payload, encoded with the mount's codec.
	Payload []byte
}

// EachMove applies ms one at a time with apply, for a transport whose moves are one
// write each, and returns their errors in order.
func EachMove(ms []Move, apply func(m Move) error) []error {
	errs := make([]error, len(ms))
	for i, m := range ms {
		errs[i] = apply(m)
	}
	return errs
}

// UnsupportedMove is the error of a move whose action the transport does not apply. The
// engine never sends one (its validation checks the Caps); a transport returns it
// rather than guess.
func UnsupportedMove(kind Kind, m Move) error {
	return fmt.Errorf("%s transport cannot apply %s to %s", kind, m.Action, m.Delivery.ID)
}

// Policy is what a mount declares about retries and dead letters.
type Policy struct {
	// DeadLetter is the dead-letter destination; empty means none.
	DeadLetter string
	// DeadLetterMaxLen bounds a dead-letter stream (approximate trimming); 0: unbounded.
	DeadLetterMaxLen int64
	// DedupWindow is how long a completion mark lives (settle.Dedupe): positive only on
	// a transport that is a Deduper; 0: no marks.
	DedupWindow time.Duration
	// Delay is where RetryAfter delays wait (never nil once the App has prepared the
	// mount).
	Delay delayed.Strategy
	// FlowLimits: the mount has flow limits (settle.RateLimit, RateLimitBy,
	// ConcurrencyBy, GlobalConcurrency), so a Limiter checks at Open that it can keep
	// their state (the inbox: its limit table).
	FlowLimits bool
	// MaxAttempts caps deliveries, the first included; 0 means no cap.
	MaxAttempts int
	// Ordered: a key's deliveries run one at a time (settle.Ordered), so a retry runs
	// again in place, by the engine, its entry left pending; a transport sees no move
	// for it.
	Ordered bool
	// ReplyTo is where replies go (ActionReply); empty means nowhere. A transport with
	// Caps.Replies validates it as a destination of its own store.
	ReplyTo string
}

// Action is what the engine does with one delivery; settle.Action has the same values
// (a test keeps them in step), and the engine converts between the two.
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
	// ActionReply writes the delivery's replies (Move.Outputs) to Policy.ReplyTo and
	// completes the original, atomically. Sent only when Caps.Replies.
	ActionReply
	// ActionRelease hands back a delivery that was read but never started, at a graceful
	// stop, as if it had not been delivered: no attempt is spent. It is the seam's alone
	// (not a settlement: nothing is reported) and sent only when Caps.Releases.
	ActionRelease
)

var actionNames = [...]string{"", "ack", "drop", "leave", "put_back", "copy", "park", "dead_letter", "reject", "lose", "reply", "release"}

// String returns the action's name as logs show it.
func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// Env is what a transport gets from the App that mounts it.
type Env struct {
	// Clock is the App's clock (the wall clock unless a test injected one).
	Clock clock.Clock
	// Event, when set, receives the transport's events (see Emit).
	Event func(ctx context.Context, e Event)
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

// Deduper is a transport that keeps settle.Dedupe's completion marks beside its source
// (a sorted set in the source's hash slot, a table of the inbox's database): the engine
// refuses Dedupe on a transport that is not one. Its Ack, and its ActionReply where it
// has Caps.Replies, mark each delivery's DedupKey completed for Policy.DedupWindow in
// the same atomic step as the completion, and only if the completion applied: a crash
// may leave a key unmarked and its handler run again (at least once), never marked and
// its message not completed.
type Deduper interface {
	// Completed reports, for each of keys in order, whether a mark of it written within
	// the window still lives ("now" from the transport's server, or Env.TestClock). It
	// writes nothing.
	Completed(ctx context.Context, keys []string) ([]bool, error)
}

// AckErrors is the error of a Transport.Ack call that failed for some of its deliveries
// only: Errs lines up with the deliveries given to Ack, and a nil entry means that
// delivery's ack applied. A transport returns it when one call settles a batch whose
// deliveries can fail one by one (a reliable list's ack of an item another consumer
// already recovered).
type AckErrors struct {
	Errs []error
}

// Error summarises the failed acks.
func (e *AckErrors) Error() string {
	n, first := 0, error(nil)
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	return fmt.Sprintf("%d of %d acks failed; first: %v", n, len(e.Errs), first)
}

// AckError returns the error of the i-th delivery of an Ack call that returned err:
// its own entry of an *AckErrors, else err itself (the whole call failed or applied).
func AckError(err error, i int) error {
	if err == nil {
		return nil // the common case, kept free of errors.As's allocation
	}
	var each *AckErrors
	if errors.As(err, &each) {
		if i < len(each.Errs) {
			return each.Errs[i]
		}
	}
	return err // the whole call failed (or a transport gave too few entries)
}

// ErrTakenOver is what errors.Is finds in a settlement refused because another consumer
// has taken its delivery over (an entry claimed away from this consumer, a partition's
// lease lost): nothing was written, and that consumer now settles the message. Each
// transport keeps its own error for it (TakenOver).
var ErrTakenOver = errors.New("taken over by another consumer")

// TakenOver returns an error saying msg that errors.Is reports as ErrTakenOver.
func TakenOver(msg string) error { return takenOver(msg) }

type takenOver string

func (e takenOver) Error() string        { return string(e) }
func (e takenOver) Is(target error) bool { return target == ErrTakenOver }
