package sqltest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/inbox"
)

// benchRows is how many rows each benchmark of one consumer settles.
const benchRows = 10_000

// BenchmarkOneConsumer reports rows/s for one App reading a table of 10,000 rows at
// Concurrency(100) on a pool opened as a user would (sql.Open, database/sql's default
// pool settings): Drain acks every row; DrainBehindParked does so with 50,000 rows of
// lower ids parked an hour ahead (a backlog of delayed retries); RetryOnce retries every
// row once (settle.Retry: put back, due again at once) and acks it on its second
// delivery.
//
//	cd internal/sqltest && SETTLE_POSTGRES_URL=… go test -run '^$' -bench OneConsumer -benchtime 1x -count 3 .
func BenchmarkOneConsumer(b *testing.B) {
	for _, be := range backends() {
		for _, sc := range []struct {
			name    string
			parked  int // rows parked for an hour ahead of the rows to settle (lower ids)
			handler func(ctx context.Context, m *settle.Message) error
		}{
			{"Drain", 0, func(context.Context, *settle.Message) error { return nil }},
			{"DrainBehindParked", 50_000, func(context.Context, *settle.Message) error { return nil }},
			{"RetryOnce", 0, func(_ context.Context, m *settle.Message) error {
				if m.Attempt == 1 {
					return settle.Retry(errors.New("once"))
				}
				return nil
			}},
		} {
			b.Run(be.name+"/"+sc.name, func(b *testing.B) {
				db := be.open(b)
				for b.Loop() {
					b.StopTimer()
					tb := createTable(b, be, db, cols{})
					if sc.parked > 0 {
						bulkInsert(b, be, db, tb, "load", sc.parked)
						parkAll(b, be, db, tb)
					}
					bulkInsert(b, be, db, tb, "load", benchRows)
					b.StartTimer()
					elapsed := settleAll(b, be, db, tb, sc.handler)
					b.ReportMetric(benchRows/elapsed.Seconds(), "rows/s")
				}
			})
		}
	}
}

// parkAll parks every row of tb an hour ahead.
func parkAll(b *testing.B, be backend, db *sql.DB, tb inbox.Table) {
	b.Helper()
	q := quoteFor(be.d)
	later := map[inbox.Dialect]string{
		inbox.SQLite:   "strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now', '+1 hour')",
		inbox.Postgres: "now() + interval '1 hour'",
		inbox.MySQL:    "NOW(6) + INTERVAL 1 HOUR",
	}[be.d]
	if _, err := db.ExecContext(context.Background(), fmt.Sprintf("UPDATE %s SET %s = %s", q(tb.Name), q(tb.RetryAfter), later)); err != nil {
		b.Fatalf("park: %v", err)
	}
}

// settleAll runs one App at Concurrency(100) on a pool of its own with database/sql's
// defaults until every row of tb is acked, and returns the time it took.
func settleAll(b *testing.B, be backend, shared *sql.DB, tb inbox.Table, h func(context.Context, *settle.Message) error) time.Duration {
	b.Helper()
	db := shared
	if be.d != inbox.SQLite {
		db = ownPool(b, be)
	}
	var acked, failed atomic.Int64
	done := make(chan struct{})
	app, err := settle.New(settle.Config{Logger: quietLogger(b), OnSettled: func(_ context.Context, s settle.Settled) {
		if s.Err != nil {
			failed.Add(1)
			return
		}
		if s.Action == settle.ActionAck && acked.Add(1) == benchRows {
			close(done)
		}
	}})
	if err != nil {
		b.Fatal(err)
	}
	app.Mount(inbox.New(db, be.d, tb).Queue("load"), settle.HandlerFunc(h), settle.Concurrency(100))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	start := time.Now()
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Errorf("timed out: %d of %d rows acked", acked.Load(), benchRows)
	}
	elapsed := time.Since(start)
	cancel()
	if err := <-errc; err != nil {
		b.Errorf("Run: %v", err)
	}
	if n := failed.Load(); n > 0 {
		b.Logf("%d settlements failed (their rows came back once their lease passed)", n)
	}
	return elapsed
}

// BenchmarkPublish reports rows/s inserted by Publish from 1 and from 16 goroutines
// (on PostgreSQL each also announces its group to the listening processes):
//
//	cd internal/sqltest && SETTLE_POSTGRES_URL=… go test -run '^$' -bench Publish -benchtime 4000x .
func BenchmarkPublish(b *testing.B) {
	for _, be := range backends() {
		for _, publishers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/Publishers%d", be.name, publishers), func(b *testing.B) {
				db := be.open(b)
				ib := inbox.New(db, be.d, createTable(b, be, db, cols{}))
				var next atomic.Int64
				start := time.Now()
				var wg sync.WaitGroup
				for range publishers {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if _, err := ib.PublishBytes(context.Background(), "jobs", []byte("payload")); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
			})
		}
	}
}

// BenchmarkPublishMany reports rows/s inserted by PublishMany from one goroutine, in
// batches of 100 rows (one INSERT each), beside BenchmarkPublish's one row a call:
//
//	cd internal/sqltest && SETTLE_POSTGRES_URL=… go test -run '^$' -bench PublishMany -benchtime 20000x .
func BenchmarkPublishMany(b *testing.B) {
	const batch = 100
	for _, be := range backends() {
		b.Run(be.name, func(b *testing.B) {
			db := be.open(b)
			ib := inbox.New(db, be.d, createTable(b, be, db, cols{}))
			vs := make([]any, batch)
			for i := range vs {
				vs[i] = []byte("payload")
			}
			start := time.Now()
			for done := 0; done < b.N; done += batch {
				if _, err := ib.PublishMany(context.Background(), "jobs", vs[:min(batch, b.N-done)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
		})
	}
}
