package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/cbor"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/settletest"
)

// TestReadmeTestKitSketchPassesA30sBackoffAtOnce runs the README's test-kit sketch: a 30 s
// durable backoff has not come back after 29 s (Idle proves it) and passes at once with
// Advance, on miniredis (or SETTLE_REDIS_URL's server).
func TestReadmeTestKitSketchPassesA30sBackoffAtOnce(t *testing.T) {
	t.Parallel()
	h := settletest.New(t) // miniredis (or SETTLE_REDIS_URL's server) on a paused fake clock
	in := h.Redis.Key("refunds")
	h.Mount(settle.Stream(h.Redis.Client, in, "refunds"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			if m.Attempt == 1 {
				return settle.RetryAfter(30*time.Second, errBusy)
			}
			return nil
		}),
		settle.DelayIn(delayed.DurableZset{Key: h.Redis.Key("delayed"), TTL: time.Hour}),
	)
	h.Start()
	h.Publish(in, Refund{ID: 1, AmountCents: 1250})
	h.WaitAction(settle.ActionPark, 1) // the copy waits in the delay set...
	h.Advance(29 * time.Second)
	h.Idle() // nothing runs, nothing is due, every read found nothing:
	if n := len(h.Events()); n != 1 {
		t.Fatalf("%d settlements after 29 s, want only the park", n)
	}
	h.Advance(time.Second) // ...and the 30 s pass at once
	h.WaitAction(settle.ActionAck, 1)

	// The sketch's claims, checked: the retry was delivered as attempt 2, after the park.
	events := h.Events()
	last := events[len(events)-1]
	if last.Action != settle.ActionAck || last.Attempt != 2 {
		t.Fatalf("last settlement: got %s at attempt %d, want ack at attempt 2 (events %+v)", last.Action, last.Attempt, events)
	}
}

// PaymentRequest, Paid and Gateway are what the README's reply sketch names.
type (
	PaymentRequest struct{ Order int64 }
	Paid           struct{ Order int64 }
	Gateway        interface {
		Charge(ctx context.Context, r PaymentRequest) error
	}
)

func mountPayments(app *settle.App, rdb redis.UniversalClient, gateway Gateway) {
	app.Mount(settle.Stream(rdb, "{shop}:payments.requested", "payments"),
		settle.Reply(func(ctx context.Context, m *settle.Message, r PaymentRequest) (Paid, error) {
			return Paid{Order: r.Order}, gateway.Charge(ctx, r)
		}),
		settle.ReplyTo("{shop}:payments.paid"), settle.WithCodec(cbor.Codec))
}

// TestReadmeReplySketchIsAcceptedAtStartup compiles the README's reply sketch and checks
// that the App accepts its mount (the reply stream shares the source's hash tag).
func TestReadmeReplySketchIsAcceptedAtStartup(t *testing.T) {
	t.Parallel()
	acceptedAtStartup(t, func(app *settle.App, rdb redis.UniversalClient) { mountPayments(app, rdb, nil) })
}

// acceptedAtStartup mounts a sketch's mount on an App and fails t unless Validate
// accepts it.
func acceptedAtStartup(t *testing.T, mount func(app *settle.App, rdb redis.UniversalClient)) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: Validate only
	defer rdb.Close()
	app, err := settle.New(settle.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mount(app, rdb)
	if err := app.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want the sketch's mount accepted", err)
	}
}

// LedgerEntry and Ledger are what the README's batch sketch names.
type (
	LedgerEntry struct {
		Account string
		Cents   int64
	}
	Ledger interface {
		// InsertAll writes every entry in one statement and returns each one's error.
		InsertAll(ctx context.Context, es []LedgerEntry) []error
	}
)

func mountLedger(app *settle.App, rdb redis.UniversalClient, ledger Ledger) {
	app.Mount(settle.Stream(rdb, "{ledger}:entries", "writers"),
		settle.TypedBatch(100, 50*time.Millisecond, func(ctx context.Context, ms []*settle.Message, es []LedgerEntry) error {
			return settle.PerMessage(ledger.InsertAll(ctx, es)) // one error per entry: each settles on its own
		}),
		settle.Concurrency(100)) // a batch gathers deliveries running at once
}

// TestReadmeBatchSketchIsAcceptedAtStartup compiles the README's batch sketch and checks
// that the App accepts its mount (its Concurrency holds a full batch).
func TestReadmeBatchSketchIsAcceptedAtStartup(t *testing.T) {
	t.Parallel()
	acceptedAtStartup(t, func(app *settle.App, rdb redis.UniversalClient) { mountLedger(app, rdb, nil) })
}
