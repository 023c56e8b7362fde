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

// Moves implements source.Mover: it writes a batch of retry copies, put-backs and dead
// letters the engine queued in one list_move script call per maxListMoveBatch moves,
// whatever their destinations (copies and put-backs go to the tail of the list, dead
// letters to theirs), each move all or nothing on its own, as Copy, PutBack and
// DeadLetter write them one at a time: a move whose item another consumer recovered
// meanwhile writes nothing and fails alone. A delivery stays in flight until its call
// has answered.
func (t *reliableTransport) Moves(ctx context.Context, ms []source.Move) []error {
	errs := make([]error, 0, len(ms))
	batch := make([]script.ListMove, 0, min(len(ms), maxListMoveBatch))
	for len(errs) < len(ms) {
		batch = batch[:0]
		for _, m := range ms[len(errs):min(len(ms), len(errs)+maxListMoveBatch)] {
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

// PutBack moves the item, as it is, back to the tail of the list (a one-move Moves call).
func (t *reliableTransport) PutBack(ctx context.Context, d *source.Delivery) error {
	return t.Moves(ctx, []source.Move{{Delivery: d, PutBack: true}})[0]
}

// Copy moves a copy of the item with the given headers to the tail of the list (a
// one-move Moves call).
func (t *reliableTransport) Copy(ctx context.Context, d *source.Delivery, headers map[string]string) error {
	return t.Moves(ctx, []source.Move{{Delivery: d, Headers: headers}})[0]
}

// DeadLetter moves the item, with the given headers, to the tail of the list dest (a
// one-move Moves call).
func (t *reliableTransport) DeadLetter(ctx context.Context, d *source.Delivery, dest string, headers map[string]string) error {
	return t.Moves(ctx, []source.Move{{Delivery: d, DeadLetter: dest, Headers: headers}})[0]
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
