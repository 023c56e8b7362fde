package settle

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// deliveryIDs names the deliveries of a transport whose messages carry no id of their
// own (a list item, a channel message): a prefix drawn at random when the transport is
// made, then a sequence number. A restarted process (same consumer name included) draws
// a new prefix, so an id never names two deliveries across restarts or processes, and
// (Mount, ID, Attempt) keys a tally of settlements as OnSettled advises.
type deliveryIDs struct {
	prefix string
	seq    atomic.Uint64
}

// newDeliveryIDs returns ids named scope + ":" + a random boot nonce + ":" + n (scope
// empty: nonce + ":" + n).
func newDeliveryIDs(scope string) *deliveryIDs {
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := hex.EncodeToString(b[:]) + ":"
	if scope != "" {
		prefix = scope + ":" + prefix
	}
	return &deliveryIDs{prefix: prefix}
}

// next returns a new delivery id.
func (g *deliveryIDs) next() string { return g.prefix + strconv.FormatUint(g.seq.Add(1), 10) }
