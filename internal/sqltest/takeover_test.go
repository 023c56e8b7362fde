package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/sourcetest"
)

// TestRowsWhoseLeasePassedAreTakenOverOneAtATimeEachRunAlone: 30 rows leased to a
// worker that crashed (their leases passed) and 10 new rows; a live App with
// Concurrency(4) (and its read-ahead of twice the Batch) takes the dead worker's rows
// over one at a time and runs each alone: while one runs, it is the only row the worker
// holds leased and no other handler runs, so a row that kills its process is charged
// its crash alone. The new rows flow beside them: every dead worker's row is handled at
// attempt 2 (the crash counted once), every new one at attempt 1.
func TestRowsWhoseLeasePassedAreTakenOverOneAtATimeEachRunAlone(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x := setup(t, b, cols{})
		const dead, fresh, concurrency, lease = 30, 10, 4, time.Minute
		for i := range dead {
			x.publish(t, "jobs", fmt.Sprintf("dead-%02d", i))
		}
		q := x.ib.Queue("jobs", inbox.Lease(lease), inbox.Batch(dead+fresh), inbox.Poll(10*time.Millisecond))
		ds, err := probe(t, q, x.clock).Fetch(context.Background(), dead, 0)
		if err != nil || len(ds) != dead {
			t.Fatalf("the worker that crashes claimed %d rows (err %v), want %d", len(ds), err, dead)
		}
		abandoned := leasesByID(t, x)
		for i := range fresh {
			x.publish(t, "jobs", fmt.Sprintf("fresh-%02d", i))
		}
		x.clock.Advance(lease + time.Millisecond)

		var mu sync.Mutex
		var running sourcetest.Concurrent
		var problems []string
		attempts := map[string]int{}
		x.run(t, q, raw(func(ctx context.Context, m *settle.Message) error {
			alone, leave := running.Enter()
			defer leave()
			// The rows this worker holds: those leased, but for the dead worker's rows
			// still under the lease it wrote.
			held := 0
			for id, l := range leasesByID(t, x) {
				if was, ok := abandoned[id]; l != "<nil>" && (!ok || l != was) {
					held++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			p := string(m.Payload)
			if strings.HasPrefix(p, "dead-") && (!alone || held != 1) {
				problems = append(problems, fmt.Sprintf("%s ran beside others (alone %v, %d rows held)", p, alone, held))
			}
			if _, again := attempts[p]; again {
				problems = append(problems, p+" ran twice")
			}
			attempts[p] = m.Attempt
			return nil
		}), settle.Concurrency(concurrency))
		x.rec.WaitFor(t, waitLong, "every row's ack", func(evs []settle.Settled) bool { return count(evs, settle.ActionAck) == dead+fresh })

		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Fatalf("%s", strings.Join(problems, "; "))
		}
		for p, a := range attempts {
			want := 1
			if strings.HasPrefix(p, "dead-") {
				want = 2
			}
			if a != want {
				t.Errorf("%s handled at attempt %d, want %d", p, a, want)
			}
		}
		if rows := readRows(t, b, x.db, x.tb); len(rows) != 0 {
			t.Fatalf("rows left %+v, want none", rows)
		}
	})
}

// leasesByID returns the lease of each row of the bundle's table, by id, as text
// ("<nil>": none).
func leasesByID(t testing.TB, x *testBundle) map[string]string {
	t.Helper()
	q := quoteFor(x.b.d)
	rows, err := x.db.QueryContext(context.Background(), fmt.Sprintf("SELECT %s, %s FROM %s", q(x.tb.ID), q(x.tb.LockedUntil), q(x.tb.Name)))
	if err != nil {
		t.Errorf("read leases: %v", err)
		return nil
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, l sql.NullString
		if err := rows.Scan(&id, &l); err != nil {
			t.Errorf("read leases: %v", err)
			return nil
		}
		out[id.String] = "<nil>"
		if l.Valid {
			out[id.String] = l.String
		}
	}
	if err := rows.Err(); err != nil {
		t.Errorf("read leases: %v", err)
	}
	return out
}
