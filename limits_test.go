package settle_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/keys"
	"github.com/settlekit/settle/internal/logtest"
	"github.com/settlekit/settle/internal/script"
	"github.com/settlekit/settle/settletest"
)

// A delivery that waited for its flow limit says so on its settlement line: what it
// waited for and how long, on the App's clock.
func TestDeliveryThatWaitedForItsLimitSaysWhyOnItsSettlementLine(t *testing.T) {
	t.Parallel()
	sink := logtest.New()
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: sink.Logger()}))
	in := h.Redis.Key("limits.in")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.RateLimitBy(func(m *settle.Message) string { return m.Headers["acct"] }, 1, time.Second))
	h.Start()
	h.Publish(in, "x", settle.Headers(map[string]string{"acct": "a-7"}))
	h.Publish(in, "y", settle.Headers(map[string]string{"acct": "a-7"}))
	h.WaitSettled(1)
	h.Idle()                                // the second was read and waits for its start
	h.Advance(time.Second + time.Second/50) // a start per 1.02 s: 2 % under the rate, for a late start's slack
	h.WaitSettled(2)
	h.Stop()

	lines := settlementLines(sink)
	if len(lines) != 2 {
		t.Fatalf("settlement lines %v, want 2", lines)
	}
	if _, ok := lines[0]["waited_for"]; ok {
		t.Fatalf("the first line %v says it waited; it started at once", lines[0])
	}
	if got := lines[1]["waited_for"]; got != `rate limit rateby key "a-7"` {
		t.Fatalf("the second line's waited_for is %q, want the rate limit and its key", got)
	}
	if got := lines[1]["waited"]; got != "1.02s" {
		t.Fatalf("the second line's waited is %q, want 1.02s", got)
	}
}

// A slot held by a process that crashed (it took the slot and never renewed or freed
// it) comes free once its lease, SlotLease, ends: a delivery of its key waits until
// then, and no longer.
func TestSlotOfACrashedProcessComesFreeWithinTheLease(t *testing.T) {
	t.Parallel()
	h := settletest.New(t)
	in := h.Redis.Key("limits.crash")
	crashed := script.Limit{Key: keys.Limit(in, "g", "slots:slots", "a-7"), Slots: 1, Lease: settle.SlotLease}
	if res, err := script.LimitTake(context.Background(), h.Redis.Client, []script.Limit{crashed}, "crashed-process", 0, h.Clock.Now().UnixMilli()); err != nil || res.Wait != 0 {
		t.Fatalf("the crashed process's take: %+v, %v", res, err)
	}
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.ConcurrencyBy(func(m *settle.Message) string { return m.Headers["acct"] }, 1))
	h.Start()
	h.Publish(in, "x", settle.Headers(map[string]string{"acct": "a-7"}))
	h.Advance(settle.SlotLease - time.Second)
	h.Idle()
	if n := len(h.Events()); n != 0 {
		t.Fatalf("%d settlements while the crashed process's lease runs, want 0", n)
	}
	h.Advance(time.Second)
	evs := h.WaitSettled(1)
	h.Stop()
	if evs[0].Attempt != 1 {
		t.Fatalf("the delivery that waited settled at attempt %d, want 1", evs[0].Attempt)
	}
}

// A key function that panics does not crash the worker: the message is limited under the
// empty key, handled, and the panic logged.
func TestLimitKeyFunctionThatPanicsIsLoggedAndTheMessageStillHandled(t *testing.T) {
	t.Parallel()
	sink := logtest.New()
	h := settletest.New(t, settletest.WithConfig(settle.Config{Logger: sink.Logger()}))
	in := h.Redis.Key("limits.panic")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.ConcurrencyBy(func(*settle.Message) string { panic("no account") }, 1))
	h.Start()
	h.Publish(in, "x")
	evs := h.WaitSettled(1)
	h.Stop()
	if evs[0].Action != settle.ActionAck {
		t.Fatalf("settled %s, want an ack", evs[0].Action)
	}
	if n := sink.Count(slog.LevelWarn, "a flow limit's key function panicked"); n != 1 {
		t.Fatalf("%d warnings of the panic, want 1", n)
	}
}

// The Delivery hook is told how long a delivery waited for its flow limits and the
// kind of limit it waited for, never the key value (a metric's label must not be one).
func TestDeliveryHookIsToldTheWaitAndItsKindWithoutTheKeyValue(t *testing.T) {
	t.Parallel()
	starts := make(chan settle.DeliveryStart, 4)
	hooks := settle.Hooks{Delivery: func(ctx context.Context, d settle.DeliveryStart) context.Context {
		starts <- d
		return ctx
	}}
	h := settletest.New(t, settletest.WithConfig(settle.Config{Hooks: hooks}))
	in := h.Redis.Key("limits.hook")
	h.Mount(settle.Stream(h.Redis.Client, in, "g"), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }),
		settle.RateLimitBy(func(m *settle.Message) string { return m.Headers["acct"] }, 1, time.Second))
	h.Start()
	h.Publish(in, "x", settle.Headers(map[string]string{"acct": "a-7"}))
	h.Publish(in, "y", settle.Headers(map[string]string{"acct": "a-7"}))
	h.WaitSettled(1)
	h.Idle()
	h.Advance(time.Second + time.Second/50) // starts are spaced (per + per/50)/n apart
	h.WaitSettled(2)
	h.Stop()

	first, second := <-starts, <-starts
	if first.Waited != 0 || first.WaitedFor != "" {
		t.Fatalf("the first start says it waited %s for %q; it started at once", first.Waited, first.WaitedFor)
	}
	if second.WaitedFor != "rate" || second.Waited != time.Second+time.Second/50 {
		t.Fatalf("the second start waited %s for %q, want 1.02s for \"rate\" (the kind, not the key value)", second.Waited, second.WaitedFor)
	}
}
