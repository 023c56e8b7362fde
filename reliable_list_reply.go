package settle

import (
	"context"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// reply takes m's item out of the processing list and pushes its replies, each in
// settle's envelope, to the mount's ReplyTo list, in one script (see list_reply.lua),
// fenced on the item still being there.
func (t *reliableTransport) reply(ctx context.Context, m source.Move) error {
	replies := encodeOutputs(m.Outputs, wire.Envelope)
	return script.ListReply(ctx, t.src.rdb, t.processing, t.env.Policy.ReplyTo, m.Delivery.Raw.(string), replies)
}
