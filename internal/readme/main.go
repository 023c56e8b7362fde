// Command readme is the quick start of settle's README.md, kept here so that `go vet ./...`
// and `go build ./...` compile it; readme_test.go checks that the README shows it verbatim.
// It is never run by the tests (it needs a Redis on 127.0.0.1:6379).
package main

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

type Refund struct {
	ID          uint64 `msgpack:"id"`
	AmountCents uint64 `msgpack:"amount_cents"`
}

var errBusy, errDeclined = errors.New("processor busy"), errors.New("card declined")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}) // your client, your settings

	app, err := settle.New(settle.Config{}) // logs to slog.Default()
	if err != nil {
		log.Fatal(err)
	}
	app.Mount(settle.Stream(rdb, "refunds", "refunds"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			switch err := sendRefund(ctx, r); {
			case errors.Is(err, errBusy):
				return settle.RetryAfter(30*time.Second, err) // not now: after the backoff
			case errors.Is(err, errDeclined):
				return settle.Drop(err) // asking again gets the same answer: log and drop
			default:
				return err // nil acks; any other error retries at once
			}
		}),
		settle.MaxAttempts(5),            // five deliveries, the first included...
		settle.DeadLetter("refunds.dlq"), // ...then the dead-letter stream
	)

	pub := settle.NewPublisher(rdb)
	if _, err := pub.Publish(ctx, "refunds", Refund{ID: 1, AmountCents: 1250}, nil); err != nil {
		log.Fatal(err)
	}
	if err := app.Run(ctx); err != nil { // until Ctrl-C, then a graceful drain
		log.Fatal(err)
	}
}

func sendRefund(ctx context.Context, r Refund) error { return nil } // your processor here
