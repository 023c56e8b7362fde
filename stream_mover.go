package settle

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// Moves writes a batch of moves: retry copies (back to the stream) and dead letters (to
// their stream, bounded by DeadLetterMaxLen) in one stream_move script call per
// destination, parks in one pipeline of park script calls; each move all or nothing
// and fenced on its own (its entry must still be pending to this consumer). A delivery
// stays in flight until its call has answered.
func (t *streamTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	t.writeMoves(ctx, ms, errs)
	// Forgotten as in flight only now that every write has answered.
	for i, m := range ms {
		t.settledIDs(errs[i], m.Delivery)
	}
	return errs
}

// writeMoves writes ms, setting each one's error in errs.
func (t *streamTransport) writeMoves(ctx context.Context, ms []source.Move, errs []error) {
	done := make([]bool, len(ms))
	batch := make([]script.Move, 0, len(ms))
	idx := make([]int, 0, len(ms))
	var parks []script.StreamPark
	var parkIdx []int
	for i, m := range ms {
		switch m.Action {
		case source.ActionCopy, source.ActionDeadLetter:
		case source.ActionPark:
			parks, parkIdx = append(parks, t.park(m)), append(parkIdx, i)
			done[i] = true
		default:
			errs[i] = source.UnsupportedMove(source.KindStream, m)
			done[i] = true
		}
	}
	for i := range ms {
		if done[i] {
			continue
		}
		dest := streamDest(ms[i])
		batch, idx = batch[:0], idx[:0]
		for j := i; j < len(ms); j++ {
			if !done[j] && streamDest(ms[j]) == dest {
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
	if len(parks) > 0 {
		dz, _ := delaySetOf(t.env)
		for k, err := range script.Parks(ctx, t.src.rdb, dz.Key, t.src.key, t.src.group, t.consumer, dz.TTL, dz.now(), parks) {
			if err != nil {
				errs[parkIdx[k]] = fmt.Errorf("stream %q: park of %s in %q: %w", t.src.key, ms[parkIdx[k]].Delivery.ID, dz.Key, err)
			}
		}
	}
}

// streamDest is where a copy or dead letter goes: "" for the stream itself (a retry
// copy), else the dead-letter stream.
func streamDest(m source.Move) string {
	if m.Action == source.ActionDeadLetter {
		return m.Dest
	}
	return ""
}

// park is the script's park of m: its retry copy (payload and the given headers) goes
// into the mount's delay set, due once m.Delay has passed on the Redis server's clock,
// and the original entry is acknowledged.
func (t *streamTransport) park(m source.Move) script.StreamPark {
	d := m.Delivery
	payload := d.Payload
	if !d.HasPayload {
		payload = nil
	}
	return script.StreamPark{Delay: m.Delay, ID: d.ID, Member: wire.DelayMember(d.ID, payload, m.Headers)}
}
