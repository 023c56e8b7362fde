package settle

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/wire"
)

// The Repliers of a Publisher write a reply as it is, with the headers settle gives it
// (HeaderReplyOf, HeaderReplySource), which Publish itself refuses as reserved.

// StreamReplier returns a Replier that appends each reply to the stream named by the
// mount's ReplyTo, through p's client (another Redis than the source's, or a stream in
// another hash slot): for ReplyVia.
func (p *Publisher) StreamReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: dest, Values: wire.StreamValues(payload, headers)}).Err(); err != nil {
			return fmt.Errorf("settle: reply to stream %q: xadd: %w", dest, err)
		}
		return nil
	})
}

// ListReplier returns a Replier that pushes each reply, in settle's envelope, to the
// tail of the list named by the mount's ReplyTo, through p's client: for ReplyVia.
func (p *Publisher) ListReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.RPush(ctx, dest, wire.Envelope(payload, headers)).Err(); err != nil {
			return fmt.Errorf("settle: reply to list %q: rpush: %w", dest, err)
		}
		return nil
	})
}

// ChannelReplier returns a Replier that publishes each reply, in settle's envelope, to
// the channel named by the mount's ReplyTo, through p's client: for ReplyVia. A channel
// keeps nothing: a reply nobody is subscribed to is gone, and still counts as published.
func (p *Publisher) ChannelReplier() Replier {
	return ReplierFunc(func(ctx context.Context, dest string, payload []byte, headers map[string]string) error {
		if err := p.rdb.Publish(ctx, dest, wire.Envelope(payload, headers)).Err(); err != nil {
			return fmt.Errorf("settle: reply to channel %q: publish: %w", dest, err)
		}
		return nil
	})
}
