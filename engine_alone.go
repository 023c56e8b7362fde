package settle

import (
	"context"
	"time"

	"github.com/settlekit/settle/internal/source"
)

// Only the killer pays for a crash. A crash-counting transport charges a crash to every
// delivery the dead process held, having no record of which one was running; a message
// that kills its process would take whatever it is held beside to the cap with it, crash
// after crash. So a delivery taken over from a consumer that never settled it
// (source.Delivery.TakenOver: the one that may have killed it) runs alone: the read
// loop hands the rest of its read to the workers, waits until the mount holds nothing
// but the taken-over deliveries (every other delivery handled and its settlement
// written), runs them one at a time, each once the last has settled, and reads nothing
// meanwhile. A transport hands over one such delivery at a time. A message that kills
// its process then dies alone each time and reaches the cap and the dead letter; what
// was held beside it at its first crash pays that one attempt (nothing says which of the
// dead process's deliveries ran), and no other.

// aloneTick is how often the read loop looks whether the mount holds nothing else yet,
// while a taken-over delivery waits to run alone (real time: a rare path, and slots
// freed in many places signal nothing).
const aloneTick = time.Millisecond

// pushAlone hands ds, one read, to the workers with push: the deliveries not taken over
// at once, then each taken-over one alone (see the comment atop this file). It returns
// once the last of them has settled, or at once when ctx ends (what it has not run is
// queued, for the stop to hand back or run).
func (m *mount) pushAlone(ctx context.Context, ds []*source.Delivery, acks *acker, push func([]*source.Delivery)) {
	var taken []*source.Delivery
	rest := ds[:0:0]
	for _, d := range ds {
		if d.TakenOver {
			taken = append(taken, d)
		} else {
			rest = append(rest, d)
		}
	}
	if len(taken) == 0 {
		push(ds)
		return
	}
	if len(rest) > 0 {
		push(rest)
	}
	for i, d := range taken {
		// The taken-over deliveries still to run hold their slots; nothing else may.
		if !m.waitHolding(ctx, len(taken)-i, acks) {
			push(taken[i:])
			return
		}
		push([]*source.Delivery{d})
	}
	m.waitHolding(ctx, 0, acks)
}

// waitHolding waits until the mount holds only n deliveries and no ack waits to be
// written; false if ctx ended first.
func (m *mount) waitHolding(ctx context.Context, n int, acks *acker) bool {
	if m.held() <= n && acks.pending.Load() == 0 {
		return true
	}
	tick := time.NewTicker(aloneTick)
	defer tick.Stop()
	for m.held() > n || acks.pending.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}
