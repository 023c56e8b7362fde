package settle

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

var _ source.Mover = (*streamTransport)(nil)

// Moves writes a batch of retry copies and dead letters the engine queued: one
// stream_move script call per destination (retry copies go back to the stream, dead
// letters to their stream bounded by DeadLetterMaxLen), each move all or nothing and
// fenced on its own, as Copy and DeadLetter write them one at a time. A delivery stays
// in flight until its call has answered.
func (t *streamTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	done := make([]bool, len(ms))
	batch := make([]script.Move, 0, len(ms))
	idx := make([]int, 0, len(ms))
	for i := range ms {
		if done[i] {
			continue
		}
		dest := ms[i].DeadLetter
		batch, idx = batch[:0], idx[:0]
		for j := i; j < len(ms); j++ {
			if !done[j] && ms[j].DeadLetter == dest {
				d := ms[j].Delivery
				batch = append(batch, script.Move{ID: d.ID, Values: wire.StreamValues(d.Payload, ms[j].Headers)})
				idx = append(idx, j)
				done[j] = true
			}
		}
		key, maxLen := t.src.key, int64(0)
		if dest != "" {
			key, maxLen = dest, t.env.Policy.DeadLetterMaxLen
		}
		for k, err := range script.StreamMoves(ctx, t.src.rdb, key, t.src.key, t.src.group, t.consumer, maxLen, batch) {
			if err != nil {
				j := idx[k]
				if dest == "" {
					err = fmt.Errorf("stream %q: retry copy of %s: %w", t.src.key, ms[j].Delivery.ID, err)
				} else {
					err = fmt.Errorf("stream %q: dead letter of %s to %q: %w", t.src.key, ms[j].Delivery.ID, dest, err)
				}
				errs[j] = err
			}
		}
	}
	// Forgotten as in flight only now that every write has answered.
	for i, m := range ms {
		t.settledIDs(errs[i], m.Delivery)
	}
	return errs
}
