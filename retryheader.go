package settle

import "github.com/settlekit/settle/internal/wire"

// HeaderPrefix starts every header settle writes. Headers with this prefix are reserved:
// publishing one is refused.
const HeaderPrefix = "settle-"

// HeaderRetryCount is the retry-count header: how many deliveries of the message came
// before this copy. Every retry copy carries it one higher than the delivery it copies;
// a dead letter carries the attempts spent (the cap). A message published by settle has
// none, which reads as 0.
const HeaderRetryCount = HeaderPrefix + "retry-count"

// HeaderInvalidEnvelope marks a list item or channel message that started like settle's
// envelope but did not decode: its value is the decode error. Such a message is
// delivered with its whole value, as it arrived, as Message.Payload, but Message.Decode
// (and so Typed) refuses it with a *DecodeError: it spends attempts like any payload that
// does not decode and reaches the dead letter at the cap with its bytes intact. Its
// retry copies carry this header, so every delivery of it reads the same.
const HeaderInvalidEnvelope = HeaderPrefix + "invalid-envelope"

// HeaderHookPrefix starts the headers a hook adds to the messages settle writes
// (Hooks.Move): under HeaderPrefix, so no user header collides with them, and kept by
// copies, dead letters and replays.
const HeaderHookPrefix = HeaderPrefix + "x-"

// HeaderOriginID is the id of the first delivery of a message, which its retry copies,
// parked copies and dead letter carry, so that every line and span of one message share
// one key (Settled.MessageKey) although each copy has an id of its own.
const HeaderOriginID = HeaderPrefix + "origin-id"

// HeaderKey is the message's key as a Publisher's Key option wrote it: what picks a
// partitioned stream's partition.
const HeaderKey = HeaderPrefix + "key"

// Headers every reply carries, naming the delivery it answers.
const (
	// HeaderReplyOf is the id of the delivery a reply answers.
	HeaderReplyOf = HeaderPrefix + "reply-of"
	// HeaderReplySource is where the answered delivery was read from (its Key).
	HeaderReplySource = HeaderPrefix + "reply-source"
)

// MaxRetryCount bounds the retry-count header as it is read: a larger count (written by
// another client, or too large for an int) reads as MaxRetryCount, so an attempt never
// overflows to a negative number and a delivery's attempt is always past any
// attempts cap up to MaxRetryCount, which then dead-letters it at its first failure.
const MaxRetryCount = 1 << 20

// parseRetryCount reads the retry-count header. A missing header is 0; a garbled one
// (not an integer, or negative) is also 0, and one beyond MaxRetryCount is
// MaxRetryCount; for both ok is false so the caller can log it.
func parseRetryCount(headers map[string]string) (n int, ok bool) {
	return wire.ParseRetryCount(headers)
}

// withRetryCount returns a copy of headers whose retry count is n.
func withRetryCount(headers map[string]string, n int) map[string]string {
	return wire.WithRetryCount(headers, n)
}
