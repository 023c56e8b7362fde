package sqltest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// bulkInsert inserts n rows of group with payloads "0" … "n-1", in chunks.
func bulkInsert(t testing.TB, b backend, db *sql.DB, tb inbox.Table, group string, n int) {
	t.Helper()
	q := quoteFor(b.d)
	for start := 0; start < n; start += 500 {
		end := min(n, start+500)
		var vals []string
		var args []any
		for i := start; i < end; i++ {
			vals = append(vals, fmt.Sprintf("(%s, %s)", placeholder(b.d, len(args)+1), placeholder(b.d, len(args)+2)))
			args = append(args, group, []byte(fmt.Sprint(i)))
		}
		insert := fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES %s", q(tb.Name), q(tb.Group), q(tb.Payload), strings.Join(vals, ", "))
		if _, err := db.ExecContext(context.Background(), insert, args...); err != nil {
			t.Fatalf("bulk insert: %v", err)
		}
	}
}

// openSeparate opens a pool of its own on b's database (a separate consumer).
func openSeparate(t testing.TB, b backend, shared *sql.DB) *sql.DB {
	t.Helper()
	if b.d == inbox.SQLite {
		return shared // one file: separate pools would only fight over its one writer lock
	}
	db := ownPool(t, b)
	db.SetMaxOpenConns(12)
	return db
}

// ownPool opens a pool of its own on b's server (Postgres or MySQL) with database/sql's
// default settings, as a user's sql.Open would; it is closed after the test.
func ownPool(t testing.TB, b backend) *sql.DB {
	t.Helper()
	driver, dsn := "pgx", os.Getenv("SETTLE_POSTGRES_URL")
	if b.d == inbox.MySQL {
		driver, dsn = "mysql", mysqlDSN(os.Getenv("SETTLE_MYSQL_DSN"))
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// drain runs consumers separate Apps on the table until rows rows are settled, and
// returns how many times each payload was handled and the elapsed time.
func drain(t testing.TB, b backend, db *sql.DB, tb inbox.Table, consumers, rows int) (map[string]int, time.Duration) {
	t.Helper()
	return drainWith(t, b, tb, drainSpec{consumers: consumers, rows: rows, timeout: 2 * time.Minute, pool: func() *sql.DB { return openSeparate(t, b, db) }})
}

// drainSpec is how drainWith drains: consumers Apps, each on a pool of its own, until
// rows rows are settled (or, when set, until done says so, asked every few
// milliseconds), waiting at most timeout; settled, when set, is told each applied
// settlement's running count; failures says settlements may fail (else each is an
// error), and failed, when set, is told each that did.
type drainSpec struct {
	consumers, rows int
	done            func() bool
	failed          func(s settle.Settled)
	failures        bool
	pool            func() *sql.DB
	settled         func(n int64)
	timeout         time.Duration
}

// drainWith drains the table as spec says and returns how many times each payload was
// handled and the elapsed time.
func drainWith(t testing.TB, b backend, tb inbox.Table, spec drainSpec) (map[string]int, time.Duration) {
	t.Helper()
	consumers, rows := spec.consumers, spec.rows
	var mu sync.Mutex
	handled := map[string]int{}
	var settled, failed atomic.Int64
	done := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < consumers; i++ {
		app, err := settle.New(settle.Config{Logger: quietLogger(t), OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Err != nil {
				failed.Add(1)
				if spec.failed != nil {
					spec.failed(s)
				}
				if !spec.failures {
					t.Errorf("settlement failed: %+v", s)
				}
				return
			}
			n := settled.Add(1)
			if spec.settled != nil {
				spec.settled(n)
			}
			if n == int64(rows) {
				once.Do(func() { close(done) })
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		ib := inbox.New(spec.pool(), b.d, tb)
		app.Mount(ib.Queue("load", inbox.Poll(20*time.Millisecond)), settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			mu.Lock()
			handled[string(m.Payload)]++
			mu.Unlock()
			return nil
		}), settle.Concurrency(16))
		wg.Go(func() {
			if err := app.Run(ctx); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	if spec.done != nil {
		wg.Go(func() {
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for !spec.done() {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
			}
			once.Do(func() { close(done) })
		})
	}
	select {
	case <-done:
	case <-time.After(spec.timeout):
		t.Errorf("timed out after %s: %d of %d rows settled (%d settlements failed)", spec.timeout, settled.Load(), rows, failed.Load())
	}
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	return handled, elapsed
}

func TestFourConsumersSettleEveryRowExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		rows := 5000
		if b.d == inbox.SQLite && testing.Short() {
			rows = 1000
		}
		db := b.open(t)
		tb := createTable(t, b, db, cols{})
		bulkInsert(t, b, db, tb, "load", rows)
		handled, elapsed := drain(t, b, db, tb, 4, rows)
		if len(handled) != rows {
			t.Fatalf("got %d distinct rows handled, want %d", len(handled), rows)
		}
		for p, n := range handled {
			if n != 1 {
				t.Fatalf("row %s handled %d times, want once", p, n)
			}
		}
		if left := readRows(t, b, db, tb); len(left) != 0 {
			t.Fatalf("got %d rows left, want none", len(left))
		}
		t.Logf("%s: 4 consumers drained %d rows in %s (%.0f rows/s)", b.name, rows, elapsed, float64(rows)/elapsed.Seconds())
	})
}

// BenchmarkDrainFourConsumers reports rows/s drained by four consumers (separate Apps)
// from a table of 5,000 rows, per backend:
//
//	go test -run '^$' -bench DrainFourConsumers -benchtime 1x ./internal/sqltest/
func BenchmarkDrainFourConsumers(b *testing.B) {
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			db := be.open(b)
			for b.Loop() {
				b.StopTimer()
				tb := createTable(b, be, db, cols{})
				bulkInsert(b, be, db, tb, "load", 5000)
				b.StartTimer()
				_, elapsed := drain(b, be, db, tb, 4, 5000)
				b.ReportMetric(5000/elapsed.Seconds(), "rows/s")
			}
		})
	}
}
