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

// reply takes m's item out of the processing list and pushes its replies, each in
// settle's envelope, to the mount's ReplyTo list, in one script (see list_reply.lua),
// fenced on the item still being there.
func (t *reliableTransport) reply(ctx context.Context, m source.Move) error {
	replies := make([][]byte, len(m.Outputs))
	for i, out := range m.Outputs {
		replies[i] = wire.Envelope(out.Payload, out.Headers)
	}
	return script.ListReply(ctx, t.src.rdb, t.processing, t.env.Policy.ReplyTo, m.Delivery.Raw.(string), replies)
}

// listReplyProblems returns the refusals of a reliable list mount's ReplyTo: another
// list, in the processing list's cluster slot (a reply is one script with it).
func listReplyProblems(p source.Policy, rdb redis.UniversalClient, key, processing string) []error {
	if p.ReplyTo == "" {
		return nil
	}
	var errs []error
	if p.ReplyTo == key {
		errs = append(errs, fmt.Errorf("ReplyTo(%q) is the list the mount reads: replies would be read as requests", p.ReplyTo))
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		if err := keys.SameSlot(processing, p.ReplyTo); err != nil {
			errs = append(errs, fmt.Errorf("a reliable list and its ReplyTo must share a cluster slot (a reply is one script): %w", err))
		}
	}
	return errs
}
