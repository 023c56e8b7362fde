package settle

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// An ack takes a shorter path when debug logging is off; the settlement it reports must
// be the one the full path reports.
func TestAckReportsTheSameSettlementWithDebugOnAndOff(t *testing.T) {
	t.Parallel()
	settledAt := func(level slog.Level) []Settled {
		var mu sync.Mutex
		var got []Settled
		a, err := New(Config{
			Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: level})),
			OnSettled: func(_ context.Context, s Settled) {
				mu.Lock()
				got = append(got, s)
				mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		m := &mount{cfg: defaultMountConfig(), handler: HandlerFunc(func(context.Context, *Message) error { return nil }), src: benchSource{}}
		m.cfg.delay = delayed.InProcess{}
		m.prepare(a)
		acks := newAcker(context.Background(), m, a)
		d := &source.Delivery{Attempt: 2, Headers: map[string]string{}, HasPayload: true, ID: "7-0", Key: "orders", Payload: []byte("p")}
		a.handle(context.Background(), m, d, acks, nil)
		acks.close()
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	fast, full := settledAt(slog.LevelError), settledAt(slog.LevelDebug)
	if len(fast) != 1 || len(full) != 1 {
		t.Fatalf("settlements: %d without debug, %d with; want one each", len(fast), len(full))
	}
	if fast[0] != full[0] {
		t.Fatalf("without debug %+v, with debug %+v; want the same", fast[0], full[0])
	}
	if want := (Settled{Action: ActionAck, Attempt: 2, ID: "7-0", Key: "orders", Mount: "stream bench", Outcome: OutcomeAck}); fast[0] != want {
		t.Fatalf("ack reported %+v, want %+v", fast[0], want)
	}
}

// A settlement write's context carries the run context's values, no cancellation, and
// a deadline settleTimeout away, give or take the second its context is shared for.
func TestWriteContextsBoundEachWriteBySettleTimeoutWithoutCancellation(t *testing.T) {
	t.Parallel()
	type key struct{}
	run, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "run"))
	w := &writeContexts{base: context.WithoutCancel(run)}
	for range 3 {
		before := time.Now()
		ctx := w.get()
		after := time.Now()
		deadline, ok := ctx.Deadline()
		if !ok || deadline.Before(before.Add(settleTimeout-time.Second)) || deadline.After(after.Add(settleTimeout)) {
			t.Fatalf("deadline %v (set: %v), want within a second before %v", deadline, ok, after.Add(settleTimeout))
		}
		if ctx.Value(key{}) != "run" {
			t.Fatal("the run context's values are lost")
		}
	}
	cancel()
	if err := w.get().Err(); err != nil {
		t.Fatalf("a write's context ended with the run's: %v", err)
	}
}
