package settle_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
)

// TestClaimingStreamCrashAtTheCap: a claiming stream counts deliveries to consumers
// that crashed, so a message whose cap-th delivery crashed its consumer is dead-lettered
// at the cap when it comes back, without running the handler a cap+1-th time (a message
// that kills every consumer would otherwise come back forever). Found by the kill -9
// soak (internal/soak): a dead letter carried attempt 6 under a cap of 5.
func TestClaimingStreamCrashAtTheCap(t *testing.T) {
	t.Parallel()

	t.Run("DeadLettersWithoutRunningTheHandlerAgain", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		id := w.publish(t, "kills its consumer", nil)
		// Delivery 1 to a worker that died, delivery 2 (the cap) to another that died.
		w.crash(t, "dead-1", 1)
		if err := w.r.Client.XClaim(w.ctx, &redis.XClaimArgs{Stream: w.in, Group: w.group, Consumer: "dead-2", Messages: []string{id}}).Err(); err != nil {
			t.Fatalf("xclaim: %v", err)
		}
		if _, count, ok := w.pendingEntry(t, id); !ok || count != 2 {
			t.Fatalf("entry pending %v with count %d, want 2 deliveries before the App starts", ok, count)
		}
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter(w.dlq))
		w.run(t, app)

		w.advance(w.idle)
		dead := w.waitEvents(t, "the dead letter", 1, func(e settle.Settled) bool { return e.Action == settle.ActionDeadLetter })
		if dead[0].ID != id || dead[0].Attempt != 2 || dead[0].Err != nil {
			t.Fatalf("dead letter = %+v, want entry %s dead-lettered at attempt 2 (the cap)", dead[0], id)
		}
		if got := a.all(); len(got) != 0 {
			t.Fatalf("handler saw %+v, want no run: both attempts were spent by crashed deliveries", got)
		}
		msgs, err := w.r.Client.XRange(w.ctx, w.dlq, "-", "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead letters = %v (%v), want 1", msgs, err)
		}
		if rc := msgs[0].Values[settle.HeaderRetryCount]; rc != "2" {
			t.Fatalf("dead letter's retry count = %v, want 2 (the cap)", rc)
		}
		if reason, _ := msgs[0].Values[settle.HeaderDeadReason].(string); !strings.Contains(reason, "never settled") {
			t.Fatalf("dead letter's reason = %q, want it to say the deliveries never settled", reason)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending after the dead letter, want 0", n)
		}
	})

	t.Run("ReplayedDeadLetterStillRuns", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		// A dead letter moved back as it is: its retry count is the cap, but this is its
		// first delivery in the group.
		id, err := w.r.Client.XAdd(w.ctx, &redis.XAddArgs{Stream: w.in, Values: map[string]any{"payload": "replayed", settle.HeaderRetryCount: "2"}}).Result()
		if err != nil {
			t.Fatalf("xadd: %v", err)
		}
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter(w.dlq))
		w.run(t, app)

		acked := w.waitEvents(t, "the ack", 1, func(e settle.Settled) bool { return e.ID == id })
		if acked[0].Action != settle.ActionAck {
			t.Fatalf("replayed entry settled %+v, want acked after one run", acked[0])
		}
		if got := a.all(); len(got) != 1 || got[0].attempt != 3 {
			t.Fatalf("handler saw %+v, want one run at attempt 3", got)
		}
	})
}
