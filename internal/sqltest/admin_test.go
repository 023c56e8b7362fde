package sqltest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// adminBundle is an inbox whose App dead-lettered rows the real way: three failed with
// "smtp unavailable", two with "bad address 42", one was acked and one waits an hour
// after failing with "try later".
type adminBundle struct {
	*testBundle
	dead    string      // the dead letter: a group, or a dead-letter table
	healed  atomic.Bool // the handler acks every row from now on
	started time.Time   // before the first row was dead-lettered
}

func setupDead(t *testing.T, b backend, c cols) *adminBundle {
	t.Helper()
	c.why = true
	x := &adminBundle{testBundle: setup(t, b, c), dead: "jobs.dead", started: time.Now().Add(-time.Second)}
	group := "jobs"
	if c.noGroup {
		group = ""
		x.dead = uniqueName("settle_dead")
		createNamed(t, b, x.db, cols{noGroup: true, why: true, noAttempt: c.noAttempt}, x.dead)
	}
	x.publish(t, group, "smtp-1", "addr-1", "smtp-2", "ok-1", "addr-2", "smtp-3", "later-1")
	x.run(t, x.ib.Queue(group), raw(func(ctx context.Context, m *settle.Message) error {
		p := string(m.Payload)
		switch {
		case x.healed.Load(), strings.HasPrefix(p, "ok"):
			return nil
		case strings.HasPrefix(p, "smtp"):
			return errors.New("smtp unavailable")
		case strings.HasPrefix(p, "addr"):
			return errors.New("bad address 42")
		}
		return settle.RetryAfter(time.Hour, errors.New("try later"))
	}), settle.MaxAttempts(2), settle.DeadLetter(x.dead), settle.Backoff(func(int, error) time.Duration { return 0 }))
	x.rec.WaitFor(t, waitLong, "five dead letters, an ack and a park", func(evs []settle.Settled) bool {
		return count(evs, settle.ActionDeadLetter) == 5 && count(evs, settle.ActionAck) == 1 && count(evs, settle.ActionPark) == 1
	})
	return x
}

// forEachDeadLetter runs fn per backend for a dead-letter group and a dead-letter
// table (c.noGroup).
func forEachDeadLetter(t *testing.T, fn func(t *testing.T, b backend, c cols)) {
	t.Helper()
	for _, c := range []cols{{}, {noGroup: true}} {
		t.Run(fmt.Sprintf("NoGroup=%v", c.noGroup), func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) { fn(t, b, c) })
		})
	}
}

// payloads returns the payloads of rows, sorted.
func payloads(rows []inbox.Row) []string {
	var out []string
	for _, r := range rows {
		out = append(out, string(r.Payload))
	}
	sort.Strings(out)
	return out
}

// TestDeadInboxRowsCarryTheirLastErrorAndWhenTheyDied: a row dead-lettered at the cap
// keeps the error its handler last returned and the time it was moved, in a
// dead-letter group and in a dead-letter table; a row parked by RetryAfter keeps its
// error too.
func TestDeadInboxRowsCarryTheirLastErrorAndWhenTheyDied(t *testing.T) {
	t.Parallel()
	forEachDeadLetter(t, func(t *testing.T, b backend, c cols) {
		x := setupDead(t, b, c)
		rows, err := x.ib.DeadRows(context.Background(), x.dead, inbox.Filter{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 5 {
			t.Fatalf("got %d dead rows, want 5: %+v", len(rows), rows)
		}
		for _, r := range rows {
			want := "smtp unavailable"
			if strings.HasPrefix(string(r.Payload), "addr") {
				want = "bad address 42"
			}
			if r.LastError != want || r.Attempt != 2 || !r.LockedUntil.IsZero() {
				t.Errorf("row %s (%s): got last error %q, attempt %d, lease %v; want %q, 2, none", r.ID, r.Payload, r.LastError, r.Attempt, r.LockedUntil, want)
			}
			if r.DeadAt.Before(x.started) || r.DeadAt.After(time.Now().Add(time.Minute)) {
				t.Errorf("row %s: dead at %v, want after %v and about now", r.ID, r.DeadAt, x.started)
			}
		}
		p, err := x.ib.Peek(context.Background(), rows[0].ID, settle.Raw)
		if c.noGroup {
			// Peek reads the inbox's table: the row is in the dead-letter table.
			if !errors.Is(err, inbox.ErrRowNotFound) {
				t.Fatalf("peek a row of the dead-letter table in the inbox's: got %v, want ErrRowNotFound", err)
			}
			p, err = x.ib.PeekDead(context.Background(), x.dead, rows[0].ID, settle.Raw)
		}
		if err != nil || p.Format != "text" || p.Shown != string(rows[0].Payload) || p.DecodeError != "" {
			t.Fatalf("peek %s: got %+v, %v; want its payload as text", rows[0].ID, p, err)
		}
		parked, err := x.ib.Peek(context.Background(), x.idOf(t, "later-1"), settle.Raw)
		if err != nil || !strings.HasSuffix(parked.LastError, ": try later") || !parked.DeadAt.IsZero() || parked.Shown != "later-1" || parked.RetryAfter.Before(time.Now().Add(50*time.Minute)) {
			t.Fatalf("peek the parked row: got %+v, %v; want its last error (try later), not dead, due in an hour", parked, err)
		}
	})
}

// idOf returns the id of the row of the inbox's table holding payload.
func (x *adminBundle) idOf(t *testing.T, payload string) string {
	t.Helper()
	q := quoteFor(x.b.d)
	ids := column(t, x.db, fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", q(x.tb.ID), q(x.tb.Name), q(x.tb.Payload), placeholder(x.b.d, 1)), []byte(payload))
	if len(ids) != 1 {
		t.Fatalf("rows holding %q: got %v, want one", payload, ids)
	}
	return fmt.Sprint(ids[0])
}

// TestInboxViewCountsEachStateOfAGroup: the view of a group counts its due, leased,
// lease-passed and waiting rows and its dead letter's rows exactly, and how long its
// oldest due row has waited.
func TestInboxViewCountsEachStateOfAGroup(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setupDead(t, b, cols{})
		v, err := x.ib.View(context.Background(), "jobs", x.dead)
		if err != nil {
			t.Fatal(err)
		}
		if want := (inbox.GroupView{Group: "jobs", Dead: 5, Waiting: 1}); *v != want {
			t.Fatalf("view: got %+v, want %+v", *v, want)
		}
		// Another group: two due rows (one published a while ago), one leased, one whose
		// lease passed.
		q := quoteFor(b.d)
		x.publish(t, "other", "due-1", "due-2", "leased", "passed")
		if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s",
			q(x.tb.Name), q(x.tb.LockedUntil), farFuture(b.d), q(x.tb.Payload), placeholder(b.d, 1)), []byte("leased")); err != nil {
			t.Fatal(err)
		}
		if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s, %s = %s WHERE %s = %s",
			q(x.tb.Name), q(x.tb.LockedUntil), farPast(b.d), q(x.tb.RetryAfter), farPast(b.d), q(x.tb.Payload), placeholder(b.d, 1)), []byte("passed")); err != nil {
			t.Fatal(err)
		}
		if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s",
			q(x.tb.Name), q(x.tb.RetryAfter), farPast(b.d), q(x.tb.Payload), placeholder(b.d, 1)), []byte("due-1")); err != nil {
			t.Fatal(err)
		}
		v, err = x.ib.View(context.Background(), "other", "")
		if err != nil {
			t.Fatal(err)
		}
		if v.Due != 2 || v.Leased != 1 || v.LeasePassed != 1 || v.Waiting != 0 || v.Dead != 0 || v.OldestDue < 24*time.Hour {
			t.Fatalf("view of other: got %+v, want 2 due (the oldest a day old at least), 1 leased, 1 lease passed", *v)
		}
	})
}

// farPast is a time long gone, as a literal of the dialect's time columns.
func farPast(d inbox.Dialect) string {
	if d == inbox.SQLite {
		return "'2000-01-01T00:00:00.000+00:00'"
	}
	return "'2000-01-01 00:00:00'"
}
