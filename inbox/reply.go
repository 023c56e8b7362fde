package inbox

import (
	"context"
	"fmt"

	"github.com/settlekit/settle/internal/source"
)

// reply writes m's replies as new rows of the ReplyTo group of the same table (attempt
// 1, due now, as Publish inserts them) and deletes the row they answer, in one
// transaction that first locks the row by its lease: a row whose lease was taken over
// writes nothing and fails with ErrLeaseLost. A table carries no headers, so a reply
// row holds its payload only.
func (t *transport) reply(ctx context.Context, m source.Move) error {
	dest := t.env.Policy.ReplyTo
	err := t.fenced(ctx, m.Delivery, fmt.Sprintf("reply to group %q of", dest), func(h *held) (bool, error) {
		tx, err := t.d.begin(ctx, t.q.ib.db)
		if err != nil {
			return false, err
		}
		defer func() { _ = tx.Rollback() }()
		ids, err := queryIDs(ctx, tx, t.s.lockLeased.text, t.s.lockLeased.bind(map[string]any{"id": h.id, "token": h.token}))
		if err != nil || len(ids) == 0 {
			return false, err
		}
		skew := t.d.skewArg(t.skew())
		for _, out := range m.Outputs {
			args := t.s.publish.bind(map[string]any{"group": dest, "payload": out.Payload, "skew": skew})
			if _, err := tx.ExecContext(ctx, t.s.publish.text, args...); err != nil {
				return false, fmt.Errorf("insert reply: %w", err)
			}
		}
		ok, err := affectedOne(tx.ExecContext(ctx, t.s.ackN(1), h.id, h.token))
		if err != nil || !ok {
			return false, err
		}
		return true, tx.Commit()
	})
	if err == nil {
		t.q.ib.announce(ctx, t.s, dest)
	}
	return err
}

// replyProblems returns the refusals of the mount's ReplyTo: another group of a table
// with a group column (a table without one takes ReplyVia instead).
func (t *transport) replyProblems(p source.Policy) []error {
	if p.ReplyTo == "" {
		return nil
	}
	tb := t.q.ib.table
	switch {
	case tb.Group == "":
		return nil // the engine refuses it: no Caps.Replies without a group column
	case p.ReplyTo == t.q.group:
		return []error{fmt.Errorf("inbox: ReplyTo(%q) is the group the queue reads: replies would be read as requests", p.ReplyTo)}
	}
	return nil
}
