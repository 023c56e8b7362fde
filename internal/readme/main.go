// Command readme holds the Go code of settle's README.md, kept here so that `go vet ./...`
// and `go build ./...` compile it; readme_test.go checks that the README shows it verbatim,
// and kit_test.go runs the README's test-kit sketch. main is never run by the tests (it
// needs a Redis on 127.0.0.1:6379).
package main

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/inbox"
)

type Refund struct {
	ID          uint64 `msgpack:"id"`
	AmountCents uint64 `msgpack:"amount_cents"`
}

var errBusy, errDeclined = errors.New("processor busy"), errors.New("card declined")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // your client, your settings

	app, err := settle.New(settle.Config{}) // logs to slog.Default()
	if err != nil {
		log.Fatal(err)
	}
	app.Mount(settle.Stream(rdb, "{refunds}", "refunds"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			switch err := sendRefund(ctx, r); {
			case errors.Is(err, errBusy):
				return settle.RetryAfter(30*time.Second, err) // not now: again in 30 s, whatever the backoff
			case errors.Is(err, errDeclined):
				return settle.Drop(err) // asking again gets the same answer: log and drop
			default:
				return err // nil acks; any other error retries after a backoff
			}
		}),
		settle.MaxAttempts(5),              // five deliveries, the first included...
		settle.DeadLetter("{refunds}.dlq"), // ...then the dead-letter stream
		settle.DelayIn(delayed.DurableZset{Key: "{refunds}.delayed", TTL: time.Hour}),
	)

	pub := settle.NewPublisher(rdb)
	if _, err := pub.Publish(ctx, "{refunds}", Refund{ID: 1, AmountCents: 1250}); err != nil {
		log.Fatal(err)
	}
	if err := app.Run(ctx); err != nil { // until Ctrl-C or SIGTERM, then a graceful drain
		log.Fatal(err)
	}
}

func sendRefund(ctx context.Context, r Refund) error { return nil } // your processor here

type Mail struct {
	To string `msgpack:"to"`
}

// inboxSketch is the README's SQL inbox sketch.
func inboxSketch(ctx context.Context, app *settle.App, handler settle.Handler) error {
	db, err := sql.Open("sqlite", "file:app.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
	if err != nil {
		return err
	}
	ib := inbox.New(db, inbox.SQLite, inbox.Table{
		Name: "mail_jobs", ID: "id", Group: "name", Attempt: "attempt",
		RetryAfter: "retry_after", LockedUntil: "locked_until", Payload: "payload",
	})
	app.Mount(ib.Queue("emails"), handler,
		settle.MaxAttempts(5), settle.DeadLetter("emails.dead")) // dead rows move to group emails.dead
	_, err = ib.Publish(ctx, "emails", Mail{To: "ada@example.com"})
	return err
}

var _ = inboxSketch

// publishSketch is the README's publishing sketch: a delayed publish to a stream, and a
// message published in the transaction of the business write it announces.
func publishSketch(ctx context.Context, app *settle.App, rdb redis.UniversalClient, handler settle.Handler, db *sql.DB, ib *inbox.Inbox, r Refund, traceID string) error {
	dz := delayed.DurableZset{Key: "{orders}.delayed", TTL: 48 * time.Hour}
	app.Mount(settle.Stream(rdb, "{orders}", "billing"), handler, settle.DelayIn(dz))
	pub := settle.NewPublisher(rdb)
	// Parked in the mount's delay set; its sweep delivers it in an hour, a first delivery.
	if _, err := pub.Publish(ctx, "{orders}", r, settle.After(time.Hour), settle.DelaySet(dz)); err != nil {
		return err
	}

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO refunds (id) VALUES (?1)`, r.ID); err != nil {
		return err
	}
	// The row exists if and when the refund does; the id is its row's.
	if _, err := ib.PublishTx(ctx, tx, "refunds", r, settle.Header("trace", traceID)); err != nil {
		return err
	}
	return tx.Commit()
}

var _ = publishSketch

// dedupeSketch is the README's Deduplication sketch.
func dedupeSketch(app *settle.App, rdb redis.UniversalClient, handler settle.Handler) {
	app.Mount(settle.Stream(rdb, "{orders}", "billing"), handler,
		settle.Dedupe(24*time.Hour, func(m *settle.Message) string { return m.Headers["order-id"] }))
}

var _ = dedupeSketch

// orderedSketch is the README's In order per key sketch.
func orderedSketch(app *settle.App, rdb redis.UniversalClient, h settle.Handler) {
	app.Mount(settle.PartitionedStream(rdb, "orders", "workers", settle.Partitions(16)), h,
		settle.Ordered(), settle.MaxAttempts(5), settle.DeadLetter("dead"))
}

var _ = orderedSketch
