package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
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

// producerServer returns the database of a test of a producer beside consumers, and a
// function that opens a pool of its own on it for each of them: on MariaDB a server of the
// test's own that does not flush its log at each commit, and on PostgreSQL sessions
// that do not wait for the flush (synchronous_commit off), so that 10,000 INSERTs of
// one connection take seconds, not the minute a flush each takes on a shared server;
// locks are taken as ever.
func producerServer(t *testing.T, b backend) (*sql.DB, func() *sql.DB) {
	t.Helper()
	if b.d == inbox.MySQL {
		dsn := privateMariaDB(t, "--innodb-flush-log-at-trx-commit=0")
		open := func() *sql.DB {
			p := openPool(t, "mysql", dsn)
			p.SetMaxOpenConns(8)
			return p
		}
		return open(), open
	}
	u, err := url.Parse(os.Getenv("SETTLE_POSTGRES_URL"))
	if err != nil {
		t.Fatal(err)
	}
	qs := u.Query()
	qs.Set("synchronous_commit", "off")
	u.RawQuery = qs.Encode()
	open := func() *sql.DB {
		p := openPool(t, "pgx", u.String())
		p.SetMaxOpenConns(8)
		return p
	}
	return open(), open
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
		if b.d == inbox.SQLite {
			// One writer at a time, whose busy handler polls: a producer and four
			// consumers writing back to back in one file can keep each other out past a
			// busy_timeout (RELIABILITY.md §7), whatever the order of any locks.
			t.Skip("SQLite has no row locks: the rule is MySQL's and PostgreSQL's")
		}
		db, pool := producerServer(t, b) // the tables' subtests share it
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
				tb := createTable(t, b, db, tc.c)
				q := quoteFor(b.d)
				for i, cols := range tc.indexes {
					if _, err := db.ExecContext(context.Background(), fmt.Sprintf("CREATE INDEX %s ON %s (%s)", q(fmt.Sprintf("%s_%d", tb.Name, i)), q(tb.Name), cols)); err != nil {
						t.Fatalf("create index: %v", err)
					}
				}
				var perrs []error
				produced := make(chan struct{})
				go func() {
					defer close(produced)
					perrs = produce(t, b, pool(), tb, "load", rows)
				}()
				var failures []string
				var mu sync.Mutex
				start := time.Now()
				handled, _ := drainWith(t, b, tb, drainSpec{consumers: 4, rows: rows, timeout: 3 * time.Minute, pool: pool,
					failures: true, // counted, and each reported below
					failed: func(s settle.Settled) {
						mu.Lock()
						failures = append(failures, s.Err.Error())
						mu.Unlock()
					},
					done: func() bool {
						select {
						case <-produced:
						default:
							return false
						}
						var left int
						err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+q(tb.Name)).Scan(&left)
						return err == nil && left == 0
					}})
				<-produced
				mu.Lock()
				defer mu.Unlock()
				t.Logf("%s, %s: %d rows inserted one at a time and drained by four consumers in %s; %d INSERTs failed, %d settlements",
					b.name, tc.name, rows, time.Since(start).Round(time.Millisecond), len(perrs), len(failures))
				for i, err := range perrs {
					if i == 5 {
						t.Errorf("and %d more", len(perrs)-i)
						break
					}
					t.Errorf("producer: %v", err)
				}
				if len(failures) > 0 {
					t.Errorf("%d settlements failed, the first: %s", len(failures), failures[0])
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
