package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/settlekit/settle/internal/source"
)

// ErrNoReplyTo is the error of Message.Reply on a mount that declares no ReplyTo.
var ErrNoReplyTo = errors.New("settle: reply: the mount declares no ReplyTo, so a reply has nowhere to go")

// Reply returns a Handler that decodes each payload into an In with the mount's codec,
// calls fn with it and, when fn returns a nil error, sends the Out it returned, encoded
// with the same codec, to the mount's ReplyTo destination (a reply subscriber). The
// reply is written and the original completed together: in one atomic
// step where the destination shares the source's store, else published and then
// completed (see ReplyVia). An error publishes nothing and settles by its outcome as
// any handler's does; a payload that does not decode settles as a failure.
func Reply[In, Out any](fn func(ctx context.Context, m *Message, v In) (Out, error)) Handler {
	if fn == nil {
		return HandlerFunc(nil) // refused by Validate
	}
	return HandlerFunc(func(ctx context.Context, m *Message) error {
		var v In
		if err := m.Decode(&v); err != nil {
			return err
		}
		out, err := fn(ctx, m, v)
		if err != nil {
			return err
		}
		return m.Reply(out)
	})
}

// Reply adds a reply to the delivery: v, encoded with the mount's codec, is sent to the
// mount's ReplyTo destination once the handler returns nil, with HeaderReplyOf and
// HeaderReplySource naming this delivery. A handler may add several (an out
// collector): they are written in order, in the same step. If the handler returns an
// error, none is sent. It returns ErrNoReplyTo on a mount without ReplyTo (and on a
// Message a test built itself: test a replying handler on a settletest.Broker topic),
// and a *EncodeError when the codec refuses v; returned from the handler, either
// settles the delivery as a failure.
func (m *Message) Reply(v any) error {
	if m.replyTo() == "" {
		return ErrNoReplyTo
	}
	c := m.codec
	if c == nil {
		c = Msgpack
	}
	payload, err := c.Marshal(v)
	if err != nil {
		return &EncodeError{Codec: c.Name(), Err: err}
	}
	if payload == nil {
		payload = []byte{}
	}
	m.outputs = append(m.outputs, source.Output{
		Headers: map[string]string{HeaderReplyOf: m.ID, HeaderReplySource: m.Key},
		Payload: payload,
	})
	return nil
}

// EncodeError is the error of a reply the mount's codec could not encode.
type EncodeError struct {
	// Codec names the codec that failed.
	Codec string
	// Err is the codec's error.
	Err error
}

func (e *EncodeError) Error() string {
	return fmt.Sprintf("settle: encode reply (%s): %v", e.Codec, e.Err)
}

// Unwrap returns the codec's error.
func (e *EncodeError) Unwrap() error { return e.Err }

// Replier publishes a reply somewhere other than the source's store (see ReplyVia).
type Replier interface {
	// PublishReply writes one reply, payload and headers, to dest; nil once written.
	PublishReply(ctx context.Context, dest string, payload []byte, headers map[string]string) error
}

// ReplierFunc adapts a function to a Replier (a Publisher's StreamReplier, ListReplier
// and ChannelReplier cover Redis). The headers it is given include settle's own
// (HeaderReplyOf, HeaderReplySource): write them as they are.
type ReplierFunc func(ctx context.Context, dest string, payload []byte, headers map[string]string) error

// PublishReply calls f.
func (f ReplierFunc) PublishReply(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
	return f(ctx, dest, payload, headers)
}
