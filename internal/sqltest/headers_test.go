package sqltest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// headersOf returns the headers of the one row of table tb (tb.Headers named), read
// back through the inbox's own row listing.
func headersOf(t *testing.T, ib *inbox.Inbox, dead string) map[string]string {
	t.Helper()
	rows, err := ib.DeadRows(context.Background(), dead, inbox.Filter{}, 0)
	if err != nil || len(rows) != 1 {
		t.Fatalf("dead rows of %s: %+v, %v; want one", dead, rows, err)
	}
	return rows[0].Headers
}

// forEachDeadLetterKind runs fn on every backend for a table with a headers column and
// each kind of dead letter: a dead-letter group, and (a table without a group column) a
// dead-letter table. group is what to publish to, dead the mount's DeadLetter.
func forEachDeadLetterKind(t *testing.T, fn func(t *testing.T, x *testBundle, group, dead string)) {
	for _, tc := range []struct {
		name string
		c    cols
	}{
		{"DeadLetterGroup", cols{headers: true}},
		{"DeadLetterTable", cols{headers: true, noGroup: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, tc.c)
				group, dead := "jobs", "jobs.dead"
				if tc.c.noGroup {
					group, dead = "", x.tb.Name+"_dead"
					createNamed(t, b, x.db, tc.c, dead)
				}
				fn(t, x, group, dead)
			})
		})
	}
}

func TestHeadersTravelThroughTheTableToTheHandlerAndStayWithTheDeadLetter(t *testing.T) {
	t.Parallel()
	forEachDeadLetterKind(t, func(t *testing.T, x *testBundle, group, dead string) {
		id, err := x.ib.PublishBytes(context.Background(), group, []byte("p"), settle.Header("trace", "00-abc-01"), settle.Header("tenant", "acme"))
		if err != nil {
			t.Fatal(err)
		}
		got, release := make(chan map[string]string, 1), make(chan struct{})
		var calls atomic.Int32
		x.run(t, x.ib.Queue(group), raw(func(_ context.Context, m *settle.Message) error {
			if calls.Add(1) > 1 {
				<-release // the replayed row stays leased in the table while the test reads it
				return nil
			}
			got <- m.Headers
			return errors.New("fails")
		}), settle.MaxAttempts(1), settle.DeadLetter(dead))
		t.Cleanup(func() { close(release) }) // before the App stops
		x.rec.WaitFor(t, waitLong, "the dead letter", finals(1))
		if h := <-got; h["trace"] != "00-abc-01" || h["tenant"] != "acme" {
			t.Fatalf("the handler saw headers %v, want trace and tenant", h)
		}
		if h := headersOf(t, x.ib, dead); h["trace"] != "00-abc-01" || h["tenant"] != "acme" || len(h) != 2 {
			t.Fatalf("the dead letter holds headers %v, want the published ones", h)
		}
		// A replay brings the row back with them.
		var opts []inbox.ActionOption
		if group != "" {
			opts = append(opts, inbox.To(group))
		}
		if _, err := x.ib.Replay(context.Background(), dead, inbox.Filter{}, opts...); err != nil {
			t.Fatal(err)
		}
		row, err := x.ib.Peek(context.Background(), strconv.FormatInt(id, 10), nil)
		if err != nil || row.Headers["trace"] != "00-abc-01" || len(row.Headers) != 2 {
			t.Fatalf("the replayed row %d = %+v, %v; want the published headers", id, row, err)
		}
	})
}

func TestPublishWithHeadersIsRefusedWithoutAHeadersColumn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		_, err := x.ib.PublishBytes(context.Background(), "jobs", []byte("p"), settle.Header("trace", "x"))
		if err == nil || !strings.Contains(err.Error(), "Headers column") {
			t.Fatalf("PublishBytes with a header = %v, want a refusal naming the missing column", err)
		}
		if _, err := x.ib.PublishBytes(context.Background(), "jobs", []byte("p"), settle.MaxLen(3)); err == nil || !strings.Contains(err.Error(), "MaxLen") {
			t.Fatalf("PublishBytes(MaxLen) = %v, want a refusal naming MaxLen", err)
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("refused publishes wrote %+v", rows)
		}
	})
}
