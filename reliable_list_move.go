package settle

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// maxListMoveBatch bounds how many moves one list_move script call carries.
const maxListMoveBatch = 128

// Moves writes a batch of moves: retry copies and put-backs (to the tail of the list)
// and dead letters (to the tail of theirs) in one list_move script call per
// maxListMoveBatch moves, whatever their destinations; parks in one pipeline of park
// script calls. Each move takes its item out of the processing list and writes its value
// in one step, all or nothing on its own: a move whose item another consumer recovered
// meanwhile writes nothing and fails alone. A delivery stays in flight until its call
// has answered.
func (t *reliableTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, len(ms))
	batch := make([]script.ListMove, 0, min(len(ms), maxListMoveBatch))
	idx := make([]int, 0, cap(batch))
	var parks []script.ValuePark
	var parkIdx []int
	flush := func() {
		for k, err := range script.ListMoves(ctx, t.src.rdb, t.processing, batch) {
			errs[idx[k]] = err
		}
		batch, idx = batch[:0], idx[:0]
	}
	for i, m := range ms {
		item := m.Delivery.Raw.(string)
		mv := script.ListMove{Dest: t.src.key, Item: item}
		switch m.Action {
		case source.ActionPutBack:
			mv.Value = []byte(item)
		case source.ActionCopy:
			mv.Value = wire.Envelope(m.Delivery.Payload, m.Headers)
		case source.ActionDeadLetter:
			mv.Dest, mv.Value = m.Dest, wire.Envelope(m.Delivery.Payload, m.Headers)
		case source.ActionPark:
			member := valueMember(wire.Envelope(m.Delivery.Payload, m.Headers))
			parks, parkIdx = append(parks, script.ValuePark{Delay: m.Delay, Item: item, Member: member}), append(parkIdx, i)
			continue
		default:
			errs[i] = source.UnsupportedMove(source.KindList, m)
			continue
		}
		batch, idx = append(batch, mv), append(idx, i)
		if len(batch) == maxListMoveBatch {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if len(parks) > 0 {
		for k, err := range script.ValueParks(ctx, t.src.rdb, t.delays.Key, t.processing, t.delays.TTL, t.delays.now(), parks) {
			errs[parkIdx[k]] = err
		}
	}
	for i, m := range ms {
		errs[i] = t.moved(errs[i], m)
	}
	return errs
}

// moved forgets m's delivery as in flight once its move has answered with err, and
// returns the move's error for the engine.
func (t *reliableTransport) moved(err error, m source.Move) error {
	t.unsettled.Add(-1)
	t.settled(err, m.Delivery)
	if err == nil {
		return nil
	}
	what := "retry copy"
	switch m.Action {
	case source.ActionPutBack:
		what = "put back"
	case source.ActionDeadLetter:
		what = fmt.Sprintf("dead letter to %q", m.Dest)
	case source.ActionPark:
		what = fmt.Sprintf("park in %q", t.delays.Key)
	}
	return fmt.Errorf("reliable list %q: %s of %s: %w", t.src.key, what, m.Delivery.ID, err)
}
