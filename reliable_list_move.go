package settle

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/internal/source"
	"github.com/settlekit/settle/internal/wire"
)

// Moves implements source.Mover: it writes a batch of retry copies, put-backs and dead
// letters the engine queued in one list_move script call per maxMoveBatch moves,
// whatever their destinations (copies and put-backs go to the tail of the list, dead
// letters to theirs), each move all or nothing on its own, as Copy, PutBack and
// DeadLetter write them one at a time: a move whose item another consumer recovered
// meanwhile writes nothing and fails alone. A delivery stays in flight until its call
// has answered.
func (t *reliableTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, 0, len(ms))
	batch := make([]script.ListMove, 0, min(len(ms), maxMoveBatch))
	for len(errs) < len(ms) {
		batch = batch[:0]
		for _, m := range ms[len(errs):min(len(ms), len(errs)+maxMoveBatch)] {
			item := m.Delivery.Raw.(string)
			mv := script.ListMove{Dest: t.src.key, Item: item}
			switch {
			case m.PutBack:
				mv.Value = []byte(item)
			case m.DeadLetter != "":
				mv.Dest, mv.Value = m.DeadLetter, wire.Envelope(m.Delivery.Payload, m.Headers)
			default:
				mv.Value = wire.Envelope(m.Delivery.Payload, m.Headers)
			}
			batch = append(batch, mv)
		}
		errs = append(errs, script.ListMoves(ctx, t.src.rdb, t.processing, batch)...)
	}
	for i, m := range ms {
		what := "retry copy"
		switch {
		case errs[i] == nil:
		case m.PutBack:
			what = "put back"
		case m.DeadLetter != "":
			what = fmt.Sprintf("dead letter to %q", m.DeadLetter)
		}
		errs[i] = t.moved(errs[i], m.Delivery, what)
	}
	return errs
}

// PutBack moves the item, as it is, back to the tail of the list.
func (t *reliableTransport) PutBack(ctx context.Context, d *source.Delivery) error {
	return t.move(ctx, d, t.src.key, []byte(d.Raw.(string)), "put back")
}

// Copy moves a copy of the item with the given headers to the tail of the list.
func (t *reliableTransport) Copy(ctx context.Context, d *source.Delivery, headers map[string]string) error {
	return t.move(ctx, d, t.src.key, wire.Envelope(d.Payload, headers), "retry copy")
}

// DeadLetter moves the item, with the given headers, to the tail of the list dest.
func (t *reliableTransport) DeadLetter(ctx context.Context, d *source.Delivery, dest string, headers map[string]string) error {
	return t.move(ctx, d, dest, wire.Envelope(d.Payload, headers), fmt.Sprintf("dead letter to %q", dest))
}

// move takes d's item out of the processing list and pushes value to dest, in one
// list_move script call with the moves that concurrent handlers ask for at the same
// time (see batcher): N put-backs cost one EVALSHA instead of N.
func (t *reliableTransport) move(ctx context.Context, d *source.Delivery, dest string, value []byte, what string) error {
	err := t.moves.do(ctx, script.ListMove{Dest: dest, Item: d.Raw.(string), Value: value}, maxMoveBatch, t.sendMoves)
	return t.moved(err, d, what)
}

// sendMoves runs one list_move script call.
func (t *reliableTransport) sendMoves(ctx context.Context, ms []script.ListMove) []error {
	return script.ListMoves(ctx, t.src.rdb, t.processing, ms)
}

// moved forgets d as in flight once its move has answered with err, and returns the
// move's error for the engine.
func (t *reliableTransport) moved(err error, d *source.Delivery, what string) error {
	t.unsettled.Add(-1)
	t.settled(err, d)
	if err != nil {
		return fmt.Errorf("reliable list %q: %s of %s: %w", t.src.key, what, d.ID, err)
	}
	return nil
}
