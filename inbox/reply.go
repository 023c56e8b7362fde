package inbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/settlekit/settle/internal/source"
)

// reply writes m's replies as new rows (attempt 1, due now, as Publish inserts them,
// each with its headers where the table has a headers column) of the ReplyTo group of
// the same table, or, for a table without a group column, of the ReplyTo table (same
// columns, as a dead-letter table), and deletes the row they answer, in one transaction
// that first locks the row by its lease (a row whose lease was taken over writes nothing
// and fails with ErrLeaseLost) and marks its settle.Dedupe key, if any, completed.
func (t *transport) reply(ctx context.Context, m source.Move) error {
	dest, group := t.env.Policy.ReplyTo, t.env.Policy.ReplyTo
	s, what := t.s, fmt.Sprintf("reply to group %q of", dest)
	if rt := t.replyTable(); rt != "" {
		s, group, what = t.replyStmts, "", fmt.Sprintf("reply to table %q of", rt)
	}
	err := t.fenced(ctx, m.Delivery, what, nil, func(h *held) (bool, error) {
		return t.inLeasedTx(ctx, h, func(tx txn) (bool, error) {
			for _, out := range m.Outputs {
				vals := map[string]any{"group": group, "headers": encodeHeaders(out.Headers), "skew": t.d.skewArg(t.skew())}
				if _, err := insertRows(ctx, t.d, s, tx.(Tx), dueNow, vals, [][]byte{out.Payload}); err != nil {
					return false, fmt.Errorf("insert reply: %w", err)
				}
			}
			ok, err := affectedOne(tx.ExecContext(ctx, t.s.ackN(1), h.id, h.token))
			if err != nil || !ok {
				return ok, err
			}
			// Dedupe: the key completes with its replies, in their transaction.
			return true, t.writeMarks(ctx, tx, t.dedupKeys([]*source.Delivery{m.Delivery}))
		})
	})
	if err == nil && group != "" {
		t.q.ib.announce(ctx, t.s, group)
	}
	return err
}

// replyTable is the ReplyTo table of a table without a group column ("" otherwise).
func (t *transport) replyTable() string {
	if t.q.ib.table.Group != "" {
		return ""
	}
	return t.env.Policy.ReplyTo
}

// buildReplyStatements compiles the statements of the ReplyTo table rt, which has the
// queue's table's columns: its INSERTs write the replies.
func (t *transport) buildReplyStatements(rt string) {
	spec := t.q.ib.table
	spec.Name = rt
	t.replyStmts = t.d.build(spec, queueSpec{})
}

// replyProblems returns the refusals of the mount's ReplyTo: another group of a table
// with a group column, or another table with the same columns.
func (t *transport) replyProblems(p source.Policy) []error {
	if p.ReplyTo == "" {
		return nil
	}
	tb := t.q.ib.table
	switch {
	case tb.Group != "" && p.ReplyTo == t.q.group:
		return []error{fmt.Errorf("inbox: ReplyTo(%q) is the group the queue reads: replies would be read as requests", p.ReplyTo)}
	case tb.Group == "" && p.ReplyTo == tb.Name:
		return []error{fmt.Errorf("inbox: ReplyTo(%q) is the table the queue reads: replies would be read as requests", p.ReplyTo)}
	case tb.Group == "" && strings.ContainsAny(p.ReplyTo, "\"`'\x00;"):
		return []error{fmt.Errorf("inbox: ReplyTo(%q): the table name contains a quote or ';'", p.ReplyTo)}
	}
	return nil
}
