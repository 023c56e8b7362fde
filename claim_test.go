package settle_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/delayed"
	"github.com/settlekit/settle/internal/redistest"
	"github.com/settlekit/settle/settletest"
)

func TestClaimingStream(t *testing.T) {
	t.Parallel()

	t.Run("RetryLeavesTheEntryPendingAndItComesBackAfterMinIdle", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		id := w.publish(t, "refund", nil)
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			if m.Attempt == 1 {
				return errClaimTest
			}
			return nil
		}))
		w.run(t, app)

		left := w.waitEvents(t, "the retry", 1, func(e settle.Settled) bool { return e.Action == settle.ActionLeave })
		if left[0].ID != id || left[0].Attempt != 1 || left[0].Err != nil {
			t.Fatalf("retry = %+v, want entry %s left pending at attempt 1", left[0], id)
		}
		if owner, count, ok := w.pendingEntry(t, id); !ok || owner == "" || count < 1 {
			t.Fatalf("entry %s after the retry: pending %v (owner %q, count %d), want pending", id, ok, owner, count)
		}
		if n := w.xlen(t, w.in); n != 1 {
			t.Fatalf("stream length after the retry = %d, want 1: a claiming stream copies nothing", n)
		}

		w.advance(w.idle)
		acked := w.waitEvents(t, "the second delivery", 1, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		if acked[0].ID != id || acked[0].Attempt != 2 {
			t.Fatalf("second delivery = %+v, want the same entry %s at attempt 2", acked[0], id)
		}
		got := a.all()
		if len(got) != 2 {
			t.Fatalf("handler saw %d deliveries, want 2", len(got))
		}
		if waited := got[1].at.Sub(got[0].at); waited < w.idle {
			t.Fatalf("the retry came back after %s, want at least min-idle %s", waited, w.idle)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending after the sourcetest.Ack, want 0", n)
		}
	})

	t.Run("CrashedDeliveriesCountTowardTheCap", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		id := w.publish(t, "poison", nil)
		// A worker read it and died holding it: delivery 1.
		w.crash(t, "crashed-worker", 1)
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			return errClaimTest
		}), settle.MaxAttempts(2), settle.DeadLetter(w.dlq))
		w.run(t, app)

		w.advance(w.idle)
		dead := w.waitEvents(t, "the dead letter", 1, func(e settle.Settled) bool { return e.Action == settle.ActionDeadLetter })
		if dead[0].ID != id || dead[0].Attempt != 2 || dead[0].Err != nil {
			t.Fatalf("dead letter = %+v, want entry %s dead-lettered at attempt 2", dead[0], id)
		}
		if got := a.all(); len(got) != 1 || got[0].attempt != 2 {
			t.Fatalf("handler saw %+v, want one delivery at attempt 2 (the crashed one counted)", got)
		}
		msgs, err := w.r.Client.XRange(w.ctx, w.dlq, "-", "+").Result()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dead letters = %v (%v), want 1", msgs, err)
		}
		if rc := msgs[0].Values[settle.HeaderRetryCount]; rc != "2" {
			t.Fatalf("dead letter's retry count = %v, want 2 (the cap)", rc)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending after the dead letter, want 0", n)
		}
	})

	t.Run("RetryAfterWaitsMinIdleAndWarnsOnce", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		short := w.publish(t, "short", nil)
		long := w.publish(t, "long", nil)
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			switch {
			case m.Attempt > 1:
				return nil
			case m.ID == short:
				return settle.RetryAfter(w.idle/10, errClaimTest)
			default:
				return settle.RetryAfter(w.idle*10, errClaimTest)
			}
		}))
		w.run(t, app)

		left := w.waitEvents(t, "both retries", 2, func(e settle.Settled) bool { return e.Action == settle.ActionLeave })
		for _, e := range left {
			if e.Delay != w.idle || e.Outcome != settle.OutcomeRetryAfter {
				t.Fatalf("retry = %+v, want a RetryAfter kept as min-idle %s", e, w.idle)
			}
		}
		w.advance(w.idle)
		w.waitEvents(t, "both acks", 2, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		first := map[string]time.Time{}
		for _, s := range a.all() {
			if s.attempt == 1 {
				first[s.id] = s.at
				continue
			}
			waited := s.at.Sub(first[s.id])
			if waited < w.idle {
				t.Fatalf("entry %s came back after %s, want min-idle %s", s.id, waited, w.idle)
			}
			if s.id == long && waited >= w.idle*10 {
				t.Fatalf("the long delay was kept (%s): want it cut to min-idle %s", waited, w.idle)
			}
		}
		if n := len(w.logs.Containing("rounded")); n != 1 {
			t.Fatalf("the rounding warning was logged %d times, want once per mount", n)
		}
	})

	t.Run("RetryAfterWithADurableZsetKeepsEachDelay", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		delay := 5 * w.idle
		zset := w.r.Key("delayed")
		id := w.publish(t, "later", nil)
		var a attempts
		app := w.app(t, w.claiming(), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			if m.Attempt == 1 {
				return settle.RetryAfter(delay, errClaimTest)
			}
			return nil
		}), settle.DelayIn(delayed.DurableZset{Key: zset}), settle.MaxAttempts(5))
		w.run(t, app)

		parked := w.waitEvents(t, "the park", 1, func(e settle.Settled) bool { return e.Action == settle.ActionPark })
		if parked[0].ID != id || parked[0].Delay != delay || parked[0].Err != nil {
			t.Fatalf("retry = %+v, want %s parked for %s as asked", parked[0], id, delay)
		}
		if w.clock != nil {
			// Past min-idle, short of the delay: a min-idle wait would deliver it now.
			w.advance(delay - w.idle)
			if n, err := w.r.Client.ZCard(w.ctx, zset).Result(); err != nil || n != 1 {
				t.Fatalf("delay set holds %d members (%v) before the delay passed, want 1", n, err)
			}
			w.advance(w.idle)
		}
		acked := w.waitEvents(t, "the delayed delivery", 1, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		if acked[0].ID == id || acked[0].Attempt != 2 {
			t.Fatalf("delayed delivery = %+v, want a new entry (the parked copy) at attempt 2", acked[0])
		}
		got := a.all()
		if len(got) != 2 {
			t.Fatalf("handler saw %d deliveries, want 2", len(got))
		}
		if waited := got[1].at.Sub(got[0].at); waited < delay {
			t.Fatalf("the delayed retry came back after %s, want the %s asked (not min-idle %s)", waited, delay, w.idle)
		}
		if n := len(w.logs.Containing("rounded")); n != 0 {
			t.Fatalf("the rounding warning was logged %d times with a durable delay set, want never", n)
		}
		if n := w.pendingCount(t); n != 0 {
			t.Fatalf("%d entries pending, want 0", n)
		}
	})

	t.Run("HeartbeatKeepsALongHandlersEntryFromOtherConsumers", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		if w.clock == nil {
			// Heartbeats every min-idle/3 on the wall clock: 100 ms leaves a loaded
			// machine (CI beside other test binaries) 33 ms of scheduling slack, and a
			// late beat lets B claim the entry; the rule is the same at 600 ms.
			w.idle = 600 * time.Millisecond
		}
		long := w.publish(t, "long", nil)
		release := make(chan struct{})
		var releaseOnce sync.Once
		releaseLong := func() { releaseOnce.Do(func() { close(release) }) }
		started := make(chan struct{})
		beats := make(chan struct{}, 16)
		srcA := w.claiming(settle.Consumer("a"))
		settle.SetClaimingOnBeat(srcA, func() {
			select {
			case beats <- struct{}{}:
			default:
			}
		})
		appA := w.app(t, srcA, settle.HandlerFunc(func(ctx context.Context, m *settle.Message) error {
			if m.ID == long {
				close(started)
				<-release
			}
			return nil
		}), settle.Concurrency(1), settle.Prefetch(0), settle.Name("a")) // A reads no further while it handles the long entry
		w.run(t, appA)
		<-started

		// An entry a dead worker holds: B claims it once it is idle, which shows B scans.
		orphan := w.publish(t, "orphan", nil)
		w.crash(t, "dead", 1)
		appB := w.app(t, w.claiming(settle.Consumer("b")), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }), settle.Name("b"))
		w.run(t, appB)
		t.Cleanup(releaseLong) // runs before the Apps' cleanups: a failed test does not hang

		if w.clock != nil {
			// Three beats of A cover min-idle: after each, the long entry is fresh again.
			for range 3 {
				w.advance(w.idle / 3)
				select {
				case <-beats:
				case <-time.After(claimWait):
					t.Fatal("no heartbeat after the clock passed min-idle/3")
				}
			}
		}
		w.waitEvents(t, "B claiming the orphan", 1, func(e settle.Settled) bool { return e.Mount == "b" && e.ID == orphan })
		if w.clock == nil {
			// On the wall clock let the long handler outlive min-idle several times over.
			<-time.After(5 * w.idle)
		}
		owner, count, ok := w.pendingEntry(t, long)
		if !ok || owner != "a" || count != 1 {
			t.Fatalf("long entry: pending %v at %q with count %d, want still at a with count 1 (heartbeats are not deliveries)", ok, owner, count)
		}
		releaseLong()
		acked := w.waitEvents(t, "A's ack", 1, func(e settle.Settled) bool { return e.ID == long })
		if acked[0].Mount != "a" || acked[0].Attempt != 1 || acked[0].Action != settle.ActionAck {
			t.Fatalf("long entry settled %+v, want acked by a at attempt 1", acked[0])
		}
		for _, e := range w.events() {
			if e.Mount == "b" && e.ID == long {
				t.Fatalf("b handled the entry a was still handling: %+v", e)
			}
		}
	})

	t.Run("ValidateRefusesBadSettings", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		app, _ := settle.New(settle.Config{})
		app.Mount(settle.ClaimingStream(w.r.Client, w.in, w.group, 0), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		err := app.Validate()
		var ce *settle.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("Validate = %v, want config errors", err)
		}
		for _, want := range []string{"ClaimingStream(…, minIdle 0s): must be at least 1ms"} {
			if !containsErr(err, want) {
				t.Fatalf("Validate = %v, want it to say %q", err, want)
			}
		}
	})

	// TestClaimingStream/AZeroMinIdleIsRefusedOnceInTheOptionsWords: the refusal names
	// the argument the user wrote, once; the engine's own check of the transport's
	// capabilities ("RetryWithoutCap is leave without … a positive MinIdle") is not
	// said too.
	t.Run("AZeroMinIdleIsRefusedOnceInTheOptionsWords", func(t *testing.T) {
		t.Parallel()
		w := setupClaimWorld(t)
		app, _ := settle.New(settle.Config{})
		app.Mount(settle.ClaimingStream(w.r.Client, w.in, w.group, 0), settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil }))
		err := app.Validate()
		if err == nil || strings.Count(err.Error(), "minIdle") != 1 || strings.Contains(err.Error(), "RetryWithoutCap") {
			t.Fatalf("Validate = %v; want one refusal, of ClaimingStream's minIdle", err)
		}
	})
}

// Reclaim is a Stream option only: a claiming stream always claims what has been idle
// for its minIdle, so the compiler refuses Reclaim there.
func TestReclaimIsNotAClaimingStreamOption(t *testing.T) {
	t.Parallel()
	if _, ok := any(settle.Reclaim(time.Second)).(settle.ClaimingStreamOption); ok {
		t.Fatal("Reclaim is a ClaimingStreamOption")
	}
	for name, o := range map[string]any{"Batch": settle.Batch(1), "Block": settle.Block(time.Second), "Consumer": settle.Consumer("c"), "StartAt": settle.StartAt("$")} {
		if _, ok := o.(settle.ClaimingStreamOption); !ok {
			t.Errorf("%s is not a ClaimingStreamOption", name)
		}
		if _, ok := o.(settle.StreamOption); !ok {
			t.Errorf("%s is not a StreamOption", name)
		}
	}
}

func containsErr(err error, s string) bool {
	return err != nil && strings.Contains(err.Error(), s)
}

// TestClaimingStreamBackoffPassesWithAdvance is seed 002's test story on the claiming
// subscription: a 30 s min-idle backoff passes at once when the test kit advances its
// clock (which moves miniredis's clock, and so the entry's idle time, with it).
func TestClaimingStreamBackoffPassesWithAdvance(t *testing.T) {
	t.Parallel()
	if redistest.Real() {
		t.Skip("a fake clock cannot move a real server's idle times; runs on miniredis")
	}
	h := settletest.New(t)
	in := h.Redis.Key("refunds.priority")
	h.Mount(settle.ClaimingStream(h.Redis.Client, in, "refunds", 30*time.Second), settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
		if m.Attempt == 1 {
			return settle.Retry(errClaimTest)
		}
		return nil
	}), settle.MaxAttempts(5), settle.DeadLetter(h.Redis.Key("refunds.dlq")))
	h.Start()
	id := h.Publish(in, "refund")
	h.WaitAction(settle.ActionLeave, 1)
	start := time.Now()
	h.Advance(30 * time.Second)
	evs := h.WaitAction(settle.ActionAck, 1)
	last := evs[len(evs)-1]
	if len(evs) != 2 || last.Action != settle.ActionAck || last.ID != id || last.Attempt != 2 {
		t.Fatalf("after the backoff: %+v, want the retry then %s acked at attempt 2", evs, id)
	}
	if took := time.Since(start); took >= 30*time.Second {
		t.Fatalf("the 30s backoff took %s of real time, want it to pass at once", took)
	}
}

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
