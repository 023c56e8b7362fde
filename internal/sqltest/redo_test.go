package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
	"github.com/settlekit/settle/internal/faults"
)

// proxied opens a pool of its own on b's server through a loopback proxy that cuts its
// connections on demand (Postgres and MySQL; SQLite has no connection to cut).
func proxied(t *testing.T, b backend) (*sql.DB, *faults.Proxy) {
	t.Helper()
	p := faults.Start(t, serverAddr(t, b))
	return throughProxy(t, b, p), p
}

// serverAddr is the host:port of b's server, from its URL or DSN.
func serverAddr(t *testing.T, b backend) string {
	t.Helper()
	if b.d == inbox.Postgres {
		u, err := url.Parse(os.Getenv("SETTLE_POSTGRES_URL"))
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	}
	m := mysqlAddr.FindStringSubmatch(os.Getenv("SETTLE_MYSQL_DSN"))
	if m == nil {
		t.Fatalf("no tcp(host:port) in SETTLE_MYSQL_DSN")
	}
	return m[1]
}

// mysqlAddr finds the server's address in a MySQL DSN.
var mysqlAddr = regexp.MustCompile(`tcp\(([^)]*)\)`)

// throughProxy opens a pool of its own on b's server through p.
func throughProxy(t *testing.T, b backend, p *faults.Proxy) *sql.DB {
	t.Helper()
	if b.d == inbox.Postgres {
		u, err := url.Parse(os.Getenv("SETTLE_POSTGRES_URL"))
		if err != nil {
			t.Fatal(err)
		}
		u.Host = p.Addr()
		return openPool(t, "pgx", u.String())
	}
	// With read and write timeouts, as a client of a server that may vanish wants: a
	// connection the cut left half-open fails instead of waiting for ever.
	return openPool(t, "mysql", mysqlAddr.ReplaceAllString(mysqlDSN(os.Getenv("SETTLE_MYSQL_DSN")), "tcp("+p.Addr()+")")+"&readTimeout=5s&writeTimeout=5s")
}

// openPool opens a pool on dsn, closed after the test.
func openPool(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSettlementsThatFailedWhileTheDatabaseWasDownAreAppliedOnceItAnswers: an ack, a put
// back, a park and a dead letter whose statements failed because the database was down
// (every connection cut and new ones refused; on SQLite, a driver failing every
// statement) are applied once it answers again, without
// waiting for their leases to pass (the test clock never moves: a lease never passes)
// and without running a handler again: the acked row is gone, the retried row is
// handled once more and acked, the parked row waits unleased at attempt 2, the dead row
// is in the dead-letter group.
func TestSettlementsThatFailedWhileTheDatabaseWasDownAreAppliedOnceItAnswers(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		x, out := setupOutage(t, b)
		x.publish(t, "jobs", "ack", "retry", "park", "dead")
		x.setRow(t, "dead", 5, false)
		var mu sync.Mutex
		handled := map[string]int{}
		first, release := make(chan string, 4), make(chan struct{})
		outcome := map[string]error{
			"ack":   nil,
			"retry": settle.Retry(errors.New("provider unavailable")),
			"park":  settle.RetryAfter(time.Hour, errors.New("busy")),
			"dead":  errors.New("no such account"),
		}
		x.run(t, inbox.New(out.db, b.d, x.tb).Queue("jobs", inbox.Poll(10*time.Millisecond), inbox.PollOnly()), raw(func(ctx context.Context, m *settle.Message) error {
			p := string(m.Payload)
			mu.Lock()
			handled[p]++
			n := handled[p]
			mu.Unlock()
			if n > 1 {
				return nil
			}
			first <- p
			<-release
			return outcome[p]
		}), settle.MaxAttempts(5), settle.DeadLetter("jobs.dead"), settle.Concurrency(4))
		for range 4 {
			select {
			case <-first:
			case <-time.After(waitLong):
				t.Fatal("the four rows did not all reach their handlers")
			}
		}
		out.down()
		close(release)
		x.rec.WaitFor(t, waitLong, "four failed settlements", func(evs []settle.Settled) bool {
			failed := 0
			for _, e := range evs {
				if e.Err != nil {
					failed++
				}
			}
			return failed >= 4
		})
		out.up()
		want := fmt.Sprint([]row{{attempt: 2, group: "jobs", payload: "park"}, {attempt: 5, group: "jobs.dead", payload: "dead"}})
		eventually(t, "the failed settlements applied", func() bool { return fmt.Sprint(readRows(t, b, x.db, x.tb)) == want })
		x.rec.WaitFor(t, waitLong, "the retried row's ack", func(evs []settle.Settled) bool {
			for _, e := range evs {
				if e.Action == settle.ActionAck && e.Err == nil && e.Attempt == 2 {
					return true
				}
			}
			return false
		})
		mu.Lock()
		defer mu.Unlock()
		if got := fmt.Sprint(handled); got != "map[ack:1 dead:1 park:1 retry:2]" {
			t.Fatalf("handled %s, want every row once and the retried one twice", got)
		}
	})
}

// TestFourConsumersDrainThroughADatabaseOutageWithinSecondsNotALease: four consumers
// (separate Apps, the default 30 s lease, the wall clock) drain 2,000 rows through a
// proxy that cuts every connection once a quarter of them are settled and refuses new
// ones for half a second. The settlements that failed meanwhile are applied again once
// the database answers, so the table is empty well within one lease: the wait's bound
// (20 s) is shorter than the lease, which the rows of those settlements waited out
// before (a drain of 32 s).
func TestFourConsumersDrainThroughADatabaseOutageWithinSecondsNotALease(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		if b.d == inbox.SQLite {
			t.Skip("SQLite has no server connection to cut")
		}
		const rows = 2000
		db := b.open(t)
		tb := createTable(t, b, db, cols{})
		bulkInsert(t, b, db, tb, "load", rows)
		proxy := faults.Start(t, serverAddr(t, b))
		var cut sync.Once
		q := quoteFor(b.d)
		handled, elapsed := drainWith(t, b, tb, drainSpec{
			consumers: 4, rows: rows, failures: true, timeout: 20 * time.Second,
			pool: func() *sql.DB { return throughProxy(t, b, proxy) },
			settled: func(n int64) {
				if n >= rows/4 {
					cut.Do(func() {
						proxy.Refuse(500 * time.Millisecond)
						proxy.ResetAll()
					})
				}
			},
			done: func() bool {
				var left int
				err := db.QueryRowContext(context.Background(), "SELECT COUNT(*) FROM "+q(tb.Name)).Scan(&left)
				return err == nil && left == 0
			},
		})
		if len(handled) != rows {
			t.Fatalf("%d distinct rows handled, want %d", len(handled), rows)
		}
		twice := 0
		for _, n := range handled {
			if n > 1 {
				twice++
			}
		}
		t.Logf("%s: 4 consumers drained %d rows through an outage in %s (%d rows handled more than once)", b.name, rows, elapsed.Round(time.Millisecond), twice)
	})
}
