package sqltest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// TestFilteredReplayMovesOnlyMatchingDeadRowsOnce: a dry run moves nothing; a replay
// filtered by last error moves exactly the matching dead rows back, attempt reset, and
// the healed handler acks them; run again it moves nothing; a purge deletes the rest,
// and run again deletes nothing. In a dead-letter group (to the group named) and in a
// dead-letter table (back into the table).
func TestFilteredReplayMovesOnlyMatchingDeadRowsOnce(t *testing.T) {
	t.Parallel()
	forEachDeadLetter(t, func(t *testing.T, b backend, c cols) {
		x := setupDead(t, b, c)
		ctx := context.Background()
		var to []inbox.ActionOption
		if !c.noGroup {
			to = append(to, inbox.To("jobs"))
		}
		smtp := inbox.Filter{Error: "smtp unavailable"}
		dry, err := x.ib.Replay(ctx, x.dead, smtp, append(to, inbox.DryRun())...)
		if err != nil || !dry.DryRun || len(dry.Replayed) != 3 {
			t.Fatalf("dry run: got %+v, %v; want 3 rows that would move", dry, err)
		}
		if rows, _ := x.ib.DeadRows(ctx, x.dead, inbox.Filter{}, 0); len(rows) != 5 {
			t.Fatalf("after the dry run: got %d dead rows, want 5", len(rows))
		}
		x.healed.Store(true)
		res, err := x.ib.Replay(ctx, x.dead, smtp, append(to, inbox.Rate(1000))...)
		if err != nil || len(res.Replayed) != 3 || len(res.Gone) != 0 {
			t.Fatalf("replay: got %+v, %v; want 3 rows moved", res, err)
		}
		evs := x.rec.WaitFor(t, waitLong, "the replayed rows acked", func(evs []settle.Settled) bool { return count(evs, settle.ActionAck) == 4 })
		for _, e := range evs[len(evs)-3:] {
			if e.Action != settle.ActionAck || e.Attempt != 1 {
				t.Errorf("a replayed row settled as %s at attempt %d, want an ack at attempt 1", e.Action, e.Attempt)
			}
		}
		again, err := x.ib.Replay(ctx, x.dead, smtp, to...)
		if err != nil || len(again.Replayed) != 0 {
			t.Fatalf("replay again: got %+v, %v; want nothing moved", again, err)
		}
		left, err := x.ib.DeadRows(ctx, x.dead, inbox.Filter{}, 0)
		if err != nil || fmt.Sprint(payloads(left)) != "[addr-1 addr-2]" {
			t.Fatalf("dead rows left: got %v, %v; want the two bad addresses", payloads(left), err)
		}
		if p, err := x.ib.Purge(ctx, x.dead, inbox.Filter{IDs: []string{left[0].ID}}, inbox.DryRun()); err != nil || p.Deleted != 0 || len(p.IDs) != 1 {
			t.Fatalf("purge dry run: got %+v, %v; want one row selected, none deleted", p, err)
		}
		p, err := x.ib.Purge(ctx, x.dead, inbox.Filter{Error: "bad address", Since: x.started})
		if err != nil || p.Deleted != 2 {
			t.Fatalf("purge: got %+v, %v; want 2 deleted", p, err)
		}
		if p, err := x.ib.Purge(ctx, x.dead, inbox.Filter{}); err != nil || p.Deleted != 0 {
			t.Fatalf("purge again: got %+v, %v; want nothing deleted", p, err)
		}
		v, err := x.ib.View(ctx, map[bool]string{true: "", false: "jobs"}[c.noGroup], x.dead)
		if err != nil || v.Dead != 0 || v.Waiting != 1 || v.Due != 0 {
			t.Fatalf("view at the end: got %+v, %v; want only the parked row", v, err)
		}
	})
}

// TestInboxAdminRefusesBadInputAndChangesNothing: a column the spec names that the
// table lacks, a replay from a dead-letter group without To or into itself, a filter on
// a column the spec does not name, and an id not in the dead letter are each refused
// with an error naming them, and no row changes.
func TestInboxAdminRefusesBadInputAndChangesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setupDead(t, b, cols{})
		ctx := context.Background()
		before := readRows(t, b, x.db, x.tb)
		noCol := x.tb
		noCol.LastError = "no_such_column"
		bad := inbox.New(x.db, b.d, noCol)
		_, viewErr := bad.View(ctx, "jobs", x.dead)
		_, replayErr := bad.Replay(ctx, x.dead, inbox.Filter{}, inbox.To("jobs"))
		for _, err := range []error{viewErr, replayErr} {
			if err == nil || !strings.Contains(err.Error(), "no_such_column") {
				t.Errorf("unknown column: got %v, want an error naming no_such_column", err)
			}
		}
		plain := inbox.New(x.db, b.d, cols{}.spec(x.tb.Name))
		cases := []struct {
			name string
			err  error
			want string
		}{
			{"NoTo", second(x.ib.Replay(ctx, x.dead, inbox.Filter{})), "name the group"},
			{"ToItself", second(x.ib.Replay(ctx, x.dead, inbox.Filter{}, inbox.To(x.dead))), "dead-letter group itself"},
			{"NoDeadLetter", second(x.ib.Replay(ctx, "", inbox.Filter{}, inbox.To("jobs"))), "name the dead letter"},
			{"ErrorFilterWithoutColumn", second(plain.Replay(ctx, x.dead, inbox.Filter{Error: "smtp"}, inbox.To("jobs"))), "Table.LastError"},
			{"IDNotFound", second(x.ib.Purge(ctx, x.dead, inbox.Filter{IDs: []string{"999999"}})), "999999"},
			{"NegativeLimit", second(x.ib.Purge(ctx, x.dead, inbox.Filter{}, inbox.Limit(-1))), "Limit(-1)"},
		}
		for _, tc := range cases {
			if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
				t.Errorf("%s: got %v, want an error containing %q", tc.name, tc.err, tc.want)
			}
		}
		if err := cases[4].err; !errors.Is(err, inbox.ErrRowNotFound) {
			t.Errorf("IDNotFound: got %v, want ErrRowNotFound", err)
		}
		if after := readRows(t, b, x.db, x.tb); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("rows changed: got %+v, want %+v", after, before)
		}
	})
}

// second returns the error of a two-value call.
func second[T any](_ T, err error) error { return err }
