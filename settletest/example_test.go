package settletest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/settletest"
)

// A handler that asks a busy provider's 30 s backoff, run on the in-memory broker and a
// paused fake clock: Advance lets the 30 s pass at once. In a test, settletest.New
// wires the same pieces (and a Redis) with bounded waits.
func Example() {
	clk := settletest.NewClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	mem := settletest.NewBroker().Topic("payments")
	events := make(chan settle.Settled, 10)
	app, _ := settle.New(settle.Config{
		OnSettled: func(_ context.Context, s settle.Settled) { events <- s },
		Test:      settle.TestConfig{Clock: clk},
	})
	app.Mount(mem, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		fmt.Printf("attempt %d at %s\n", m.Attempt, clk.Now().Format("15:04:05"))
		if m.Attempt == 1 {
			return settle.RetryAfter(30*time.Second, errors.New("provider busy"))
		}
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- app.Run(ctx) }()

	mem.Publish([]byte("charge order 7"), nil)
	fmt.Println((<-events).Action) // parked for 30 s on the fake clock
	clk.Advance(30 * time.Second)
	fmt.Println((<-events).Action)

	cancel()
	fmt.Println(<-done)
	// Output:
	// attempt 1 at 12:00:00
	// park
	// attempt 2 at 12:00:30
	// ack
	// <nil>
}
