package sqltest

import (
	"context"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/sourcetest"
)

// conformance are the differences the suite allows a table inbox: no headers, Retry
// without a cap puts the row back in place, and a cap and a dead letter come together.
// It takes the flow limits and Dedupe, their state in the README's flow tables.
var conformance = sourcetest.Features{CapNeedsDeadLetter: true, NoHeaders: true, PutsBackWithoutCap: true, TakesLimits: true}

func TestConformance(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		t.Run("FakeClock", func(t *testing.T) {
			t.Parallel()
			sourcetest.Run(t, conformance, func(t *testing.T) *sourcetest.Subject { return subject(t, b, true) })
		})
		t.Run("RealClock", func(t *testing.T) {
			t.Parallel()
			sourcetest.Run(t, conformance, func(t *testing.T) *sourcetest.Subject { return subject(t, b, false) })
		})
	})
}

// subject is a fresh table on b, read as the group "jobs", dead letters in "jobs.dead".
func subject(t *testing.T, b backend, fake bool) *sourcetest.Subject {
	db := b.open(t)
	// A headers column carries the flow limits' scenarios' key ("k"): the suite's
	// header checks stay off (NoHeaders), the column being optional.
	tb := createTable(t, b, db, cols{headers: true})
	ib := inbox.New(db, b.d, tb, flowTables(t, b, db).opts()...)
	// rowsOf reads the payloads of the rows of group, as the suite reads a destination.
	rowsOf := func(t testing.TB, group string) []sourcetest.Dead {
		var out []sourcetest.Dead
		for _, r := range readRows(t, b, db, tb) {
			if r.group == group {
				out = append(out, sourcetest.Dead{Payload: []byte(r.payload)})
			}
		}
		return out
	}
	s := &sourcetest.Subject{
		Config:      settle.Config{Logger: quietLogger(t), DrainTimeout: 2 * time.Second},
		DeadLetter:  "jobs.dead",
		DeadLetters: func(t testing.TB) []sourcetest.Dead { return rowsOf(t, "jobs.dead") },
		ReplyTo:     "jobs.replies",
		Replies:     func(t testing.TB) []sourcetest.Dead { return rowsOf(t, "jobs.replies") },
		Pending: func(t testing.TB) int64 {
			var n int64
			for _, r := range readRows(t, b, db, tb) {
				if r.leased {
					n++
				}
			}
			return n
		},
		Publish: func(t testing.TB, payload []byte, headers map[string]string) {
			var opts []settle.PublishOption
			for k, v := range headers {
				opts = append(opts, settle.Header(k, v))
			}
			if _, err := ib.PublishBytes(context.Background(), "jobs", payload, opts...); err != nil {
				t.Fatalf("publish: %v", err)
			}
		},
		Source: ib.Queue("jobs", inbox.Poll(20*time.Millisecond)),
		Pause: func(t testing.TB) {
			if err := ib.Pause(context.Background(), "jobs"); err != nil {
				t.Fatalf("pause: %v", err)
			}
		},
		Resume: func(t testing.TB) {
			if err := ib.Resume(context.Background(), "jobs"); err != nil {
				t.Fatalf("resume: %v", err)
			}
		},
	}
	if fake {
		// The suite's waits nudge the fake clock a minute every few milliseconds: a lease
		// longer than any wait keeps a row from expiring under its running handler (a
		// jump past the lease is a crashed worker to the table).
		s.Source = ib.Queue("jobs", inbox.Poll(20*time.Millisecond), inbox.Lease(7*24*time.Hour))
		c := newFakeClock()
		s.Advance = c.Advance
		s.Config.Test.Clock = c
	}
	return s
}
