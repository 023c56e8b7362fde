package settle

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/source"
)

// handleAllocs is the allocations of one delivery's path through the engine (handler,
// decision, settlement written to nopTransport) on a mount of cfg.
func handleAllocs(t *testing.T, cfg Config, h Handler) float64 {
	t.Helper()
	return handleAllocsOn(t, cfg, h, benchSource{}, 1000)
}

// handleAllocsOn is handleAllocs on the transport of src, under a cap of maxAttempts
// (0: none).
func handleAllocsOn(t *testing.T, cfg Config, h Handler, src Source, maxAttempts int) float64 {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &mount{cfg: defaultMountConfig(), handler: h, src: src}
	m.cfg.delay = delayed.InProcess{}
	m.cfg.maxAttempts = maxAttempts
	m.prepare(a.eng)
	m.writes.base = context.Background()
	acks := newAcker(context.Background(), m)
	defer acks.close()
	d := &source.Delivery{Attempt: 1, Headers: map[string]string{"tenant": "acme"}, HasPayload: true, ID: "1-0", Key: "bench", Payload: []byte("p")}
	ctx := context.Background()
	return testing.AllocsPerRun(200, func() { m.handle(ctx, d, acks, nil, nil) })
}

// Hooks left unset cost an ack nothing: its one allocation is the Message, as before
// hooks existed, and hooks that add nothing add no allocation either.
func TestUnsetHooksAddNoAllocationToAnAck(t *testing.T) {
	ack := HandlerFunc(func(context.Context, *Message) error { return nil })
	if n := handleAllocs(t, Config{}, ack); n > 1 {
		t.Fatalf("an ack without hooks allocates %.0f times, want at most 1 (the Message)", n)
	}
	nop := Config{Hooks: Hooks{
		Delivery: func(ctx context.Context, _ DeliveryStart) context.Context { return ctx },
		Settled:  func(context.Context, Settled) {},
	}}
	if n, base := handleAllocs(t, nop, ack), handleAllocs(t, Config{}, ack); n != base {
		t.Fatalf("an ack with hooks that do nothing allocates %.0f times, without hooks %.0f: want the same", n, base)
	}
}

// A retry copy without a Move hook allocates no more than its copy needs: the origin
// header fits the headers map made for the copy.
func TestUnsetMoveHookAddsNoAllocationToARetryCopy(t *testing.T) {
	retry := HandlerFunc(func(context.Context, *Message) error { return Retry(nil) })
	base := handleAllocs(t, Config{}, retry)
	nop := Config{Hooks: Hooks{Move: func(context.Context, Settled, map[string]string) {}}}
	if n := handleAllocs(t, nop, retry); n != base {
		t.Fatalf("a retry copy with a Move hook that adds nothing allocates %.0f times, without %.0f: want the same", n, base)
	}
	if base > 8 {
		t.Fatalf("a retry copy allocates %.0f times; want at most 8, as before hooks and the origin header existed", base)
	}
}
