package settle

import (
	"context"
	"errors"

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
	noPayload bool            // the message arrived without a payload field (or as an invalid envelope)
	outputs   []source.Output // the replies the handler added (see Message.Reply)
	replyTo   string          // the mount's ReplyTo
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
