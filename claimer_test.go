package settle_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/sourcetest"
)

func TestReclaim(t *testing.T) {
	t.Parallel()

	reclaiming := func(w *claimWorld) *settle.StreamSource {
		return settle.Stream(w.r.Client, w.in, w.group, settle.Block(50*time.Millisecond), settle.Reclaim(w.idle))
	}

	t.Run("TakesOverEntriesADeadConsumerLeftPending", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		ids := []string{w.publish(t, 1, nil), w.publish(t, 2, nil)}
		w.crash(t, "dead", 2)
		crashed := w.now()
		var a attempts
		app := w.app(t, reclaiming(w), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			return nil
		}))
		w.run(t, app)

		w.advance(w.idle)
		acked := w.waitEvents(t, "both reclaimed entries acked", 2, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		got := map[string]bool{}
		for _, e := range acked {
			if e.Attempt != 2 {
				t.Fatalf("ack = %+v, want attempt 2 (the dead consumer's delivery counts)", e)
			}
			got[e.ID] = true
		}
		if !got[ids[0]] || !got[ids[1]] {
			t.Fatalf("acked %+v, want both entries %v", acked, ids)
		}
		for _, s := range a.all() {
			if waited := s.at.Sub(crashed); waited < w.idle {
				t.Fatalf("entry %s reclaimed %s after its consumer died, want at least %s", s.id, waited, w.idle)
			}
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending after the reclaim, want 0", n)
		}
	})

	t.Run("ACrashedDeliverySpendsAnAttemptAndTheCapDeadLettersWithoutARun", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		id := w.publish(t, "kills its consumer", nil)
		w.crash(t, "dead", 1)
		// A second consumer took it over and died too: Redis counts 2 deliveries.
		if err := w.r.Client.XClaim(w.ctx, &redis.XClaimArgs{Stream: w.in, Group: w.group, Consumer: "dead2", Messages: []string{id}}).Err(); err != nil {
			t.Fatalf("xclaim: %v", err)
		}
		ran := make(chan int, 4)
		app := w.app(t, reclaiming(w), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			ran <- m.Attempt
			return nil
		}), settle.MaxAttempts(2), settle.DeadLetter(w.dlq))
		w.run(t, app)

		w.advance(w.idle)
		dead := w.waitEvents(t, "the dead letter", 1, func(e settle.Settled) bool { return e.Action == settle.ActionDeadLetter })
		// It arrives at attempt 3 (two crashed deliveries and the claim), past the cap:
		// settled as a failure at the cap.
		if dead[0].ID != id || dead[0].Attempt != 2 || dead[0].Err != nil {
			t.Fatalf("dead letter = %+v, want %s dead-lettered at the cap, attempt 2", dead[0], id)
		}
		select {
		case a := <-ran:
			t.Fatalf("the handler ran (attempt %d) for a delivery whose attempts crashed consumers spent", a)
		default:
		}
		msgs, err := w.r.Client.XRange(w.ctx, w.dlq, "-", "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead letters = %v (%v), want 1", msgs, err)
		}
		if rc := msgs[0].Values[settle.HeaderRetryCount]; rc != "2" {
			t.Fatalf("dead letter's retry count = %v, want the cap, 2", rc)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending, want 0", n)
		}
	})

	t.Run("RetriesOfReclaimedEntriesAreCopies", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		id := w.publish(t, "x", nil)
		w.crash(t, "dead", 1)
		app := w.app(t, reclaiming(w), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			if m.Attempt == 2 {
				return settle.Retry(errClaimTest)
			}
			return nil
		}), settle.MaxAttempts(4))
		w.run(t, app)

		w.advance(w.idle)
		copied := w.waitEvents(t, "the retry copy", 1, func(e settle.Settled) bool { return e.Action == settle.ActionCopy })
		if copied[0].ID != id || copied[0].Attempt != 2 || copied[0].Err != nil {
			t.Fatalf("retry = %+v, want a copy of %s at attempt 2", copied[0], id)
		}
		acked := w.waitEvents(t, "the copy acked", 1, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		if acked[0].ID == id || acked[0].Attempt != 3 {
			t.Fatalf("ack = %+v, want the copy (a new entry) at attempt 3", acked[0])
		}
		msgs, err := w.r.Client.XRange(w.ctx, w.in, "-", "+").Result()
		if err != nil || len(msgs) != 2 {
			t.Fatalf("stream = %v (%v), want the original and its copy", msgs, err)
		}
		if rc := msgs[1].Values[settle.HeaderRetryCount]; rc != "2" {
			t.Fatalf("copy's retry count = %v, want 2 (the crashed delivery and the failed one)", rc)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending, want 0", n)
		}
	})

	t.Run("RunsEachEntryTakenOverFromADeadConsumerAlone", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		for i := range 12 {
			w.publish(t, i, nil)
		}
		w.crash(t, "dead", 12)
		for i := range 6 {
			w.publish(t, fmt.Sprintf("fresh-%d", i), nil)
		}
		// While an entry taken over runs, the live consumer holds it alone: no other
		// handler runs, and nothing else is pending to it (read ahead, or acked and not
		// yet written).
		var mu sync.Mutex
		var running sourcetest.Concurrent
		var problems []string
		app := w.app(t, reclaiming(w), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			alone, leave := running.Enter()
			defer leave()
			if m.Attempt == 2 {
				p, err := w.r.Client.XPending(w.ctx, w.in, w.group).Result()
				if err != nil {
					return settle.Drop(err)
				}
				mine := sum(p.Consumers) - p.Consumers["dead"]
				if !alone || mine != 1 {
					mu.Lock()
					problems = append(problems, fmt.Sprintf("%s ran beside others (alone %v, %d pending to the live consumer)", m.ID, alone, mine))
					mu.Unlock()
				}
			}
			return nil
		}), settle.Concurrency(3))
		w.run(t, app)
		w.advance(w.idle)
		acked := w.waitEvents(t, "all 18 acked", 18, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		taken := 0
		for _, e := range acked {
			if e.Attempt == 2 {
				taken++
			}
		}
		if taken != 12 {
			t.Fatalf("%d acks at attempt 2, want the 12 taken over (their dead delivery counts)", taken)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(problems) > 0 {
			t.Fatal(strings.Join(problems, "; "))
		}
	})

	t.Run("ValidateRefusesAnIdleBelowAMillisecond", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		app, _ := settle.New(settle.Config{})
		app.Mount(settle.Stream(w.r.Client, w.in, w.group, settle.Reclaim(500*time.Microsecond)), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		if err := app.Validate(); !containsErr(err, "Reclaim(500µs): must be at least 1ms") {
			t.Fatalf("Validate = %v, want the Reclaim refusal", err)
		}
	})
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}
