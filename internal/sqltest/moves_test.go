package sqltest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/source"
)

// byPayload returns the deliveries keyed by payload.
func byPayload(ds []*source.Delivery) map[string]*source.Delivery {
	out := map[string]*source.Delivery{}
	for _, d := range ds {
		out[string(d.Payload)] = d
	}
	return out
}

// TestBatchedMovesAnswerEachRowOnItsOwn: one Moves call carrying a put-back, a park, a
// release and a put-back of a row whose lease another worker took over writes each kind
// in one statement and answers each move on its own: the taken-over row reports
// ErrLeaseLost and is not changed, the others apply (the put-back adds an attempt, the
// park hides its row, the release adds none).
func TestBatchedMovesAnswerEachRowOnItsOwn(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "put", "lost", "park", "release", "put2")
		tr := probe(t, x.ib.Queue("jobs"), x.clock)
		ds, err := tr.Fetch(context.Background(), 10, 0)
		if err != nil || len(ds) != 5 {
			t.Fatalf("claim: got %d rows, err %v; want 5", len(ds), err)
		}
		// Another worker's claim of "lost" wrote a lease of its own.
		q := quoteFor(b.d)
		if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s",
			q(x.tb.Name), q(x.tb.LockedUntil), farFuture(b.d), q(x.tb.Payload), placeholder(b.d, 1)), []byte("lost")); err != nil {
			t.Fatalf("take the lease over: %v", err)
		}
		p := byPayload(ds)
		ms := []source.Move{
			{Action: source.ActionPutBack, Delivery: p["put"]},
			{Action: source.ActionPutBack, Delivery: p["lost"]},
			{Action: source.ActionPark, Delivery: p["park"], Delay: time.Hour},
			{Action: source.ActionRelease, Delivery: p["release"]},
			{Action: source.ActionCopy, Delivery: p["put2"]},
		}
		errs := tr.Moves(context.Background(), ms)
		for i, err := range errs {
			want := error(nil)
			if i == 1 {
				want = inbox.ErrLeaseLost
			}
			if !errors.Is(err, want) {
				t.Errorf("move %d (%s of %s): got %v, want %v", i, ms[i].Action, ms[i].Delivery.Payload, err, want)
			}
		}
		// Due now: the put-backs (attempt 2) and the release (attempt 1); the park waits an
		// hour and "lost" stays leased to the other worker.
		again, err := probe(t, x.ib.Queue("jobs"), x.clock).Fetch(context.Background(), 10, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range again {
			got = append(got, fmt.Sprintf("%s@%d", d.Payload, d.Attempt))
		}
		sort.Strings(got)
		if want := []string{"put2@2", "put@2", "release@1"}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("claimed after the moves: got %v, want %v", got, want)
		}
	})
}

// TestBatchedDeadLettersSetEachRowsOwnAttempt: dead letters to a group written in one
// statement keep each row's attempt as the engine counted it.
func TestBatchedDeadLettersSetEachRowsOwnAttempt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		x.publish(t, "jobs", "a", "b")
		tr := probe(t, x.ib.Queue("jobs"), x.clock)
		ds, err := tr.Fetch(context.Background(), 10, 0)
		if err != nil || len(ds) != 2 {
			t.Fatalf("claim: got %d rows, err %v; want 2", len(ds), err)
		}
		p := byPayload(ds)
		p["a"].Attempt, p["b"].Attempt = 3, 5
		errs := tr.Moves(context.Background(), []source.Move{
			{Action: source.ActionDeadLetter, Delivery: p["a"], Dest: "jobs.dead"},
			{Action: source.ActionDeadLetter, Delivery: p["b"], Dest: "jobs.dead"},
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("dead letters: %v", err)
		}
		rows := readRows(t, b, x.db, x.tb)
		want := []row{{attempt: 3, group: "jobs.dead", payload: "a"}, {attempt: 5, group: "jobs.dead", payload: "b"}}
		if fmt.Sprint(rows) != fmt.Sprint(want) {
			t.Fatalf("got rows %+v, want %+v", rows, want)
		}
	})
}

// farFuture is a time in the dialect's time column type, far ahead of now.
func farFuture(d inbox.Dialect) string {
	if d == inbox.SQLite {
		return "'2999-01-01T00:00:00.000+00:00'"
	}
	return "'2999-01-01 00:00:00'"
}

// TestPlainQueueClaimsEarliestDueFirstWithTheDueIndex: a plain queue on a table with
// an index led by (group, retry_after) takes due rows in (retry_after, id) order, which
// the index serves without reading past the rows parked for later: a row due long ago
// goes before an older row (a lower id) due just now, and a row parked for later is not
// taken. Without the index it claims in id order, which the primary key serves (the
// earliest-due order would sort the whole group on every claim).
func TestPlainQueueClaimsEarliestDueFirstWithTheDueIndex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    cols
		want []string
	}{
		{"WithTheIndex", cols{}, []string{"long-ago", "now"}},
		{"WithoutTheIndex", cols{noDueIndex: true}, []string{"now", "long-ago"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, b backend) {
				x := setup(t, b, tc.c)
				x.publish(t, "jobs", "parked", "now", "long-ago")
				q := quoteFor(b.d)
				for payload, at := range map[string]string{"parked": farFuture(b.d), "long-ago": longAgo(b.d)} {
					if _, err := x.db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = %s",
						q(x.tb.Name), q(x.tb.RetryAfter), at, q(x.tb.Payload), placeholder(b.d, 1)), []byte(payload)); err != nil {
						t.Fatal(err)
					}
				}
				tr := probe(t, x.ib.Queue("jobs"), nil)
				var got []string
				for range 3 {
					ds, err := tr.Fetch(context.Background(), 1, 0)
					if err != nil {
						t.Fatal(err)
					}
					for _, d := range ds {
						got = append(got, string(d.Payload))
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("claimed one at a time: got %v, want %v", got, tc.want)
				}
			})
		})
	}
}

// longAgo is a time in the dialect's time column type, long before now.
func longAgo(d inbox.Dialect) string {
	if d == inbox.SQLite {
		return "'2000-01-01T00:00:00.000+00:00'"
	}
	return "'2000-01-01 00:00:00'"
}
