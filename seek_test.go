package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/settlekit/settle"
	"github.com/settlekit/settle/internal/redistest"
)

func TestSeek(t *testing.T) {
	t.Parallel()

	t.Run("StreamRedeliversWithTheRetryCountHeaderUnchanged", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		plain := w.publish(t, "plain", nil)
		// A retry copy written by another subscription: retry count 2.
		copied, err := w.r.Client.XAdd(w.ctx, &redis.XAddArgs{Stream: w.in, Values: []any{"payload", "x", settle.HeaderRetryCount, "2"}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		src := settle.Stream(w.r.Client, w.in, w.group, settle.Block(50*time.Millisecond))
		w.run(t, w.app(t, src, settle.HandlerFunc(func(context.Context, *settle.Message) error { return nil })))
		w.waitEvents(t, "both acked", 2, func(e settle.Settled) bool { return e.Action == settle.ActionAck })

		if err := src.Seek(w.ctx, "0"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		acks := w.waitEvents(t, "both acked again", 4, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		want := map[string]int{plain: 1, copied: 3}
		for _, e := range acks[2:] {
			if e.Attempt != want[e.ID] {
				t.Fatalf("replayed %s at attempt %d, want %d (the retry-count header is unchanged)", e.ID, e.Attempt, want[e.ID])
			}
		}
		if acks[2].ID == acks[3].ID {
			t.Fatalf("replay delivered %s twice and not the other entry", acks[2].ID)
		}
	})

	t.Run("ClaimingStreamRestartsTheDeliveryCount", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		id := w.publish(t, "x", nil)
		second := make(chan struct{})
		seeked := make(chan struct{})
		var releaseOnce sync.Once
		release := func() { releaseOnce.Do(func() { close(seeked) }) }
		var a attempts
		src := w.claiming()
		w.run(t, w.app(t, src, settle.HandlerFunc(func(_ context.Context, m *settle.Message) error {
			a.add(m, w.now())
			switch len(a.all()) {
			case 1:
				return errClaimTest
			case 2:
				close(second)
				<-seeked
				return errClaimTest
			}
			return nil
		}), settle.Concurrency(1), settle.MaxAttempts(5)))
		t.Cleanup(release) // runs before Run's cleanup: a failed test does not hang the handler

		w.waitEvents(t, "the first retry", 1, func(e settle.Settled) bool { return e.Action == settle.ActionLeave })
		w.advance(w.idle)
		select {
		case <-second:
		case <-time.After(claimWait):
			t.Fatal("the retry did not come back after min-idle")
		}
		if err := src.Seek(w.ctx, "0"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		release()
		acked := w.waitEvents(t, "the replayed delivery", 1, func(e settle.Settled) bool { return e.Action == settle.ActionAck })
		if acked[0].ID != id || acked[0].Attempt != 1 {
			t.Fatalf("replayed delivery = %+v, want %s at attempt 1: Redis counts deliveries from 1 again", acked[0], id)
		}
		got := a.all()
		if len(got) != 3 || got[0].attempt != 1 || got[1].attempt != 2 || got[2].attempt != 1 {
			t.Fatalf("attempts seen = %+v, want 1, 2, then 1 after the seek", got)
		}
	})

	t.Run("CreatesAMissingGroupAtTheID", func(t *testing.T) {
		t.Parallel()
		redistest.RealOnly(t) // miniredis does not implement XGROUP SETID
		w := setupClaimWorld(t)
		w.publish(t, "old", nil)
		src := settle.Stream(w.r.Client, w.in, w.group)
		if err := src.Seek(w.ctx, "$"); err != nil {
			t.Fatalf("Seek: %v", err)
		}
		groups, err := w.r.Client.XInfoGroups(w.ctx, w.in).Result()
		if err != nil || len(groups) != 1 || groups[0].Name != w.group {
			t.Fatalf("groups = %+v (%v), want %s", groups, err, w.group)
		}
		last, err := w.r.Client.XInfoStream(w.ctx, w.in).Result()
		if err != nil || groups[0].LastDeliveredID != last.LastGeneratedID {
			t.Fatalf("group at %s, want the stream's end %s (%v)", groups[0].LastDeliveredID, last.LastGeneratedID, err)
		}
	})
}
