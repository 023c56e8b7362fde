package redisstream

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/redisbase"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// reply writes m's replies to the mount's ReplyTo stream, acknowledges the entry they
// answer and marks its dedup key (settle.Dedupe), in one script (see stream_reply.lua),
// fenced on the entry still being pending to this consumer.
func (t *streamTransport) reply(ctx context.Context, m source.Move) error {
	dest, replies := t.env.Policy.ReplyTo, redisbase.EncodeOutputs(m.Outputs, wire.StreamValues)
	if err := script.StreamReply(ctx, t.cfg.Client, dest, t.cfg.Key, t.cfg.Group, t.consumer, m.Delivery.ID, replies, t.dedup.Marks([]*source.Delivery{m.Delivery})); err != nil {
		return fmt.Errorf("stream %q: reply to %s into %q: %w", t.cfg.Key, m.Delivery.ID, dest, err)
	}
	return nil
}
