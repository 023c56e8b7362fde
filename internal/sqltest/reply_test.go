package sqltest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

// TestReplyInsertsIntoTheReplyGroupAndDeletesTheRowInOneTransaction: a reply move
// inserts its replies as rows of the ReplyTo group and deletes the row it answers; a
// reply for a row whose lease another worker took over writes nothing (no reply row,
// the row kept) and fails with ErrLeaseLost.
func TestReplyInsertsIntoTheReplyGroupAndDeletesTheRowInOneTransaction(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "ok", "lost")
		p := source.Policy{ReplyTo: "jobs.replies"}
		tr := x.ib.Queue("jobs").Transport(source.Env{Clock: newFakeClock(), Logger: quietLogger(t), Mount: "reply", Policy: p, TestClock: x.clock})
		if errs := tr.Validate(p); len(errs) > 0 {
			t.Fatalf("validate: %v", errs)
		}
		if err := tr.Open(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close(context.Background()) })
		if !tr.Info().Caps.Replies {
			t.Fatal("an inbox with a group column does not say it writes replies")
		}
		ds, err := tr.Fetch(context.Background(), 10, 0)
		if err != nil || len(ds) != 2 {
			t.Fatalf("claim: got %d rows, err %v; want 2", len(ds), err)
		}
		q := quoteFor(b.d)
		if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s",
			q(x.tb.Name), q(x.tb.LockedUntil), farFuture(b.d), q(x.tb.Payload), placeholder(b.d, 1)), []byte("lost")); err != nil {
			t.Fatalf("take the lease over: %v", err)
		}
		byP := byPayload(ds)
		out := func(s string) []source.Output {
			return []source.Output{{Headers: map[string]string{}, Payload: []byte(s)}}
		}
		errs := tr.Moves(context.Background(), []source.Move{
			{Action: source.ActionReply, Delivery: byP["ok"], Outputs: append(out("paid ok"), out("receipt ok")...)},
			{Action: source.ActionReply, Delivery: byP["lost"], Outputs: out("paid lost")},
		})
		if errs[0] != nil || !errors.Is(errs[1], inbox.ErrLeaseLost) {
			t.Fatalf("moves: %v; want nil, then ErrLeaseLost", errs)
		}
		var got []string
		for _, r := range readRows(t, b, x.db, x.tb) {
			got = append(got, r.group+":"+r.payload)
		}
		if want := []string{"jobs:lost", "jobs.replies:paid ok", "jobs.replies:receipt ok"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rows %v, want %v", got, want)
		}
	})
}

// TestReplyToIsRefusedOnTheQueuesOwnGroup: replies into the group the queue reads
// would be read as requests.
func TestReplyToIsRefusedOnTheQueuesOwnGroup(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		p := source.Policy{ReplyTo: "jobs"}
		tr := x.ib.Queue("jobs").Transport(source.Env{Clock: newFakeClock(), Logger: quietLogger(t), Mount: "reply", Policy: p})
		if errs := tr.Validate(p); len(errs) != 1 {
			t.Fatalf("validate: %v, want one refusal of ReplyTo", errs)
		}
	})
}

// TestReplyToATableWithoutAGroupColumnInsertsIntoTheReplyTable: on a table without a
// group column, ReplyTo names a table with the same columns; the reply row is inserted
// there in the transaction that deletes the answered row.
func TestReplyToATableWithoutAGroupColumnInsertsIntoTheReplyTable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{noGroup: true})
		paid := x.tb.Name + "_paid"
		createNamed(t, b, x.db, cols{noGroup: true}, paid)
		x.publish(t, "", "order 7")
		x.run(t, x.ib.Queue(""), settle.Reply(func(_ context.Context, m *settle.Message, _ []byte) ([]byte, error) {
			return append([]byte("paid "), m.Payload...), nil
		}), settle.WithCodec(settle.Raw), settle.ReplyTo(paid))
		evs := x.rec.WaitFor(t, waitLong, "the reply", finals(1))
		if evs[0].Action != settle.ActionReply {
			t.Fatalf("settlement %+v, want a reply", evs[0])
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("got rows %+v in the queue table, want none", rows)
		}
		paidTb := x.tb
		paidTb.Name = paid
		if rows := readRows(t, b, x.db, paidTb); len(rows) != 1 || rows[0].payload != "paid order 7" || rows[0].attempt != 1 {
			t.Fatalf("got reply rows %+v, want one \"paid order 7\" at attempt 1", rows)
		}
	})
}
