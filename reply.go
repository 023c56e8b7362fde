package settle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/timerq"
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
	if m.replyTo == "" {
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

// ReplyTo names where a mount's replies go (see Reply and Message.Reply). Without
// ReplyVia, dest is a destination of the source's own kind in its own store, and the
// transport writes the replies and completes the original in one atomic step, fenced
// like any settlement: a stream key in the source stream's hash slot, a list key beside
// a reliable list, another group (or table) of an inbox's database, another topic of a
// settletest.Broker. A source that cannot do that refuses to start unless ReplyVia is
// given too. Defaults to no replies.
func ReplyTo(dest string) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.replyTo = dest })
}

// ReplyVia sends a mount's replies to its ReplyTo destination through r, into another
// store (a stream → a channel, an inbox → Redis). Then the replies are published
// first and the original completed after: a crash or failed ack in between delivers
// the original again and its replies are published again (at least once), and a failed
// publish settles the delivery as a failure (a Retry after the mount's backoff, kept for
// the dead letter), so that no reply is lost. Defaults to the source's own atomic
// replies.
func ReplyVia(r Replier) MountOption {
	return mountOptionFunc(func(c *mountConfig) { c.replier = r })
}

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

// replyProblems returns the refusals of the mount's reply options.
func (m *mount) replyProblems() []error {
	switch {
	case m.cfg.replier != nil && m.cfg.replyTo == "":
		return []error{errors.New("ReplyVia without ReplyTo: say where replies go")}
	case m.cfg.replyTo != "" && m.cfg.replier == nil && !m.info.Caps.Replies:
		return []error{fmt.Errorf("ReplyTo(%q): a %s source cannot write replies atomically itself; give ReplyVia to publish them", m.cfg.replyTo, m.info.Kind)}
	}
	return nil
}

// reply settles a delivery whose handler succeeded with replies: one atomic move where
// the transport writes them itself, else each published through the mount's replier
// and the original completed after; a failed publish settles it as a failure.
func (m *mount) reply(ctx context.Context, d *source.Delivery, outs []source.Output, acks *acker, delays *timerq.Queue, start time.Time) (queued bool) {
	ev := m.event(ctx, d, Outcome{Kind: OutcomeAck}, ActionReply, start)
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
