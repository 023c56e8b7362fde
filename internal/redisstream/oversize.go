package redisstream

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// settleOversized settles stream entries read with more fields than settle's scripts
// can write back (more than wire.MaxReadFields: another client wrote them; the Publisher
// refuses more than MaxHeaders headers). Such an entry could never be copied, parked or
// dead-lettered whole, so it is never handed to a handler (whose failure would leave
// it pending for ever) and goes at once to the mount's dead letter by reference: an
// entry with its payload, its retry count, the dead-letter headers, a reason naming the
// stream and id of the entry, and every field of the entry as one JSON value
// (wire.HeaderDeadFields: one field the scripts can write, so the fields outlive the
// entry once the stream's trim removes it); a dead letter and the entry's
// acknowledgement are one script, as any dead letter. Without a dead letter declared
// the entry is acknowledged (rejected), logged at Error with the same reason. A write
// that fails leaves the entry pending, to be read and settled again.
func (t *streamTransport) settleOversized(ctx context.Context, msgs []redis.XMessage) {
	s, p := t.cfg, t.env.Policy
	for _, msg := range msgs {
		reason := fmt.Sprintf("the entry has %d fields, more than the %d settle's scripts can write back: dead-lettered by reference to %s at %s, its fields kept as one JSON object in %s",
			len(msg.Values), wire.MaxReadFields, s.Key, msg.ID, wire.HeaderDeadFields)
		attrs := []any{slog.String(source.AttrMount, t.env.Mount), slog.String(source.AttrKey, s.Key), slog.String(source.AttrMsgID, msg.ID), slog.String(source.AttrReason, reason)}
		var err error
		if p.DeadLetter == "" {
			t.env.Logger.ErrorContext(ctx, "settle: stream entry too large to settle and no dead letter declared; acknowledging it (rejected)", attrs...)
			err = s.Client.XAck(ctx, s.Key, s.Group, msg.ID).Err()
		} else {
			t.env.Logger.ErrorContext(ctx, "settle: stream entry too large to settle; dead-lettering it by reference", append(attrs, slog.String("dead_letter", p.DeadLetter))...)
			err = script.StreamMove(ctx, s.Client, p.DeadLetter, s.Key, s.Group, t.consumer, msg.ID, p.DeadLetterMaxLen, t.byReference(msg, reason))
		}
		if err != nil {
			t.markRescan()
			t.env.Logger.ErrorContext(ctx, "settle: settling a stream entry too large to settle failed; it stays pending", append(attrs, slog.Any(source.AttrError, err))...)
		}
	}
}

// byReference is the dead letter of an entry too large to write back: its payload (if
// it has one), its retry count as it was written, the dead-letter headers, and every
// field as JSON.
func (t *streamTransport) byReference(msg redis.XMessage, reason string) []any {
	fields, err := json.Marshal(msg.Values) // strings only: it cannot fail
	if err != nil {
		fields = []byte(fmt.Sprintf("%q", err.Error()))
	}
	h := map[string]string{
		wire.HeaderDeadFields: string(fields),
		wire.HeaderDeadAt:     t.env.Clock.Now().UTC().Format(wire.DeadAtLayout),
		wire.HeaderDeadID:     msg.ID,
		wire.HeaderDeadReason: reason,
		wire.HeaderDeadSource: t.cfg.Key,
		wire.HeaderDeadError:  "",
	}
	if rc, ok := msg.Values[wire.HeaderRetryCount].(string); ok {
		h[wire.HeaderRetryCount] = rc
	}
	payload, ok := msg.Values[wire.FieldPayload].(string)
	if !ok {
		return wire.StreamValues(nil, h)
	}
	return wire.StreamValues([]byte(payload), h)
}

// oversized reports whether an entry read has more fields than settle can write back.
func oversized(msg redis.XMessage) bool { return len(msg.Values) > wire.MaxReadFields }
