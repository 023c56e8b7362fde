package redisbase

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// DeliveryIDs names the deliveries of a transport whose messages carry no id of their
// own (a list item, a channel message): a prefix drawn at random when the transport is
// made, then a sequence number. A restarted process (same consumer name included) draws
// a new prefix, so an id never names two deliveries across restarts or processes, and
// (Mount, ID, Attempt) keys a tally of settlements as OnSettled advises.
type DeliveryIDs struct {
	prefix string
	seq    atomic.Uint64
}

// NewDeliveryIDs returns ids named scope + ":" + a random boot nonce + ":" + n (scope
// empty: nonce + ":" + n).
func NewDeliveryIDs(scope string) *DeliveryIDs {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := hex.EncodeToString(b[:]) + ":"
	if scope != "" {
		prefix = scope + ":" + prefix
	}
	return &DeliveryIDs{prefix: prefix}
}

// Next returns a new delivery id.
func (g *DeliveryIDs) Next() string { return g.prefix + strconv.FormatUint(g.seq.Add(1), 10) }
