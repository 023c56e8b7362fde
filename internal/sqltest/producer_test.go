package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle/inbox"
)

// produce inserts rows rows of group, one plain INSERT each on one connection of db (as
// another program would: no retry), and returns the errors the INSERTs met.
func produce(t testing.TB, b backend, db *sql.DB, tb inbox.Table, group string, rows int) []error {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Errorf("producer connection: %v", err)
		return nil
	}
	defer conn.Close()
	q := quoteFor(b.d)
	insert := fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES (%s, %s)", q(tb.Name), q(tb.Group), q(tb.Payload), placeholder(b.d, 1), placeholder(b.d, 2))
	var errs []error
	for i := range rows {
		if _, err := conn.ExecContext(ctx, insert, group, []byte(fmt.Sprint(i))); err != nil {
			errs = append(errs, fmt.Errorf("row %d: %w", i, err))
		}
	}
	return errs
}

// TestClaimsNeverMakeAProducersInsertFail: while four consumers (Apps of their own pools)
// claim and ack, one connection inserts 10,000 rows, one plain INSERT each with no retry,
// as another program would: none fails, and every row is handled once. On MariaDB a
// claim at REPEATABLE READ held gaps of the group's index that an INSERT waited for, and
// waited in turn for the INSERT's new row: InnoDB rolled the INSERT back as the
// deadlock's victim (error 1213). Three tables: with the README's indexes ((group,
// retry_after, id), where it showed, and (group, locked_until)), with an index on the
// group alone, and with the primary key only.
func TestClaimsNeverMakeAProducersInsertFail(t *testing.T) {
	t.Parallel()
	const rows = 10000
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, tc := range []struct {
			name    string
			c       cols
			indexes []string // more indexes' columns
		}{
			{"RecommendedIndexes", cols{}, []string{"name, locked_until"}},
			{"GroupIndex", cols{noDueIndex: true}, []string{"name"}},
			{"NoIndex", cols{noDueIndex: true}, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				db := b.open(t)
				tb := createTable(t, b, db, tc.c)
				q := quoteFor(b.d)
				for i, cols := range tc.indexes {
					if _, err := db.ExecContext(context.Background(), fmt.Sprintf("CREATE INDEX %s ON %s (%s)", q(fmt.Sprintf("%s_%d", tb.Name, i)), q(tb.Name), cols)); err != nil {
						t.Fatalf("create index: %v", err)
					}
				}
				pool := func() *sql.DB {
					if b.d == inbox.SQLite {
						return db // one file: one pool (see openSeparate)
					}
					p := ownPool(t, b)
					p.SetMaxOpenConns(4) // small: three tables at once on the shared servers
					return p
				}
				var perrs []error
				produced := make(chan struct{})
				go func() {
					defer close(produced)
					perrs = produce(t, b, pool(), tb, "load", rows)
				}()
				var settled atomic.Int64
				start := time.Now()
				handled, _ := drainWith(t, b, tb, drainSpec{consumers: 4, rows: rows, timeout: 5 * time.Minute, pool: pool,
					settled: func(n int64) { settled.Store(n) },
					done: func() bool {
						select {
						case <-produced:
							return settled.Load() == int64(rows-len(perrs))
						default:
							return false
						}
					}})
				<-produced
				t.Logf("%s, %s: %d rows inserted one at a time and drained by four consumers in %s; %d INSERTs failed",
					b.name, tc.name, rows, time.Since(start).Round(time.Millisecond), len(perrs))
				for i, err := range perrs {
					if i == 5 {
						t.Errorf("and %d more", len(perrs)-i)
						break
					}
					t.Errorf("producer: %v", err)
				}
				if len(handled) != rows-len(perrs) {
					t.Errorf("got %d distinct rows handled, want %d", len(handled), rows-len(perrs))
				}
				for p, n := range handled {
					if n != 1 {
						t.Fatalf("row %s handled %d times, want once", p, n)
					}
				}
			})
		}
	})
}
