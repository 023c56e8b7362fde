package settle

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/settlekit/settle/internal/batch"
	"github.com/settlekit/settle/internal/clock"
	"github.com/settlekit/settle/internal/source"
)

// Message is one delivery of a message to a handler.
type Message struct {
	// Attempt counts deliveries of this message, the first included: 1 on the first
	// delivery. A claiming stream counts with Redis's delivery counter; every other
	// transport with the retry-count header its copies carry.
	Attempt int
	// Headers are the message's headers as they arrived (never nil). Settle's own
	// headers start with HeaderPrefix.
	Headers map[string]string
	// ID identifies the delivery in its transport: a stream entry id, a row id, ….
	ID string
	// Key is where the message was read from: a stream or list key, a channel, a table.
	Key string
	// Payload is the message body as it arrived.
	Payload []byte

	codec     Codec
	outputs   []source.Output // the replies the handler added (see Message.Reply)
	mount     *mount          // the mount it was read by (nil: a Message a test built)
	noPayload bool            // the message arrived without a payload field (or as an invalid envelope)
	takenOver bool            // taken over from a consumer that never settled it: runs alone
}

// replyTo is the ReplyTo of the mount that read m ("" for none, or for a Message a test
// built). Read from the mount, not kept in each Message: every delivery allocates one.
func (m *Message) replyTo() string {
	if m.mount == nil {
		return ""
	}
	return m.mount.cfg.replyTo
}

// Decode decodes the payload into v (a pointer) with the mount's codec. A message that
// arrived without a payload field, or a payload the codec refuses, returns a
// *DecodeError; returned from a handler it spends an attempt like any failure.
func (m *Message) Decode(v any) error {
	c := m.codec
	if c == nil {
		c = Msgpack
	}
	if m.noPayload {
		if why, ok := m.Headers[HeaderInvalidEnvelope]; ok {
			return &DecodeError{Codec: c.Name(), Err: errors.New("list item or channel message is not a valid settle envelope: " + why)}
		}
		return &DecodeError{Codec: c.Name(), Err: errNoPayload}
	}
	if err := c.Unmarshal(m.Payload, v); err != nil {
		return &DecodeError{Codec: c.Name(), Err: err}
	}
	return nil
}

// Handler handles one delivery. Its return decides the settlement: nil acks; Drop,
// Retry and RetryAfter (through any %w wrapping) ask for those outcomes; any other
// error retries and is kept for the dead letter. A panic is recovered and retried.
//
// ctx is cancelled with the cause ErrDrainTimeout when a graceful shutdown's
// drain timeout passes before the handler returns.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f(ctx, m).
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a Handler, as net/http middleware wraps an http.Handler.
type Middleware func(next Handler) Handler

// Typed returns a Handler that decodes each payload into a T with the mount's codec
// (msgpack unless the mount says otherwise) and calls fn with it. A payload that does not
// decode is not passed to fn: it settles as a failure (Retry with a *DecodeError) and so
// spends an attempt, reaching the dead letter at the cap.
func Typed[T any](fn func(ctx context.Context, m *Message, v T) error) Handler {
	if fn == nil {
		return HandlerFunc(nil) // refused by Validate
	}
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		var v T
		if err := m.Decode(&v); err != nil {
			return err
		}
		return fn(ctx, m, v)
	})
}

// BatchFunc handles a batch of deliveries at once (see HandleBatch). Its return settles
// every message of the batch alike, as a Handler's return settles its one delivery
// (nil acks them all), unless it is PerMessage's, which settles each by its own.
type BatchFunc func(ctx context.Context, ms []*Message) error

// BatchErrors is the error of PerMessage: one error per message of a batch, in order.
type BatchErrors struct {
	// Errs holds the error of each message, in the batch's order (nil acks it).
	Errs []error
}

// Error implements error.
func (e *BatchErrors) Error() string {
	failed := 0
	for _, err := range e.Errs {
		if err != nil {
			failed++
		}
	}
	return fmt.Sprintf("settle: batch: %d of %d messages failed", failed, len(e.Errs))
}

// PerMessage returns the error a batch handler returns to settle each message by its
// own error: errs[i] settles ms[i] as a Handler's return would (nil acks; Drop, Retry,
// RetryAfter ask for those outcomes; any other error retries). errs must hold one error
// per message: a batch handler that returns another count settles every message of its
// batch as a failure saying so.
func PerMessage(errs []error) error { return &BatchErrors{Errs: errs} }

// HandleBatch returns a Handler that hands fn up to size deliveries of its mount at
// once, for bulk work such as one multi-row insert. Deliveries join a batch as their
// workers start them; the first one waits at most linger for the batch to fill, then
// fn runs with the batch. Each message still settles on its own, by the error fn gave
// it (see PerMessage and BatchFunc): its attempt, retry, delay, dead letter, reply and
// any failed settlement are its own, as with a Handler.
//
// A batch is made of deliveries running at once, so the mount's Concurrency must be at
// least size. fn runs under the context of the batch's first delivery (attributes it
// adds with AddLogAttrs go to that delivery's lines): the mount's Timeout, counted from
// when that delivery started (its linger included), bounds the whole batch, and the
// linger must be shorter than it. A delivery taken over from a consumer that never
// settled it runs in a batch of its own, at once, as the engine runs it alone. A panic
// in fn is not charged to the whole batch: each of its messages is run again in a
// batch of its own, at once, and only one that panics alone is retried with a
// *PanicError (at-least-once: the others' work may run twice, as it may after any
// crash). At a graceful stop, a batch already gathering runs once its linger passes
// (the deliveries read and not yet started are handed back as ever).
//
// size must be at least 1 and linger not negative (0 runs a batch with the deliveries
// that joined before its first one looked); a nil fn is refused too, at Validate.
func HandleBatch(size int, linger time.Duration, fn BatchFunc) Handler {
	h := &batchHandler[struct{}]{name: "HandleBatch", size: size, linger: linger, nilFn: fn == nil}
	h.fn = func(ctx context.Context, ms []*Message, _ []struct{}) error { return fn(ctx, ms) }
	return h
}

// TypedBatch is HandleBatch for payloads decoded into a T with the mount's codec, as
// Typed is for Handler: vs[i] is ms[i]'s payload. A payload that does not decode never
// joins a batch: its delivery settles on its own as a failure (Retry with a
// *DecodeError), charging none of the others.
func TypedBatch[T any](size int, linger time.Duration, fn func(ctx context.Context, ms []*Message, vs []T) error) Handler {
	return &batchHandler[T]{name: "TypedBatch", size: size, linger: linger, decode: true, fn: fn, nilFn: fn == nil}
}

// batchHandler is a batch handler: a Handler whose calls, one per delivery, gather in
// one batch per mount (see internal/batch).
type batchHandler[T any] struct {
	name   string
	size   int
	linger time.Duration
	decode bool
	nilFn  bool
	fn     func(ctx context.Context, ms []*Message, vs []T) error

	mu      sync.Mutex
	byMount map[*mount]*batch.Gatherer[batchItem[T]]
}

// batchItem is one delivery in a batch: its message and decoded payload.
type batchItem[T any] struct {
	m *Message
	v T
}

// errRunAlone tells the members of a batch whose handler panicked to run again alone.
var errRunAlone = errors.New("settle: batch panicked: run alone")

// batchProblems is what a batch handler refuses at Validate.
type batchProblems interface {
	problems(concurrency int, timeout time.Duration) []string
}

func (h *batchHandler[T]) problems(concurrency int, timeout time.Duration) []string {
	var ps []string
	if h.nilFn {
		ps = append(ps, h.name+": the batch func is nil: every delivery would panic")
	}
	if h.size < 1 {
		ps = append(ps, fmt.Sprintf("%s(size %d, …): a batch holds at least 1 message", h.name, h.size))
	}
	if h.linger < 0 {
		ps = append(ps, fmt.Sprintf("%s(…, linger %s, …): must not be negative (0: do not wait)", h.name, h.linger))
	}
	if h.size > concurrency {
		ps = append(ps, fmt.Sprintf("%s(size %d, …): the mount's Concurrency(%d) is smaller: a batch gathers deliveries running at once, so it could never fill; give Concurrency(%d) or more", h.name, h.size, concurrency, h.size))
	}
	if h.linger >= timeout && timeout > 0 {
		ps = append(ps, fmt.Sprintf("%s(…, linger %s, …): the mount's Timeout(%s) must be longer: it counts from when a batch's first delivery starts, its linger included", h.name, h.linger, timeout))
	}
	return ps
}

// Handle adds m to its mount's open batch and returns its error once the batch ran.
func (h *batchHandler[T]) Handle(ctx context.Context, m *Message) error {
	it := batchItem[T]{m: m}
	if h.decode {
		if err := m.Decode(&it.v); err != nil {
			return err // settles alone: never in a batch
		}
	}
	if m.takenOver {
		return h.run(ctx, []batchItem[T]{it})[0]
	}
	var clk clock.Clock = clock.Real{}
	if m.mount != nil {
		clk = m.mount.eng.clock
	}
	err := h.gatherer(m.mount).Do(ctx, clk, it)
	if err == errRunAlone {
		return h.run(ctx, []batchItem[T]{it})[0] // under its own context and timeout
	}
	return err
}

// gatherer returns the batches of mount m: a batch never mixes two mounts' deliveries.
func (h *batchHandler[T]) gatherer(m *mount) *batch.Gatherer[batchItem[T]] {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.byMount[m]
	if g == nil {
		if h.byMount == nil {
			h.byMount = map[*mount]*batch.Gatherer[batchItem[T]]{}
		}
		g = batch.New(h.size, h.linger, h.run)
		h.byMount[m] = g
	}
	return g
}

// run runs fn on one batch and returns each item's error.
func (h *batchHandler[T]) run(ctx context.Context, items []batchItem[T]) []error {
	errs := make([]error, len(items))
	fill := func(err error) []error {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if ctx.Err() != nil {
		// The drain timeout ended the wait: fn is not run with a context already done.
		return fill(context.Cause(ctx))
	}
	ms := make([]*Message, len(items))
	vs := make([]T, len(items))
	for i, it := range items {
		ms[i], vs[i] = it.m, it.v
	}
	err := callBatch(ctx, h.fn, ms, vs)
	if _, ok := err.(*PanicError); ok && len(items) > 1 {
		return fill(errRunAlone)
	}
	var per *BatchErrors
	if !errors.As(err, &per) {
		return fill(err)
	}
	if len(per.Errs) != len(items) {
		return fill(fmt.Errorf("settle: %s: PerMessage gave %d errors for a batch of %d messages", h.name, len(per.Errs), len(items)))
	}
	return append(errs[:0], per.Errs...)
}

// callBatch runs fn, turning a panic into a *PanicError.
func callBatch[T any](ctx context.Context, fn func(context.Context, []*Message, []T) error, ms []*Message, vs []T) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn(ctx, ms, vs)
}
