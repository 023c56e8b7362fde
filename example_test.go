package settle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// Refund is the message the examples publish and handle.
type Refund struct {
	Cents int    `msgpack:"cents" json:"cents"`
	ID    string `msgpack:"id" json:"id"`
}

// Publish a refund, handle it with a typed handler and stop once it is settled.
func Example() {
	mr, err := miniredis.Run() // an embedded Redis; pass your own client in production
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pub := settle.NewPublisher(rdb)
	if _, err := pub.Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: 250}); err != nil {
		panic(err)
	}

	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			fmt.Println("settled:", s.Action)
			if s.Final() {
				cancel() // one message, one final settlement: stop
			}
		},
	})
	if err != nil {
		panic(err)
	}
	app.Mount(
		settle.Stream(rdb, "{refunds}:in", "refunders"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			fmt.Printf("refund %s: %d cents, attempt %d\n", r.ID, r.Cents, m.Attempt)
			return nil // ack
		}),
		settle.MaxAttempts(5),
		settle.DeadLetter("{refunds}:dlq"),
	)
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Println("stopped")
	// Output:
	// refund r-1: 250 cents, attempt 1
	// settled: ack
	// stopped
}

// A handler asks for another delivery after a delay: the original entry stays pending
// until the delayed copy is written, so a crash in between loses nothing.
func ExampleRetryAfter() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := settle.NewPublisher(rdb).Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: 250}); err != nil {
		panic(err)
	}
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Final() {
				cancel()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	errBusy := errors.New("processor busy")
	app.Mount(settle.Stream(rdb, "{refunds}:in", "refunders"), settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
		if m.Attempt == 1 {
			fmt.Printf("attempt %d: %v, retry in 50ms\n", m.Attempt, errBusy)
			return settle.RetryAfter(50*time.Millisecond, errBusy)
		}
		fmt.Printf("attempt %d: refunded %s (retry count header %s)\n", m.Attempt, r.ID, m.Headers[settle.HeaderRetryCount])
		return nil
	}))
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// attempt 1: processor busy, retry in 50ms
	// attempt 2: refunded r-1 (retry count header 1)
}

// Drop completes a delivery that can never succeed. It is logged, and it never goes
// to the dead letter, even with one declared.
func ExampleDrop() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := settle.NewPublisher(rdb).Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: -5}); err != nil {
		panic(err)
	}
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			fmt.Printf("settled: %s (%v)\n", s.Action, s.HandlerErr)
			if s.Final() {
				cancel()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	app.Mount(settle.Stream(rdb, "{refunds}:in", "refunders"), settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
		if r.Cents <= 0 {
			return fmt.Errorf("refund %s: %w", r.ID, settle.Drop(errors.New("amount must be positive")))
		}
		return nil
	}), settle.MaxAttempts(3), settle.DeadLetter("{refunds}:dlq"))
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
	dead, err := rdb.XLen(context.Background(), "{refunds}:dlq").Result()
	if err != nil {
		panic(err)
	}
	fmt.Println("dead letters:", dead)
	// Output:
	// settled: drop (refund r-1: settle: drop: amount must be positive)
	// dead letters: 0
}

// At the attempts cap a failing message goes to the dead-letter stream, as it arrived,
// with its retry count set to the cap and headers saying where and why.
func ExampleDeadLetter() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pub := settle.NewPublisher(rdb)
	if _, err := pub.Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: 250}, settle.Headers(map[string]string{"tenant": "acme"})); err != nil {
		panic(err)
	}
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			if s.Action != settle.ActionCopy { // each park's copy, written when due, is not shown
				fmt.Printf("attempt %d: %s\n", s.Attempt, s.Action)
			}
			if s.Final() {
				cancel()
			}
		},
	})
	if err != nil {
		panic(err)
	}
	app.Mount(
		settle.Stream(rdb, "{refunds}:in", "refunders"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			// A plain error: retried after the backoff (parked in the process), and kept
			// for the dead letter.
			return errors.New("card declined")
		}),
		settle.MaxAttempts(3),
		settle.DeadLetter("{refunds}:dlq"),
		settle.Concurrency(1), // one at a time, so the output has one order
	)
	if err := app.Run(ctx); err != nil {
		panic(err)
	}

	// The dead-letter stream is an ordinary stream: read it back.
	dead, err := rdb.XRange(context.Background(), "{refunds}:dlq", "-", "+").Result()
	if err != nil {
		panic(err)
	}
	for _, d := range dead {
		fmt.Println("retry count:", d.Values[settle.HeaderRetryCount])
		fmt.Println("source:", d.Values[settle.HeaderDeadSource])
		fmt.Println("last error:", d.Values[settle.HeaderDeadError])
		fmt.Println("tenant:", d.Values["tenant"])
	}
	// Output:
	// attempt 1: park
	// attempt 2: park
	// attempt 3: dead_letter
	// retry count: 3
	// source: {refunds}:in
	// last error: card declined
	// tenant: acme
}

// Cancelling Run's context shuts down gracefully: reading stops, the handler in flight
// finishes (within Config.DrainTimeout) and is settled, then Run returns nil. In a
// service, the context comes from signal.NotifyContext(ctx, os.Interrupt).
func ExampleApp_Run() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	if _, err := settle.NewPublisher(rdb).Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: 250}); err != nil {
		panic(err)
	}
	app, err := settle.New(settle.Config{
		DrainTimeout: 30 * time.Second,
		Logger:       slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			fmt.Println("settled:", s.Action)
		},
	})
	if err != nil {
		panic(err)
	}
	started, finish := make(chan struct{}), make(chan struct{})
	app.Mount(
		// Block bounds how long a shutdown waits for a read in progress.
		settle.Stream(rdb, "{refunds}:in", "refunders", settle.Block(100*time.Millisecond)),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			fmt.Println("refunding", r.ID)
			close(started)
			<-finish // slow work; ctx is not cancelled before the drain timeout
			fmt.Println("refunded", r.ID)
			return nil
		}),
	)

	done := make(chan error)
	go func() { done <- app.Run(ctx) }()
	<-started
	fmt.Println("shutdown requested")
	cancel()
	close(finish)
	fmt.Println("Run returned:", <-done)

	pending, err := rdb.XPending(context.Background(), "{refunds}:in", "refunders").Result()
	if err != nil {
		panic(err)
	}
	fmt.Println("pending:", pending.Count)
	// Output:
	// refunding r-1
	// shutdown requested
	// refunded r-1
	// settled: ack
	// Run returned: <nil>
	// pending: 0
}

// Typed decodes each payload with the mount's codec (msgpack unless WithCodec says
// otherwise). A payload that does not decode never reaches the function: it fails with
// a *DecodeError and spends an attempt, like any failure.
func ExampleTyped() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pub := settle.NewPublisher(rdb, settle.WithCodec(settle.JSON))
	if _, err := pub.Publish(ctx, "{refunds}:in", Refund{ID: "r-1", Cents: 250}); err != nil {
		panic(err)
	}
	if _, err := pub.PublishBytes(ctx, "{refunds}:in", []byte("not json")); err != nil {
		panic(err)
	}

	finals := 0
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			var de *settle.DecodeError
			fmt.Printf("settled: %s (decode error: %t)\n", s.Action, errors.As(s.HandlerErr, &de))
			if s.Final() {
				if finals++; finals == 2 {
					cancel()
				}
			}
		},
	})
	if err != nil {
		panic(err)
	}
	app.Mount(
		settle.Stream(rdb, "{refunds}:in", "refunders"),
		settle.Typed(func(ctx context.Context, m *settle.Message, r Refund) error {
			fmt.Printf("refund %s: %d cents\n", r.ID, r.Cents)
			return nil
		}),
		settle.WithCodec(settle.JSON),
		settle.Concurrency(1), // one at a time, so the output has one order
		settle.MaxAttempts(1), // no retry: at the cap with no dead letter, rejected
	)
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
	// Output:
	// refund r-1: 250 cents
	// settled: ack (decode error: false)
	// settled: reject (decode error: true)
}

// TypedBatch hands a handler several deliveries at once, for one bulk write; each
// message still settles on its own: PerMessage gives each its own error.
func ExampleTypedBatch() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pub := settle.NewPublisher(rdb)
	for i, cents := range []int{250, -1, 700} {
		if _, err := pub.Publish(ctx, "{refunds}:in", Refund{ID: fmt.Sprintf("r-%d", i+1), Cents: cents}); err != nil {
			panic(err)
		}
	}

	var mu sync.Mutex
	actions := map[settle.Action]int{}
	finals := 0
	app, err := settle.New(settle.Config{
		Logger: slog.New(slog.DiscardHandler),
		OnSettled: func(_ context.Context, s settle.Settled) {
			mu.Lock()
			defer mu.Unlock()
			actions[s.Action]++
			if s.Final() {
				if finals++; finals == 3 {
					cancel()
				}
			}
		},
	})
	if err != nil {
		panic(err)
	}
	app.Mount(
		settle.Stream(rdb, "{refunds}:in", "refunders"),
		settle.TypedBatch(3, time.Second, func(ctx context.Context, ms []*settle.Message, rs []Refund) error {
			fmt.Printf("a batch of %d refunds\n", len(rs))
			errs := make([]error, len(rs)) // one INSERT … VALUES (…), (…), (…) here
			for i, r := range rs {
				if r.Cents < 0 {
					errs[i] = settle.Drop(fmt.Errorf("refund %s: negative amount", r.ID))
				}
			}
			return settle.PerMessage(errs)
		}),
		settle.Concurrency(3), // a batch gathers deliveries running at once
	)
	if err := app.Run(ctx); err != nil {
		panic(err)
	}
	fmt.Printf("acked %d, dropped %d\n", actions[settle.ActionAck], actions[settle.ActionDrop])
	// Output:
	// a batch of 3 refunds
	// acked 2, dropped 1
}
