package redisbase

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/source"
)

// EncodeOutputs encodes each reply with enc (wire.StreamValues, wire.Envelope), in order.
func EncodeOutputs[T any](outs []source.Output, enc func(payload []byte, headers map[string]string) T) []T {
	vs := make([]T, len(outs))
	for i, out := range outs {
		vs[i] = enc(out.Payload, out.Headers)
	}
	return vs
}

// ReplyProblems returns the refusals of a Redis mount's ReplyTo, which its transport
// writes in one script with slotKey (the stream, a reliable list's processing list): a
// key other than the one read (a what, say "stream"), in slotKey's cluster slot.
func ReplyProblems(p source.Policy, rdb redis.UniversalClient, what, key, slotKey string) []error {
	if p.ReplyTo == "" {
		return nil
	}
	var errs []error
	if p.ReplyTo == key {
		errs = append(errs, fmt.Errorf("ReplyTo(%q) is the %s the mount reads: replies would be read as requests", p.ReplyTo, what))
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster {
		if err := keys.SameSlot(slotKey, p.ReplyTo); err != nil {
			errs = append(errs, fmt.Errorf("a %s and its ReplyTo must share a cluster slot (a reply is one script): %w", what, err))
		}
	}
	return errs
}
