package settle

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

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
