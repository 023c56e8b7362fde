package settle

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// reply writes m's replies to the mount's ReplyTo stream and acknowledges the entry they
// answer, in one script (see stream_reply.lua), fenced on the entry still being
// pending to this consumer.
func (t *streamTransport) reply(ctx context.Context, m source.Move) error {
	replies := make([][]any, len(m.Outputs))
	for i, out := range m.Outputs {
		replies[i] = wire.StreamValues(out.Payload, out.Headers)
	}
	dest := t.env.Policy.ReplyTo
	if err := script.StreamReply(ctx, t.src.rdb, dest, t.src.key, t.src.group, t.consumer, m.Delivery.ID, replies); err != nil {
		return fmt.Errorf("stream %q: reply to %s into %q: %w", t.src.key, m.Delivery.ID, dest, err)
	}
	return nil
}

// replyProblems returns the refusals of a stream mount's ReplyTo: the reply stream is
// written in one script with the source, so it must be another key of the same slot.
func replyProblems(p source.Policy, rdb redis.UniversalClient, key string) []error {
	if p.ReplyTo == "" {
		return nil
	}
	var errs []error
	if p.ReplyTo == key {
		errs = append(errs, fmt.Errorf("ReplyTo(%q) is the stream the mount reads: replies would be read as requests", p.ReplyTo))
	}
	if err := keys.SameSlot(key, p.ReplyTo); err != nil {
		if _, cluster := rdb.(*redis.ClusterClient); cluster {
			errs = append(errs, fmt.Errorf("stream and ReplyTo must share a cluster slot (a reply is one script): %w", err))
		}
	}
	return errs
}
